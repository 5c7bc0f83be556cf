import { NotFoundError } from "../errors.ts";
import type { Appender } from "./append.ts";
import type { QueueFile } from "./queue-file.ts";
import { QUEUE_ROW_COLUMNS, type ChainGap, type OutboxRow } from "./rows.ts";
import { queueInsertSql, raiseSequence, renumberOrds } from "./schema.ts";
import { isoTimestamp } from "./timestamp.ts";

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
}

/** What `Outbox.resequenceAbove` moved: `count` pending rows from `oldFirst..oldLast` to `newFirst..newLast`. */
export interface Resequenced {
  count: number;
  oldFirst: number;
  oldLast: number;
  newFirst: number;
  newLast: number;
}

/**
 * The drain's bookkeeping on one queue: reading rows to deliver, charging attempts before a
 * delivery, recording failures, the sent mark, confirming what a target applied (sync log +
 * delete), pruning the sync log, and moving the sequence above seqs a remote already holds.
 * Every method runs in its own transaction of the queue file.
 */
export class DeliveryLog {
  readonly #file: QueueFile;
  readonly #appender: Appender;
  /** The outbox_meta key of this namespace's sent mark. */
  readonly #sentKey: string;

  constructor(file: QueueFile, appender: Appender) {
    this.#file = file;
    this.#appender = appender;
    this.#sentKey = `sent:${file.namespace}`;
  }

  /** See Outbox.readForDelivery. */
  readForDelivery(limit: number, maxBytes: number, ready: (head: OutboxRow, pending: number) => boolean, after: number | null = null): DeliveryRead {
    const file = this.#file;
    return file.read("cannot read rows to deliver", () =>
      file.db.transaction((): DeliveryRead => {
        const pending = file.pendingCount();
        const rows: OutboxRow[] = [];
        let head: OutboxRow | null = null;
        let gap: ChainGap | null = null;
        let truncated = false;
        let bytes = 0;
        for (const row of file.pendingRows(after)) {
          if (head === null) {
            head = row;
            if (!ready(row, pending)) break;
          }
          bytes += row.tag.length + row.payload.length;
          if (rows.length > 0 && (rows.length >= limit || bytes > maxBytes)) {
            truncated = true;
            break;
          }
          const previous = rows[rows.length - 1];
          const linked = row.prevSeq === null || row.prevSeq === previous?.seq || file.exists(row.prevSeq);
          if (!linked) {
            gap = { seq: row.seq, prevSeq: row.prevSeq! };
            break;
          }
          rows.push(row);
        }
        return { head, pending, rows, gap, truncated };
      })(),
    );
  }

  /** Confirms every pending row at or below `bound` (sync log + delete, one transaction); returns how many. */
  confirmThrough(bound: number): number {
    const file = this.#file;
    const now = isoTimestamp();
    return file.write("cannot confirm", () => {
      file.db
        .query("INSERT OR IGNORE INTO outbox_sync_log (seq, namespace, synced_at) SELECT seq, namespace, ?1 FROM outbox_queue WHERE namespace = ?2 AND synced = 0 AND seq <= ?3")
        .run(now, file.namespace, bound);
      return file.db.query("DELETE FROM outbox_queue WHERE namespace = ? AND synced = 0 AND seq <= ?").run(file.namespace, bound).changes;
    });
  }

  /** Records the given rows in the sync log and deletes them from the queue, in ONE transaction. */
  confirm(seqs: readonly number[]): void {
    const file = this.#file;
    const now = isoTimestamp();
    file.write("cannot confirm", () => {
      const log = file.db.query(
        "INSERT OR IGNORE INTO outbox_sync_log (seq, namespace, synced_at) SELECT seq, namespace, ?1 FROM outbox_queue WHERE seq = ?2 AND namespace = ?3",
      );
      const del = file.db.query("DELETE FROM outbox_queue WHERE seq = ? AND namespace = ?");
      const headOrd = file.layout === "lean" ? this.#headOrd() : null;
      let deleted = 0;
      for (const seq of seqs) {
        log.run(now, seq, file.namespace);
        deleted += del.run(seq, file.namespace).changes;
      }
      // Lean files count pending rows by ord (consecutive from the head): a delete that was not a
      // prefix of the queue leaves the new head anywhere but `deleted` places on.
      if (headOrd !== null) {
        const next = this.#headOrd();
        if (next !== null && next !== headOrd + deleted) renumberOrds(file.db, file.namespace);
      }
    });
  }

