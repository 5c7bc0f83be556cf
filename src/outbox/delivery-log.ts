import type { Statement } from "bun:sqlite";
import { NotFoundError } from "../errors.ts";
import type { Appender } from "./append.ts";
import { type ConfirmedSlice, DELIVERED, type DeliveredSql, type DeliveredWriter } from "./delivered.ts";
import type { Layout } from "./layout.ts";
import type { QueueFile } from "./queue-file.ts";
import { QUEUE_ROW_COLUMNS, type ChainGap, type OutboxRow } from "./rows.ts";
import { LAYOUTS } from "./schema.ts";
import { isoTimestamp } from "./timestamp.ts";

/**
 * How many rows one confirmation transaction deletes, and how many log entries one pruning
 * transaction looks at: every producer of the file waits for the write lock while it is held, so
 * big confirmations (a settlement after a crash, a large backlog) and prunes of a long log go in
 * chunks of a few milliseconds each.
 */
const CONFIRM_CHUNK_ROWS = 2_000;
/**
 * The same in an application's own database, where the application's writes wait for each: a
 * hundred rows hold the lock about 0.1 ms (a 500-row batch's confirmation held it 0.35–0.5 ms in
 * one piece). Files of ours keep the larger chunk: each transaction costs its commit.
 */
const EMBEDDED_CONFIRM_CHUNK_ROWS = 100;
const PRUNE_CHUNK_ENTRIES = 500;

/** What the drain reads of one namespace for a batch, from one consistent state of the file. */
export interface DeliveryRead {
  /** The oldest pending row, or null when the namespace is empty. */
  head: OutboxRow | null;
  pending: number;
  /** The rows to deliver, head first; empty when `ready` said no. Cut before a chain gap. */
  rows: OutboxRow[];
  /** A row behind which the chain is broken (its `prevSeq` exists nowhere), if one was met. */
  gap: ChainGap | null;
  /** Reading stopped at `limit` or `maxBytes`: more rows are ready behind `rows`. */
  truncated: boolean;
  /**
   * The groups among `rows` that span namespaces, by group: the namespaces each touches (this one
   * included). Empty for the common case — a file with one table, or groups within one table.
   */
  spans: Map<number, string[]>;
  /** The highest seq `skip` passed over (null: none): rows up to it were looked at. */
  passedOver: number | null;
}

/** The head whose backoff `Outbox.retryHead` ended: its seq, the attempts it had, and when it was due (null: its group's backoff was on another table's head). */
export interface RetriedHead {
  seq: number;
  attempts: number;
  nextAttemptAt: string | null;
}

/** Thrown inside a confirmation's transaction to roll it back: the queue is not what the caller knew. */
const NOT_AS_KNOWN = new Error("the queue changed under a confirmation");

/** What `DrainQueue.resequenceAbove` moved: `count` pending rows from `oldFirst..oldLast` to `newFirst..newLast`. */
export interface Resequenced {
  count: number;
  oldFirst: number;
  oldLast: number;
  newFirst: number;
  newLast: number;
}

/**
 * The drain's bookkeeping on one queue: reading rows to deliver (whole groups only), charging
 * attempts before a delivery, recording failures, the sent mark, confirming what a target applied
 * (delivered log + delete), pruning the delivered log, and moving the sequence above seqs a remote
 * already holds. Every method runs in its own transaction of the queue file.
 */
export class DeliveryLog {
  readonly #file: QueueFile;
  readonly #appender: Appender;
  readonly #layout: Layout;
  readonly #delivered: DeliveredSql;
  /** The outbox_meta key of this namespace's sent mark. */
  readonly #sentKey: string;
  readonly #log: DeliveredWriter;
  readonly #confirmSlice: Statement<
    { first: number | null; last: number | null; rows: number; firstPrev: number | null },
    [string, number, number]
  >;
  readonly #deleteRange: Statement;
  readonly #dropSpans: Statement;
  readonly #spans: Statement<{ grp: number; namespaces: string }, [number, number]>;
  /** Most rows one confirmation transaction takes (see EMBEDDED_CONFIRM_CHUNK_ROWS). */
  readonly confirmChunkRows: number;

