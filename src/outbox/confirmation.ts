import type { Statement } from "bun:sqlite";
import { type ConfirmedSlice, DELIVERED, type DeliveredWriter } from "./delivered.ts";
import type { Layout } from "./layout.ts";
import type { QueueFile } from "./queue-file.ts";
import { LAYOUTS } from "./schema.ts";
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
        if (slice.rows === 0 || slice.first === null || slice.last === null) return 0;
        this.#log.record(
          {
            namespace: file.namespace,
            first: slice.first,
            last: slice.last,
            rows: slice.rows,
            firstPrev: slice.firstPrev,
          },
          isoTimestamp(now),
          now.getTime(),
        );
        this.#deleteRange.run(file.namespace, slice.first, slice.last);
        this.#dropSpans.run(slice.last);
        return slice.rows;
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
