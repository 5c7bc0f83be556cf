import type { Statement } from "bun:sqlite";
import { type ConfirmedSlice, DELIVERED, type DeliveredWriter } from "./delivered.ts";
import type { Layout } from "./layout.ts";
import type { QueueFile } from "./queue-file.ts";
import { LAYOUTS } from "./schema.ts";
import { markedKey } from "./layout-lean.ts";
import { isoTimestamp } from "./timestamp.ts";

/**
 * How many rows one confirmation transaction deletes: every producer of the file waits for the
 * write lock while it is held, so a big confirmation (a settlement after a crash, a large backlog)
 * goes in chunks of a few milliseconds each.
 */
const CONFIRM_CHUNK_ROWS = 2_000;
/**
 * The same in an application's own database, where the application's writes wait for each: a
 * chunk short enough that they barely notice it (figures in docs/benchmarks.md, `app-writes`).
 * Files of ours keep the larger chunk: each transaction costs its commit.
 */
const EMBEDDED_CONFIRM_CHUNK_ROWS = 100;

/** Thrown inside a confirmation's transaction to roll it back: the queue is not what the caller knew. */
const NOT_AS_KNOWN = new Error("the queue changed under a confirmation");

/**
 * The local confirmation of delivered rows of one namespace: each recorded in the delivered log
 * (delivered.ts) and deleted from the queue, with the spans of groups left with nothing queued —
 * by bound and by slice for the drain (DrainQueue), by seqs for an application that delivers rows
 * itself (Outbox.confirm).
 */
export class Confirmation {
  /** Most rows one confirmation transaction takes (see EMBEDDED_CONFIRM_CHUNK_ROWS). */
  readonly chunkRows: number;
  readonly #file: QueueFile;
  readonly #layout: Layout;
  readonly #log: DeliveredWriter;
  readonly #slice: Statement<
    { first: number | null; last: number | null; rows: number; firstPrev: number | null },
    [string, number, number]
  >;
  readonly #deleteRange: Statement;
  readonly #dropSpans: Statement;
  /** The rows marked applied (synced = 1) at or below ?2: their first and last seq and count. */
  readonly #marked: Statement<{ first: number | null; last: number | null; rows: number }, [string, number]>;
  readonly #deleteMarked: Statement;
  readonly #prevOf: Statement<{ prev: number | null }, [number]>;
  readonly #lastMarked: Statement<{ seq: number }, [string]>;
  readonly #countMarked: Statement<unknown, [string, number]>;