  constructor(file: QueueFile, appender: Appender) {
    this.#file = file;
    this.confirmChunkRows = file.queueDb.embedded ? EMBEDDED_CONFIRM_CHUNK_ROWS : CONFIRM_CHUNK_ROWS;
    this.#appender = appender;
    this.#layout = LAYOUTS[file.layout];
    this.#delivered = DELIVERED[file.layout];
    this.#sentKey = `sent:${file.namespace}`;
    this.#log = this.#delivered.writer((sql) => file.prepare(sql));
    this.#confirmSlice = file.prepare(
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
    this.#spans = file.prepare("SELECT grp, namespaces FROM outbox_group WHERE grp >= ?1 AND grp <= ?2");
  }

  /** See QueueForDrain.readForDelivery (drain-queue.ts). */
  readForDelivery(
    limit: number,
    maxBytes: number,
    ready: (head: OutboxRow, pending: number) => boolean,
    after: number | null = null,
    skip: ((row: OutboxRow) => boolean) | null = null,
  ): DeliveryRead {
    for (;;) {
      const read = this.#read(limit, maxBytes, ready, after, skip);
      if (read !== null) return read;
      // Rows a foreign writer inserted are given their place first: their seqs may be delivered ones.
      this.#file.write("cannot adopt rows another writer inserted", () => this.#layout.adoptForeignRows(this.#file.db));
    }
  }