  /** See Outbox.recordAttempt. */
  recordAttempt(seq: number, at: Date, sentThrough: number | null): void {
    const file = this.#file;
    const changes = file.write("cannot record attempt", () => {
      const changed = file.db
        .query("UPDATE outbox_queue SET attempts = attempts + 1, last_attempt_at = ?1 WHERE seq = ?2 AND namespace = ?3")
        .run(isoTimestamp(at), seq, file.namespace).changes;
      if (changed > 0 && sentThrough !== null) {
        file.db
          .query("INSERT INTO outbox_meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = max(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))")
          .run(this.#sentKey, sentThrough);
      }
      return changed;
    });
    if (changes === 0) throw this.#notPending(seq);
  }

  /** See Outbox.sentMark. */
  sentMark(): number {
    const file = this.#file;
    return file.read("cannot read the sent mark", () =>
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
    const changes = file.write("cannot refund attempt", () =>
      file.db.query("UPDATE outbox_queue SET attempts = max(attempts - 1, 0) WHERE seq = ?1 AND namespace = ?2").run(seq, file.namespace).changes,
    );
    if (changes === 0) throw this.#notPending(seq);
  }

  /** Records a failed delivery of a pending row: the error, its class and when to retry. */
  recordFailure(seq: number, error: string, errorClass: string | null, nextAttemptAt: Date): void {
    const file = this.#file;
    const changes = file.write("cannot record failure", () =>
      file.db
        .query("UPDATE outbox_queue SET last_error = ?3, last_error_class = ?4, next_attempt_at = ?5 WHERE seq = ?1 AND namespace = ?2")
        .run(seq, file.namespace, error, errorClass, isoTimestamp(nextAttemptAt)).changes,
    );
    if (changes === 0) throw this.#notPending(seq);
  }

  /** Makes the next allocated seq of the file greater than `minSeq`; never lowers it. */
  seedSequence(minSeq: number): void {
    const file = this.#file;
    file.write("cannot seed sequence", () => raiseSequence(file.db, file.layout, minSeq));
  }

  /** See Outbox.resequenceAbove. */
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
      raiseSequence(db, file.layout, minSeq);
      const page = db.query<OutboxRow, [string, number, number]>(
        `SELECT ${QUEUE_ROW_COLUMNS} FROM outbox_queue WHERE namespace = ? AND synced = 0 AND seq > ? AND seq <= ? ORDER BY seq LIMIT 1000`,
      );
      const copy = db.query(
        queueInsertSql(
          file.layout,
          ["namespace", "created_at", "source", "tag", "payload", "prev_seq", "attempts", "last_error", "last_error_class", "last_attempt_at", "next_attempt_at"],
          ["?1", "?2", "?3", "?4", "?5", "?6", "?7", "?8", "?9", "?10", "?11"],
        ),
      );
      const record = db.query(
        `INSERT INTO outbox_dead_log (seq, namespace, source, tag, payload, prev_seq, created_at, attempts, error, error_class, reason, dead_at, replayed_at, replayed_as_seq)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'resequenced', ?, ?, ?)`,
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
      for (let rows = page.all(namespace, after, range.last); rows.length > 0; rows = page.all(namespace, after, range.last)) {
        for (const r of rows) {
          const seq = Number(
            copy.run(namespace, r.createdAt, r.source, r.tag, r.payload, prev, r.attempts, r.lastError, r.lastErrorClass, r.lastAttemptAt, r.nextAttemptAt)
              .lastInsertRowid,
          );
          prev = seq;
          record.run(r.seq, namespace, r.source, r.tag, r.payload, r.prevSeq, r.createdAt, r.attempts, r.lastError, r.lastErrorClass, at, at, seq);
          remove.run(r.seq, namespace);
          if (newFirst === 0) newFirst = seq;
          newLast = seq;
          after = r.seq;
        }
      }
      return { count: range.count, oldFirst: range.first, oldLast: range.last, newFirst, newLast };
    });
  }

  /** See Outbox.pruneSyncLog. */
  pruneSyncLog(retainDays: number, now: Date): number {
    const file = this.#file;
    const cutoff = isoTimestamp(new Date(now.getTime() - retainDays * 86_400_000));
    return file.write("cannot prune sync log", () =>
      file.db
        .query(
          `DELETE FROM outbox_sync_log WHERE namespace = ?1 AND julianday(synced_at) < julianday(?2)
            AND NOT EXISTS (SELECT 1 FROM outbox_queue WHERE prev_seq = outbox_sync_log.seq)
            AND seq IS NOT (SELECT max(seq) FROM outbox_sync_log WHERE namespace = ?1)`,
        )
        .run(file.namespace, cutoff).changes,
    );
  }

  #headOrd(): number | null {
    return this.#file.db
      .query<{ ord: number }, [string]>("SELECT ord FROM outbox_queue WHERE namespace = ? AND synced = 0 ORDER BY seq LIMIT 1")
      .get(this.#file.namespace)?.ord ?? null;
  }

  #notPending(seq: number): NotFoundError {
    return new NotFoundError(`no pending row with seq ${seq} in namespace "${this.#file.namespace}" (${this.#file.path})`);
  }
}