  constructor(file: QueueFile) {
    this.#file = file;
    this.chunkRows = file.queueDb.embedded ? EMBEDDED_CONFIRM_CHUNK_ROWS : CONFIRM_CHUNK_ROWS;
    this.#layout = LAYOUTS[file.layout];
    this.#log = DELIVERED[file.layout].writer((sql) => file.prepare(sql));
    this.#slice = file.prepare(
      `SELECT first, last, rows, (SELECT prev_seq FROM outbox_queue WHERE seq = first) AS firstPrev FROM
        (SELECT min(seq) AS first, max(seq) AS last, count(*) AS rows FROM
          (SELECT seq FROM outbox_queue WHERE namespace = ?1 AND synced = 0 AND seq <= ?2 ORDER BY seq LIMIT ?3))`,
    );
    this.#deleteRange = file.prepare(
      "DELETE FROM outbox_queue WHERE namespace = ?1 AND synced = 0 AND seq >= ?2 AND seq <= ?3",
    );
    this.#marked = file.prepare(
      "SELECT min(seq) AS first, max(seq) AS last, count(*) AS rows FROM outbox_queue WHERE namespace = ?1 AND synced = 1 AND seq <= ?2",
    );
    this.#deleteMarked = file.prepare("DELETE FROM outbox_queue WHERE namespace = ?1 AND synced = 1 AND seq <= ?2");
    this.#prevOf = file.prepare("SELECT prev_seq AS prev FROM outbox_queue WHERE seq = ?");
    this.#lastMarked = file.prepare(
      "SELECT seq FROM outbox_queue WHERE namespace = ? AND synced = 1 ORDER BY seq DESC LIMIT 1",
    );
    // The count the lean layout's pending count takes them off by (see ORD_PENDING_SQL).
    this.#countMarked = file.prepare(
      "INSERT INTO outbox_meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + ?2",
    );
    // A group's rows are the seqs from its first to its last: once none is queued, nothing of it is left to deliver.
    this.#dropSpans = file.prepare(
      "DELETE FROM outbox_group WHERE grp <= ?1 AND NOT EXISTS (SELECT 1 FROM outbox_queue WHERE seq >= outbox_group.grp AND seq <= outbox_group.last_seq)",
    );
  }

  /**
   * Every pending row at or below `bound`, or its first `maxRows`; returns how many. In chunks of
   * chunkRows rows, one transaction each, from the head: a crash between two leaves a prefix
   * confirmed and the rest pending, which settlement confirms from the ledger.
   */
  through(bound: number, maxRows: number): number {
    const file = this.#file;
    let confirmed = 0;
    for (;;) {
      const now = new Date();
      const chunk = Math.min(this.chunkRows, maxRows - confirmed);
      const rows = file.write("cannot confirm", () => {
        this.#layout.adoptForeignRows(file.db); // a foreign row under a delivered seq is not delivered
        const slice = this.#slice.get(file.namespace, bound, chunk)!;
        // Rows a tenant template marked applied go with the pending rows around them: the queue
        // only ever loses a prefix (the lean layout counts pending rows by their position).
        const upTo = slice.rows === chunk && slice.last !== null ? slice.last : bound;
        const marked = this.#marked.get(file.namespace, upTo)!;
        if (slice.rows + marked.rows === 0) return 0;
        const first = Math.min(slice.first ?? Number.POSITIVE_INFINITY, marked.first ?? Number.POSITIVE_INFINITY);
        const last = Math.max(slice.last ?? 0, marked.last ?? 0);
        const firstPrev = first === slice.first ? slice.firstPrev : (this.#prevOf.get(first)?.prev ?? null);
        const confirmed = { namespace: file.namespace, first, last, rows: slice.rows + marked.rows, firstPrev };
        this.#log.record(confirmed, isoTimestamp(now), now.getTime());
        if (slice.first !== null && slice.last !== null) this.#deleteRange.run(file.namespace, slice.first, slice.last);
        if (marked.rows > 0) {
          this.#deleteMarked.run(file.namespace, upTo);
          this.#countMarked.run(markedKey(file.namespace), -marked.rows);
        }
        this.#dropSpans.run(last);
        return slice.rows + marked.rows;
      });
      confirmed += rows;
      if (rows < chunk || confirmed >= maxRows) return confirmed;
    }
  }

  /**
   * A slice the drain holds in memory — every pending row from `first` through `last`, `rows` of
   * them, the first linked to `firstPrev` — without reading the rows again, in one transaction.
   * Returns false, changing nothing, when the queue no longer holds exactly those rows (an
   * operator moved one meanwhile): the caller confirms by its bound then (`through`).
   */
  slice(slice: Omit<ConfirmedSlice, "namespace">): boolean {
    const file = this.#file;
    const known = { ...slice, namespace: file.namespace };
    const now = new Date();
    try {
      file.write("cannot confirm", () => {
        if (this.#layout.hasForeignRows(file.db)) throw NOT_AS_KNOWN; // they are adopted on the other path
        this.#log.record(known, isoTimestamp(now), now.getTime());
        if (this.#deleteRange.run(file.namespace, slice.first, slice.last).changes !== slice.rows) throw NOT_AS_KNOWN;
        this.#dropSpans.run(slice.last);
      });
      return true;
    } catch (error) {
      if ((error as { cause?: unknown }).cause === NOT_AS_KNOWN) return false; // rolled back
      throw error;
    }
  }

  /**
   * Marks the given pending rows applied by a target (synced = 1), in one transaction: a tenant
   * template delivers them out of the queue's order and they are confirmed with the prefix they
   * end up in (`through`); marked, they are read no more. The namespace's last row is never
   * marked, so the next row's position follows it. Returns how many were marked.
   */
  markApplied(seqs: readonly number[]): number {
    const file = this.#file;
    return file.write("cannot mark rows applied", () => {
      const tail = file.db
        .query<{ seq: number | null }, [string]>("SELECT max(seq) AS seq FROM outbox_queue WHERE namespace = ?")
        .get(file.namespace)!.seq;
      const mark = file.db.query<unknown, [number, string]>(
        "UPDATE outbox_queue SET synced = 1 WHERE seq = ? AND namespace = ? AND synced = 0",
      );
      let marked = 0;
      for (const seq of seqs) if (seq !== tail) marked += mark.run(seq, file.namespace).changes;
      if (marked > 0) this.#countMarked.run(markedKey(file.namespace), marked);
      return marked;
    });
  }

  /** The highest seq marked applied (see markApplied), or 0. */
  markedThrough(): number {
    return this.#lastMarked.get(this.#file.namespace)?.seq ?? 0;
  }

  /** The given pending rows, any set of them (unknown seqs are passed over), in ONE transaction. */
  seqs(seqs: readonly number[]): void {
    const file = this.#file;
    const now = new Date();
    const at = isoTimestamp(now);
    file.write("cannot confirm", () => {
      this.#layout.adoptForeignRows(file.db);
      const row = file.db.query<{ prev: number | null }, [number, string]>(
        "SELECT prev_seq AS prev FROM outbox_queue WHERE seq = ? AND namespace = ? AND synced = 0",
      );
      let lastDeleted = 0;
      for (const seq of [...new Set(seqs)].sort((a, b) => a - b)) {
        const found = row.get(seq, file.namespace);
        if (!found) continue;
        this.#log.record(
          { namespace: file.namespace, first: seq, last: seq, rows: 1, firstPrev: found.prev },
          at,
          now.getTime(),
        );
        if (this.#deleteRange.run(file.namespace, seq, seq).changes > 0) lastDeleted = seq;
        this.#dropSpans.run(seq);
      }
      // A pending row left below the last one deleted: the delete was not a prefix of the queue.
      const head = lastDeleted === 0 ? null : file.headSeq();
      if (head !== null && head < lastDeleted) this.#layout.closeHole(file.db, file.namespace);
    });
  }
}