  /** One read for delivery, or null when rows a foreign writer inserted must be adopted first. */
  #read(
    limit: number,
    maxBytes: number,
    ready: (head: OutboxRow, pending: number) => boolean,
    after: number | null,
    skip: ((row: OutboxRow) => boolean) | null,
  ): DeliveryRead | null {
    const file = this.#file;
    return file.read("cannot read rows to deliver", () =>
      file.db.transaction((): DeliveryRead | null => {
        if (this.#layout.hasForeignRows(file.db)) return null;
        const pending = file.pendingCount();
        const rows: OutboxRow[] = [];
        let head: OutboxRow | null = null;
        let gap: ChainGap | null = null;
        let truncated = false;
        let bytes = 0;
        /** Where the group of the last row read starts in `rows`: a slice ends only between groups. */
        let groupStart = 0;
        let grpMin = Number.POSITIVE_INFINITY;
        let grpMax = Number.NEGATIVE_INFINITY;
        let passedOver: number | null = null;
        for (const row of file.pendingRows(after)) {
          if (skip?.(row)) {
            passedOver = row.seq; // not read: neither counted nor returned
            continue;
          }
          if (head === null) {
            head = row;
            if (!ready(row, pending)) break;
          }
          const previous = rows[rows.length - 1];
          const continues = previous !== undefined && row.grp !== null && row.grp === previous.grp;
          if (!continues) groupStart = rows.length;
          bytes += row.tag.length + row.payload.length;
          if (groupStart > 0 && (rows.length >= limit || bytes > maxBytes)) {
            // The group this row belongs to does not fit behind the ones before it: it goes first in a
            // later slice, whole. The first group of a slice always goes, however large.
            rows.length = groupStart;
            truncated = true;
            break;
          }
          const linked = row.prevSeq === null || row.prevSeq === previous?.seq || file.exists(row.prevSeq);
          if (!linked) {
            gap = { seq: row.seq, prevSeq: row.prevSeq! };
            rows.length = groupStart; // never half a group
            break;
          }
          rows.push(row);
          if (row.grp !== null) {
            grpMin = Math.min(grpMin, row.grp);
            grpMax = Math.max(grpMax, row.grp);
          }
        }
        const spans = new Map<number, string[]>();
        if (rows.length > 0 && grpMin <= grpMax) {
          for (const { grp, namespaces } of this.#spans.all(grpMin, grpMax))
            spans.set(grp, JSON.parse(namespaces) as string[]);
        }
        return { head, pending, rows, gap, truncated, spans, passedOver };
      })(),
    );
  }

  /**
   * Confirms every pending row at or below `bound` (delivered log + delete), or its first `maxRows`;
   * returns how many. In chunks of confirmChunkRows rows, one transaction each, from the head: a
   * crash between two leaves a prefix confirmed and the rest pending, which settlement confirms
   * from the ledger.
   */
  confirmThrough(bound: number, maxRows = Number.POSITIVE_INFINITY): number {
    const file = this.#file;
    let confirmed = 0;
    for (;;) {
      const now = new Date();
      const chunk = Math.min(this.confirmChunkRows, maxRows - confirmed);
      const rows = file.write("cannot confirm", () => {
        this.#layout.adoptForeignRows(file.db); // a foreign row under a delivered seq is not delivered
        const slice = this.#confirmSlice.get(file.namespace, bound, chunk)!;
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
   * Confirms a slice the drain holds in memory — every pending row from `first` through `last`,
   * `rows` of them, the first linked to `firstPrev` — without reading the rows again: the delivered
   * log gets the slice and the rows are deleted, in one transaction. Returns false, changing
   * nothing, when the queue no longer holds exactly those rows (an operator moved one meanwhile):
   * the caller confirms by its bound then (confirmThrough).
   */
  confirmSlice(slice: Omit<ConfirmedSlice, "namespace">): boolean {
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

  /** Records the given rows as delivered and deletes them from the queue, in ONE transaction. */
  confirm(seqs: readonly number[]): void {
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

  /** See QueueForDrain.recordAttempt. */
  recordAttempt(seq: number, at: Date, sentThrough: number | null): void {
    const file = this.#file;
    const changes = file.write("cannot record attempt", () => {
      const changed = file.db
        .query(
          "UPDATE outbox_queue SET attempts = attempts + 1, last_attempt_at = ?1 WHERE seq = ?2 AND namespace = ?3",
        )
        .run(isoTimestamp(at), seq, file.namespace).changes;
      if (changed > 0 && sentThrough !== null) {
        file.db
          .query(
            "INSERT INTO outbox_meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = max(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))",
          )
          .run(this.#sentKey, sentThrough);
      }
      return changed;
    });
    if (changes === 0) throw this.#notPending(seq);
  }

  /** See QueueForDrain.sentMark. */
  sentMark(): number {
    const file = this.#file;
    return file.read(
      "cannot read the sent mark",
      () =>
        file.db
          .query<{ mark: number | null }, [string, string]>(
            `SELECT max(coalesce((SELECT CAST(value AS INTEGER) FROM outbox_meta WHERE key = ?1), 0),
            coalesce((SELECT sent_through FROM outbox_queue WHERE namespace = ?2 AND synced = 0 ORDER BY seq LIMIT 1), 0)) AS mark`,
          )
          .get(this.#sentKey, file.namespace)!.mark ?? 0,
    );
  }

  /** Undoes one attempt charge; never below zero. */
  refundAttempt(seq: number): void {
    const file = this.#file;
    const changes = file.write(
      "cannot refund attempt",
      () =>
        file.db
          .query("UPDATE outbox_queue SET attempts = max(attempts - 1, 0) WHERE seq = ?1 AND namespace = ?2")
          .run(seq, file.namespace).changes,
    );
    if (changes === 0) throw this.#notPending(seq);
  }

  /** See QueueForDrain.recordFailure. */
  recordFailure(seq: number, error: string, errorClass: string | null, nextAttemptAt: Date, attempts: number): void {
    const file = this.#file;
    const changes = file.write(
      "cannot record failure",
      () =>
        file.db
          .query(
            "UPDATE outbox_queue SET last_error = ?3, last_error_class = ?4, next_attempt_at = ?5, attempts = max(attempts, ?6) WHERE seq = ?1 AND namespace = ?2",
          )
          .run(seq, file.namespace, error, errorClass, isoTimestamp(nextAttemptAt), attempts).changes,
    );
    if (changes === 0) throw this.#notPending(seq);
  }

  /** See QueueForDrain.laneCount. */
  laneCount(): number | null {
    const file = this.#file;
    const value = file.read("cannot read the lane count", () =>
      file.db
        .query<{ value: string }, [string]>("SELECT value FROM outbox_meta WHERE key = ?")
        .get(`lanes:${file.namespace}`),
    );
    return value ? Number(value.value) : null;
  }

  /** See QueueForDrain.recordLaneCount. */
  recordLaneCount(lanes: number): void {
    const file = this.#file;
    file.write("cannot record the lane count", () =>
      file.db
        .query(
          "INSERT INTO outbox_meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .run(`lanes:${file.namespace}`, String(lanes)),
    );
  }

  /** See Outbox.retryHead. */
  retryHead(key: string | null = null): RetriedHead | null {
    const file = this.#file;
    return file.write("cannot end the head's backoff", () => {
      // With a key: the first pending row of that key (the head of its lane, when its lane is held).
      const head = file.db
        .query<RetriedHead & { grp: number | null }, [string, string | null]>(
          "SELECT seq, grp, attempts, next_attempt_at AS nextAttemptAt FROM outbox_queue WHERE namespace = ?1 AND synced = 0 AND (?2 IS NULL OR lane_key = ?2) ORDER BY seq LIMIT 1",
        )
        .get(file.namespace, key);
      if (!head) return null;
      // The head's group may carry its backoff on another table's head (a transaction across tables is charged where it failed).
      const ended = file.db
        .query(
          "UPDATE outbox_queue SET next_attempt_at = NULL WHERE synced = 0 AND next_attempt_at IS NOT NULL AND ((namespace = ?1 AND (?3 IS NULL OR lane_key = ?3)) OR grp = ?2)",
        )
        .run(file.namespace, head.grp, key).changes;
      return ended === 0 ? null : { seq: head.seq, attempts: head.attempts, nextAttemptAt: head.nextAttemptAt };
    });
  }

  /** Makes the next allocated seq of the file greater than `minSeq`; never lowers it. */
  seedSequence(minSeq: number): void {
    const file = this.#file;
    file.write("cannot seed sequence", () => this.#layout.raiseSequence(file.db, minSeq));
  }

  /** See QueueForDrain.resequenceAbove. */
  resequenceAbove(minSeq: number): Resequenced | null {
    const file = this.#file;
    const { db, namespace } = file;
    return file.write("cannot resequence", () => {
      const range = db
        .query<{ first: number | null; last: number | null; count: number }, [string]>(
          "SELECT min(seq) AS first, max(seq) AS last, count(*) AS count FROM outbox_queue WHERE namespace = ? AND synced = 0",
        )
        .get(namespace)!;
      if (range.first === null || range.last === null || range.first > minSeq) return null;
      this.#layout.raiseSequence(db, minSeq);
      const page = db.query<OutboxRow, [string, number, number]>(
        `SELECT ${QUEUE_ROW_COLUMNS} FROM outbox_queue WHERE namespace = ? AND synced = 0 AND seq > ? AND seq <= ? ORDER BY seq LIMIT 1000`,
      );
      const copy = db.query(
        this.#layout.insertSql(
          [
            "namespace",
            "created_at",
            "source",
            "tag",
            "payload",
            "prev_seq",
            "attempts",
            "last_error",
            "last_error_class",
            "last_attempt_at",
            "next_attempt_at",
            "grp",
            "traceparent",
            "tracestate",
            "lane_key",
          ],
          ["?1", "?2", "?3", "?4", "?5", "?6", "?7", "?8", "?9", "?10", "?11", "?12", "?13", "?14", "?15"],
        ),
      );
      const startGroup = db.query("UPDATE outbox_queue SET grp = ?1 WHERE seq = ?1");
      const record = db.query(
        `INSERT INTO outbox_dead_log (seq, namespace, source, tag, payload, prev_seq, created_at, attempts, error, error_class, reason, dead_at, replayed_at, replayed_as_seq, grp, traceparent, tracestate, lane_key)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'resequenced', ?, ?, ?, ?, ?, ?, ?)`,
      );
      const remove = db.query("DELETE FROM outbox_queue WHERE seq = ? AND namespace = ?");
      const at = isoTimestamp();
      let after = range.first - 1;
      let newFirst = 0;
      let newLast = 0;
      // New seqs are all above range.last (the sequence is at least there), so paging by old seq
      // never meets a copy. The first copy links to the old tail, which stays in the dead log;
      // each later one to the copy before it (the tail from then on), as a batch enqueue links.
      let prev = this.#appender.tail();
      // A group moves as a group: its copies form a new one, named by its first copy's seq. (A group
      // that spans namespaces is moved here only in this namespace: its parts are delivered apart.)
      let oldGroup: number | null = null;
      let newGroup: number | null = null;
      for (
        let rows = page.all(namespace, after, range.last);
        rows.length > 0;
        rows = page.all(namespace, after, range.last)
      ) {
        for (const r of rows) {
          const continues = r.grp !== null && r.grp === oldGroup;
          const seq: number = Number(
            copy.run(
              namespace,
              r.createdAt,
              r.source,
              r.tag,
              r.payload,
              prev,
              r.attempts,
              r.lastError,
              r.lastErrorClass,
              r.lastAttemptAt,
              r.nextAttemptAt,
              continues ? newGroup : null,
              r.traceparent,
              r.tracestate,
              r.laneKey,
            ).lastInsertRowid,
          );
          if (r.grp !== null && !continues) startGroup.run((newGroup = seq));
          oldGroup = r.grp;
          prev = seq;
          record.run(
            r.seq,
            namespace,
            r.source,
            r.tag,
            r.payload,
            r.prevSeq,
            r.createdAt,
            r.attempts,
            r.lastError,
            r.lastErrorClass,
            at,
            at,
            seq,
            r.grp,
            r.traceparent,
            r.tracestate,
            r.laneKey,
          );
          remove.run(r.seq, namespace);
          if (newFirst === 0) newFirst = seq;
          newLast = seq;
          after = r.seq;
        }
      }
      return { count: range.count, oldFirst: range.first, oldLast: range.last, newFirst, newLast };
    });
  }

  /**
   * See QueueForDrain.pruneSyncLog. By the log's namespace index, oldest first, PRUNE_CHUNK_ENTRIES entries
   * per write transaction, so producers never wait on a long prune; stops at the first chunk that
   * keeps an entry (the log is oldest first: what follows is newer), or after `maxChunks` (`done`
   * false: more may be due). Spared: the namespace's newest entry and the one holding the head's
   * predecessor (the chain's bridge).
   */
  pruneSyncLog(
    retainDays: number,
    now: Date,
    maxChunks = Number.POSITIVE_INFINITY,
  ): { removed: number; done: boolean } {
    const file = this.#file;
    const cutoff = isoTimestamp(new Date(now.getTime() - retainDays * 86_400_000));
    const prune = file.db.query(this.#delivered.prune);
    // The bridges: what the head links to, and what a row the reference's worker left at synced=1 links to.
    const bridge = file.db.query<{ prev: number | null }, [string, number]>(
      "SELECT prev_seq AS prev FROM outbox_queue WHERE namespace = ? AND synced = ? ORDER BY seq LIMIT 1",
    );
    let removed = 0;
    for (let chunk = 0; chunk < maxChunks; chunk++) {
      const changes = file.write("cannot prune the delivered log", () => {
        const bridges = [bridge.get(file.namespace, 0)?.prev ?? null, bridge.get(file.namespace, 1)?.prev ?? null];
        return prune.run(file.namespace, cutoff, PRUNE_CHUNK_ENTRIES, ...bridges).changes;
      });
      removed += changes;
      if (changes < PRUNE_CHUNK_ENTRIES) return { removed, done: true };
    }
    return { removed, done: false };
  }

  #notPending(seq: number): NotFoundError {
    return new NotFoundError(
      `no pending row with seq ${seq} in namespace "${this.#file.namespace}" (${this.#file.path})`,
    );
  }
}
