import { constants, type Database, type Statement } from "bun:sqlite";
import { resolve } from "node:path";
import { InvalidArgumentError, NotFoundError, OutboxClosedError, OutboxError, QueueFullError, StorageError } from "../errors.ts";
import { purgeCandidates, type DeadReplays, type PurgeOutcome, type PurgeRule } from "./dead-letters.ts";
import { namespaceHealth, type FileFeatures, type NamespaceHealth } from "./health.ts";
import { DEAD_ROW_COLUMNS, QUEUE_ROW_COLUMNS, type ChainGap, type DeadLetter, type DeadReason, type OutboxRow } from "./rows.ts";
import { NEXT_SLOT_SQL, pendingCountSql, queueInsertSql, queueLayout, raiseSequence, readOrigin, renumberOrds, type QueueLayout } from "./schema.ts";
import type { Durability } from "../vocabulary.ts";
import { openMigrated, storageError } from "./sqlite-open.ts";
import { isoTimestamp } from "./timestamp.ts";

export type { ChainGap, DeadLetter, DeadReason, OutboxRow } from "./rows.ts";

/** Options of an Outbox. Defaults: unbounded, `normal` durability, 10 s busy timeout, files created 0600. */
export interface OutboxOptions {
  /** Hard cap of pending rows in this namespace; `enqueue` throws QueueFullError at the cap. null = unbounded. */
  maxPending?: number | null;
  /** `normal` (synchronous=NORMAL, default) or `full` (synchronous=FULL). */
  durability?: Durability;
  /** How long a writer waits for another process's write lock before failing, ms. */
  busyTimeoutMs?: number;
  /** Permission bits of the file (and its -wal/-shm) when this Outbox creates it; an existing file keeps its mode. */
  fileMode?: number;
}

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

// The namespace tail is the last seq the namespace ever allocated, wherever that row is now:
// pending (synced=0, or a reference leftover synced=1), delivered (sync log) or dead-lettered.
// Linking a new row to a delivered predecessor keeps the chain verifiable across deliveries.
// coalesce() short-circuits, so the common case (pending rows exist) is one index descent.
const TAIL_SQL = `SELECT coalesce(
  (SELECT max(seq) FROM outbox_queue WHERE namespace = ?1 AND synced = 0),
  nullif(max(
    ifnull((SELECT max(seq) FROM outbox_queue WHERE namespace = ?1 AND synced = 1), -1),
    ifnull((SELECT max(seq) FROM outbox_sync_log WHERE namespace = ?1), -1),
    ifnull((SELECT max(seq) FROM outbox_dead_log WHERE namespace = ?1), -1)), -1)) AS tail`;

// How often a producer checks that its file is still the one at its path (a stat, ~0.9 µs: too
// dear for every enqueue). A file deleted or replaced while open would otherwise take every later
// event with it, silently; so at most this much is lost before enqueue throws.
const MOVED_CHECK_MS = 1_000;

// A file an Outbox opened went through openMigrated, so it has every table, column and trigger:
// health() need not read the schema, which would cost more than the health read itself.
const migrated = (layout: QueueLayout): FileFeatures => ({
  pendingCount: layout === "lean" ? "ord" : "counter", delivery: true, syncLog: true, deadLog: true, deadReplay: true,
});

/** What `Outbox.resequenceAbove` moved: `count` pending rows from `oldFirst..oldLast` to `newFirst..newLast`. */
export interface Resequenced {
  count: number;
  oldFirst: number;
  oldLast: number;
  newFirst: number;
  newLast: number;
}

/**
 * The local queue of one namespace in one SQLite file: an ordered, singly linked chain of events
 * (`prev_seq`) that producers append to and the drain delivers head first. Creates the file and
 * schema (idempotent migrations) but not the directory. Every failure throws a typed OutboxError.
 */
export class Outbox {
  /** Absolute path of the SQLite file. */
  readonly path: string;
  readonly namespace: string;
  readonly maxPending: number | null;
  /** `normal` (synchronous=NORMAL) or `full` (synchronous=FULL). */
  readonly durability: Durability;
  /** The file's origin id: how every target's delivery ledger knows this queue file. */
  readonly origin: string;
  #db: Database;
  #closed = false;
  #onClose: (() => void) | undefined;
  #movedCheckedAt = Date.now();
  #movedFlag = new Int32Array(2);
  #begin: Statement;
  #commit: Statement;
  #rollback: Statement;
  #layout: QueueLayout;
  /** The outbox_meta key of this namespace's sent mark. */
  #sentKey: string;
  #tail: Statement<{ tail: number | null }, [string]>;
  #pending: Statement<{ pending: number }, [string]>;
  #insert: Statement;
  #insertAtTail: Statement<unknown, [string, string, string, string, string]>;
  /** Lean layout only: the next free seq and ord, and an insert at a given seq and ord. */
  #nextSlot: Statement<{ seq: number; ord: number }, [string]> | null = null;
  #insertAt: Statement | null = null;
  #exists: Statement<{ found: number }, [number, string]>;
  #pendingRows: Statement<OutboxRow, [string]>;

  constructor(path: string, namespace: string, options: OutboxOptions = {}) {
    if (typeof path !== "string" || path === "") throw new InvalidArgumentError("outbox path must be a non-empty string");
    if (typeof namespace !== "string" || namespace === "" || !namespace.isWellFormed()) {
      throw new InvalidArgumentError(`outbox namespace must be a non-empty string (file ${path})`, { file: path });
    }
    const maxPending = options.maxPending ?? null;
    if (maxPending !== null && !(Number.isSafeInteger(maxPending) && maxPending > 0)) {
      throw new InvalidArgumentError(`maxPending must be a positive integer or null, got ${maxPending} (namespace "${namespace}" in ${path})`, { namespace, file: path });
    }
    const durability = options.durability ?? "normal";
    if (durability !== "normal" && durability !== "full") {
      throw new InvalidArgumentError(`durability must be "normal" or "full", got ${JSON.stringify(durability)} (namespace "${namespace}" in ${path})`, { namespace, file: path });
    }
    this.path = resolve(path);
    this.namespace = namespace;
    this.maxPending = maxPending;
    this.durability = durability;
    this.#sentKey = `sent:${namespace}`;
    this.#db = openMigrated(this.path, namespace, { durability, busyTimeoutMs: options.busyTimeoutMs ?? 10_000, fileMode: options.fileMode });
    try {
      this.origin = readOrigin(this.#db)!;
      this.#finishReferenceConfirms();
      const db = this.#db;
      this.#layout = queueLayout(db);
      this.#begin = db.prepare("BEGIN IMMEDIATE");
      this.#commit = db.prepare("COMMIT");
      this.#rollback = db.prepare("ROLLBACK");
      this.#tail = db.prepare(TAIL_SQL);
      this.#pending = db.prepare(pendingCountSql(this.#layout === "lean" ? "ord" : "counter"));
      const columns = ["created_at", "namespace", "source", "tag", "payload", "prev_seq"];
      this.#insert = db.prepare(queueInsertSql(this.#layout, columns, ["?2", "?1", "?3", "?4", "?5", "?6"]));
      this.#insertAtTail = db.prepare(queueInsertSql(this.#layout, columns, ["?2", "?1", "?3", "?4", "?5", `(${TAIL_SQL})`]));
      if (this.#layout === "lean") {
        this.#nextSlot = db.prepare(NEXT_SLOT_SQL);
        this.#insertAt = db.prepare(`INSERT INTO outbox_queue (seq, ord, ${columns.join(", ")}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`);
      }
      this.#pendingRows = db.prepare(`SELECT ${QUEUE_ROW_COLUMNS} FROM outbox_queue WHERE namespace = ? AND synced = 0 ORDER BY seq`);
      this.#exists = db.prepare(`SELECT
        EXISTS (SELECT 1 FROM outbox_queue WHERE seq = ?1 AND namespace = ?2)
        OR EXISTS (SELECT 1 FROM outbox_sync_log WHERE seq = ?1 AND namespace = ?2)
        OR EXISTS (SELECT 1 FROM outbox_dead_log WHERE seq = ?1 AND namespace = ?2) AS found`);
    } catch (e) {
      this.#db.close();
      throw storageError(e, "cannot prepare outbox", this.path, namespace);
    }
  }

  /**
   * Appends one event at the namespace tail and returns its seq: one write transaction that holds
   * the write lock from before the tail is read until the row is committed.
   */
  enqueue(tag: string, payload: string, source = ""): number {
    this.#open();
    this.#checkItem(tag, payload, source);
    this.#checkNotMoved();
    if (this.maxPending !== null) {
      return this.#write("cannot enqueue", () => {
        this.#checkCapacity(1);
        return this.#appendAtTail(tag, payload, source);
      });
    }
    // Unbounded: ONE autocommit statement whose VALUES reads the tail. SQLite takes the write lock
    // when the statement starts, before the subquery reads anything, and waits for it through the
    // busy handler exactly as BEGIN IMMEDIATE does; the BEGIN/tail/COMMIT round trips are saved.
    try {
      return this.#appendAtTail(tag, payload, source);
    } catch (e) {
      throw storageError(e, "cannot enqueue", this.path, this.namespace);
    }
  }

  /** Appends events in one transaction: item 0 links to the tail, item i to item i−1's seq. */
  enqueueBatch(items: ReadonlyArray<{ tag: string; payload: string }>, source = ""): number[] {
    this.#open();
    if (!Array.isArray(items)) throw this.#invalid("enqueueBatch expects an array of { tag, payload }");
    for (const item of items) this.#checkItem(item?.tag, item?.payload, source);
    this.#checkNotMoved();
    if (items.length === 0) return [];
    return this.#write("cannot enqueue batch", () => {
      this.#checkCapacity(items.length);
      const seqs: number[] = [];
      const append = this.#appender(isoTimestamp()); // one transaction, one creation time
      let prev = this.#tail.get(this.namespace)!.tail;
      for (const item of items) {
        prev = append(item.tag, item.payload, source, prev);
        seqs.push(prev);
      }
      return seqs;
    });
  }

  /** Up to `limit` pending rows of this namespace, ascending seq (the head first). */
  fetchUnsynced(limit: number): OutboxRow[] {
    this.#open();
    if (!Number.isSafeInteger(limit) || limit < 0) throw this.#invalid(`fetchUnsynced limit must be a non-negative integer, got ${limit}`);
    return this.#read("cannot fetch", () =>
      this.#db
        .query<OutboxRow, [string, number]>(
          `SELECT ${QUEUE_ROW_COLUMNS} FROM outbox_queue WHERE namespace = ? AND synced = 0 ORDER BY seq LIMIT ?`,
        )
        .all(this.namespace, limit),
    );
  }

  /** The oldest pending row of this namespace, or null when the queue is empty. */
  head(): OutboxRow | null {
    return this.fetchUnsynced(1)[0] ?? null;
  }

  /**
   * The drain's read of this namespace, in ONE read transaction: the head and the pending count,
   * and — when `ready(head, pending)` says so — up to `limit` rows head first, no more than
   * `maxBytes` of SQL text and payload (the first row always, however large), cut before the
   * first row whose chain link exists nowhere. Rows are streamed, so a backlog of large rows is
   * never loaded beyond the budget.
   */
  readForDelivery(limit: number, maxBytes: number, ready: (head: OutboxRow, pending: number) => boolean): DeliveryRead {
    this.#open();
    return this.#read("cannot read rows to deliver", () =>
      this.#db.transaction((): DeliveryRead => {
        const pending = this.#pending.get(this.namespace)!.pending;
        const rows: OutboxRow[] = [];
        let head: OutboxRow | null = null;
        let gap: ChainGap | null = null;
        let truncated = false;
        let bytes = 0;
        for (const row of this.#pendingRows.iterate(this.namespace)) {
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
          const linked = row.prevSeq === null || row.prevSeq === previous?.seq || this.#exists.get(row.prevSeq, this.namespace)!.found === 1;
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

  /**
   * Confirms every pending row at or below `bound` (sync log + delete, one transaction): the
   * drain's settlement of rows the delivery ledger says were applied. Returns how many.
   */
  confirmThrough(bound: number): number {
    this.#open();
    const now = isoTimestamp();
    return this.#write("cannot confirm", () => {
      this.#db
        .query("INSERT OR IGNORE INTO outbox_sync_log (seq, namespace, synced_at) SELECT seq, namespace, ?1 FROM outbox_queue WHERE namespace = ?2 AND synced = 0 AND seq <= ?3")
        .run(now, this.namespace, bound);
      return this.#db.query("DELETE FROM outbox_queue WHERE namespace = ? AND synced = 0 AND seq <= ?").run(this.namespace, bound).changes;
    });
  }

  /**
   * Checks that each row's `prevSeq` is the row before it in `rows`, or exists as a pending,
   * delivered (sync log) or dead-lettered row of this namespace. A null `prevSeq` starts a chain.
   */
  verifyChain(rows: readonly OutboxRow[]): { ok: boolean; gaps: ChainGap[] } {
    this.#open();
    const gaps: ChainGap[] = [];
    this.#read("cannot verify chain", () => {
      for (let i = 0; i < rows.length; i++) {
        const row = rows[i]!;
        if (row.prevSeq === null || row.prevSeq === undefined) continue;
        if (i > 0 && rows[i - 1]!.seq === row.prevSeq) continue;
        if (!this.#exists.get(row.prevSeq, this.namespace)!.found) gaps.push({ seq: row.seq, prevSeq: row.prevSeq });
      }
    });
    return { ok: gaps.length === 0, gaps };
  }

  /** Records delivered rows in the sync log and deletes them from the queue, in ONE transaction. */
  confirm(seqs: readonly number[]): void {
    this.#open();
    if (seqs.length === 0) return;
    const now = isoTimestamp();
    this.#write("cannot confirm", () => {
      const log = this.#db.query(
        "INSERT OR IGNORE INTO outbox_sync_log (seq, namespace, synced_at) SELECT seq, namespace, ?1 FROM outbox_queue WHERE seq = ?2 AND namespace = ?3",
      );
      const del = this.#db.query("DELETE FROM outbox_queue WHERE seq = ? AND namespace = ?");
      const headOrd = this.#layout === "lean" ? this.#headOrd() : null;
      let deleted = 0;
      for (const seq of seqs) {
        log.run(now, seq, this.namespace);
        deleted += del.run(seq, this.namespace).changes;
      }
      // Lean files count pending rows by ord (consecutive from the head): a delete that was not a
      // prefix of the queue leaves the new head anywhere but `deleted` places on.
      if (headOrd !== null) {
        const next = this.#headOrd();
        if (next !== null && next !== headOrd + deleted) renumberOrds(this.#db, this.namespace);
      }
    });
  }

  /** Pending rows of this namespace, without a scan (see PendingCount). */
  pendingCount(): number {
    this.#open();
    return this.#read("cannot count", () => this.#pending.get(this.namespace)!.pending);
  }

  /** Makes the next allocated seq of the file greater than `minSeq`; never lowers the counter. */
  seedSequence(minSeq: number): void {
    this.#open();
    if (!Number.isSafeInteger(minSeq) || minSeq < 0) throw this.#invalid(`seedSequence expects a non-negative integer, got ${minSeq}`);
    this.#write("cannot seed sequence", () => raiseSequence(this.#db, this.#layout, minSeq));
  }

  /**
   * Moves this namespace's WHOLE pending queue, in order, above `minSeq` when its head is at or
   * below it — rows whose seqs a remote already holds from elsewhere (another machine's queue)
   * would otherwise be absorbed there as duplicates. One transaction: seeds the sequence, then per
   * row appends a copy at the tail (created_at, source and delivery state kept, the chain linked
   * on) and records the old row in outbox_dead_log as `resequenced`, replayed as the new seq.
   * Returns the old and new ranges, or null when no pending row is at or below `minSeq`.
   */
  resequenceAbove(minSeq: number): Resequenced | null {
    this.#open();
    if (!Number.isSafeInteger(minSeq) || minSeq < 0) throw this.#invalid(`resequenceAbove expects a non-negative integer, got ${minSeq}`);
    return this.#write("cannot resequence", () => {
      const db = this.#db;
      const range = db
        .query<{ first: number | null; last: number | null; count: number }, [string]>(
          "SELECT min(seq) AS first, max(seq) AS last, count(*) AS count FROM outbox_queue WHERE namespace = ? AND synced = 0",
        )
        .get(this.namespace)!;
      if (range.first === null || range.last === null || range.first > minSeq) return null;
      raiseSequence(db, this.#layout, minSeq);
      const page = db.query<OutboxRow, [string, number, number]>(
        `SELECT ${QUEUE_ROW_COLUMNS} FROM outbox_queue WHERE namespace = ? AND synced = 0 AND seq > ? AND seq <= ? ORDER BY seq LIMIT 1000`,
      );
      const copy = db.query(
        queueInsertSql(
          this.#layout,
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
      // never meets a copy. The first copy links to the old tail, which stays in the dead log.
      for (let rows = page.all(this.namespace, after, range.last); rows.length > 0; rows = page.all(this.namespace, after, range.last)) {
        for (const r of rows) {
          const prev = this.#tail.get(this.namespace)!.tail;
          const seq = Number(
            copy.run(this.namespace, r.createdAt, r.source, r.tag, r.payload, prev, r.attempts, r.lastError, r.lastErrorClass, r.lastAttemptAt, r.nextAttemptAt)
              .lastInsertRowid,
          );
          record.run(r.seq, this.namespace, r.source, r.tag, r.payload, r.prevSeq, r.createdAt, r.attempts, r.lastError, r.lastErrorClass, at, at, seq);
          remove.run(r.seq, this.namespace);
          if (newFirst === 0) newFirst = seq;
          newLast = seq;
          after = r.seq;
        }
      }
      return { count: range.count, oldFirst: range.first, oldLast: range.last, newFirst, newLast };
    });
  }

  /**
   * Deletes this namespace's sync-log entries older than `retainDays` (compared as times, not
   * strings), except the entries that bridge the chain: any entry a queued row still links to (the
   * head's predecessor; also a reference leftover's) and the newest entry (the predecessor of the
   * next row once the queue is empty). Returns the count.
   */
  pruneSyncLog(retainDays: number, now: Date = new Date()): number {
    this.#open();
    if (!Number.isFinite(retainDays) || retainDays < 0) throw this.#invalid(`retainDays must be a non-negative number, got ${retainDays}`);
    const cutoff = isoTimestamp(new Date(now.getTime() - retainDays * 86_400_000));
    return this.#write("cannot prune sync log", () =>
      this.#db
        .query(
          `DELETE FROM outbox_sync_log WHERE namespace = ?1 AND julianday(synced_at) < julianday(?2)
            AND NOT EXISTS (SELECT 1 FROM outbox_queue WHERE prev_seq = outbox_sync_log.seq)
            AND seq IS NOT (SELECT max(seq) FROM outbox_sync_log WHERE namespace = ?1)`,
        )
        .run(this.namespace, cutoff).changes,
    );
  }

  /**
   * Charges one delivery attempt to a pending row BEFORE delivering it (crash-loop protection).
   * With `sentThrough`, also raises this namespace's sent mark to it, in the same transaction
   * (see `sentMark`).
   */
  recordAttempt(seq: number, at: Date = new Date(), sentThrough: number | null = null): void {
    this.#open();
    const changes = this.#write("cannot record attempt", () => {
      const changed = this.#db
        .query("UPDATE outbox_queue SET attempts = attempts + 1, last_attempt_at = ?1 WHERE seq = ?2 AND namespace = ?3")
        .run(isoTimestamp(at), seq, this.namespace).changes;
      if (changed > 0 && sentThrough !== null) {
        this.#db
          .query("INSERT INTO outbox_meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = max(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))")
          .run(this.#sentKey, sentThrough);
      }
      return changed;
    });
    if (changes === 0) throw new NotFoundError(`no pending row with seq ${seq} in namespace "${this.namespace}" (${this.path})`);
  }

  /**
   * The highest seq of this namespace ever sent to a target (0 when none): it only rises. Rows at
   * or below it may have been applied by a batch whose outcome is unknown — a crash, a timeout, a
   * COMMIT that becomes visible late — so the drain settles them from the delivery ledger; rows
   * above it were never sent. (Files written by earlier versions kept this on the head as
   * `sent_through`; it is honoured too.)
   */
  sentMark(): number {
    this.#open();
    return this.#read("cannot read the sent mark", () =>
      this.#db
        .query<{ mark: number | null }, [string, string]>(
          `SELECT max(coalesce((SELECT CAST(value AS INTEGER) FROM outbox_meta WHERE key = ?1), 0),
            coalesce((SELECT sent_through FROM outbox_queue WHERE namespace = ?2 AND synced = 0 ORDER BY seq LIMIT 1), 0)) AS mark`,
        )
        .get(this.#sentKey, this.namespace)!.mark ?? 0,
    );
  }

  /** Undoes one attempt charge (the target was down: not the row's fault); never below zero. */
  refundAttempt(seq: number): void {
    this.#update("cannot refund attempt", seq, "attempts = max(attempts - 1, 0)");
  }

  /** Records a failed delivery of a pending row: the error, its class and when to retry. */
  recordFailure(seq: number, error: string, errorClass: string, nextAttemptAt: Date): void {
    this.#update(
      "cannot record failure",
      seq,
      "last_error = ?3, last_error_class = ?4, next_attempt_at = ?5",
      String(error),
      errorClass === null || errorClass === undefined ? null : String(errorClass),
      isoTimestamp(nextAttemptAt),
    );
  }

  /**
   * Moves the head atomically to outbox_dead_log with a reason, so the namespace advances. `error`
   * and `errorClass` default to the head's last recorded failure.
   */
  deadLetter(seq: number, reason: DeadReason, error: string | null = null, errorClass: string | null = null): void {
    this.#open();
    if (typeof reason !== "string" || reason === "") throw this.#invalid("deadLetter needs a reason");
    this.#write("cannot dead-letter", () => {
      this.#requireHead(seq);
      this.#db
        .query(
          `INSERT INTO outbox_dead_log (seq, namespace, source, tag, payload, prev_seq, created_at, attempts, error, error_class, reason, dead_at)
           SELECT seq, namespace, source, tag, payload, prev_seq, created_at, attempts,
             coalesce(?1, last_error), coalesce(?2, last_error_class), ?3, ?4
           FROM outbox_queue WHERE seq = ?5 AND namespace = ?6`,
        )
        .run(error, errorClass, reason, isoTimestamp(), seq, this.namespace);
      this.#db.query("DELETE FROM outbox_queue WHERE seq = ? AND namespace = ?").run(seq, this.namespace);
    });
  }

  /** Operator action: dead-letters the head with reason "skipped". */
  skipHead(seq: number): void {
    this.deadLetter(seq, "skipped", "skipped by operator");
  }

  /** Re-enqueues a dead letter at the tail (once) and records replayed_at / replayed_as_seq; returns the new seq. */
  replayDead(seq: number, source?: string): number {
    this.#open();
    return this.#write("cannot replay dead letter", () => {
      const dead = this.#dead(seq);
      if (!dead) throw new NotFoundError(`no dead letter with seq ${seq} in namespace "${this.namespace}" (${this.path})`);
      if (dead.replayedAt !== null) {
        throw this.#invalid(`dead letter ${seq} was already replayed as seq ${dead.replayedAsSeq} at ${dead.replayedAt}`);
      }
      const newSeq = this.#append(dead.tag, dead.payload, source ?? dead.source, this.#tail.get(this.namespace)!.tail);
      this.#db
        .query("UPDATE outbox_dead_log SET replayed_at = ?, replayed_as_seq = ? WHERE seq = ? AND namespace = ?")
        .run(isoTimestamp(), newSeq, seq, this.namespace);
      return newSeq;
    });
  }

  /**
   * Re-enqueues many dead letters at the tail in ONE transaction, in ascending seq order whatever
   * the order given, each linked to the one before (as replayDead, from the same tail and append);
   * letters replayed before are skipped, never replayed twice. A seq that is no dead letter of
   * this namespace throws NotFoundError and nothing is replayed. `source` defaults to each letter's.
   */
  replayDeadMany(seqs: readonly number[], source?: string): DeadReplays {
    this.#open();
    if (!Array.isArray(seqs) || !seqs.every((s) => Number.isSafeInteger(s) && s > 0)) throw this.#invalid("replayDeadMany expects an array of positive integer seqs");
    const ordered = [...new Set(seqs)].sort((a, b) => a - b);
    if (ordered.length === 0) return { replayed: [], skipped: [] };
    return this.#write("cannot replay dead letters", () => {
      const out: DeadReplays = { replayed: [], skipped: [] };
      const mark = this.#db.query("UPDATE outbox_dead_log SET replayed_at = ?, replayed_as_seq = ? WHERE seq = ? AND namespace = ?");
      const now = isoTimestamp(); // one transaction, one time
      const append = this.#appender(now);
      let prev = this.#tail.get(this.namespace)!.tail;
      for (const seq of ordered) {
        const dead = this.#dead(seq);
        if (!dead) throw new NotFoundError(`no dead letter with seq ${seq} in namespace "${this.namespace}" (${this.path})`);
        if (dead.replayedAt !== null) {
          out.skipped.push({ seq, replayedAsSeq: dead.replayedAsSeq });
          continue;
        }
        prev = append(dead.tag, dead.payload, source ?? dead.source, prev);
        mark.run(now, prev, seq, this.namespace);
        out.replayed.push({ seq, newSeq: prev });
      }
      return out;
    });
  }

  /**
   * Deletes this namespace's dead letters that `rule` selects (see PurgeRule) in ONE transaction,
   * except those the chain still needs: one a queued row links to, and the namespace's newest
   * (see PurgeOutcome). Returns what was deleted and what was kept.
   */
  purgeDead(rule: PurgeRule): PurgeOutcome {
    this.#open();
    if (!(rule?.before instanceof Date) || Number.isNaN(rule.before.getTime())) throw this.#invalid("purgeDead needs a valid `before` Date");
    return this.#write("cannot purge dead letters", () => {
      const outcome = purgeCandidates(this.#db, this.namespace, rule);
      const remove = this.#db.query("DELETE FROM outbox_dead_log WHERE seq = ? AND namespace = ?");
      for (const letter of outcome.purged) remove.run(letter.seq, this.namespace);
      return outcome;
    });
  }

  /**
   * The drain's retention of replayed dead letters: deletes this namespace's letters replayed more
   * than `retainDays` ago (compared as times), with purgeDead's protections. Letters never
   * replayed are kept however old. Returns the count.
   */
  pruneReplayedDead(retainDays: number, now: Date = new Date()): number {
    this.#open();
    if (!Number.isFinite(retainDays) || retainDays < 0) throw this.#invalid(`retainDays must be a non-negative number, got ${retainDays}`);
    return this.purgeDead({ before: new Date(now.getTime() - retainDays * 86_400_000), by: "replayedAt" }).purged.length;
  }

  /** Every dead letter of this namespace, ascending seq (replayed ones included). */
  listDead(): DeadLetter[] {
    this.#open();
    return this.#read("cannot list dead letters", () =>
      this.#db
        .query<DeadLetter, [string]>(`SELECT ${DEAD_ROW_COLUMNS} FROM outbox_dead_log WHERE namespace = ? ORDER BY seq`)
        .all(this.namespace),
    );
  }

  /** One dead letter of this namespace, or null. */
  getDead(seq: number): DeadLetter | null {
    this.#open();
    return this.#read("cannot read dead letter", () => this.#dead(seq));
  }

  /**
   * Whether this namespace has a history in this file: a row delivered (sync log) or dead-lettered,
   * or a pending head linked to an earlier row (logs pruned). A fresh queue has none.
   */
  hasHistory(): boolean {
    this.#open();
    return this.#read("cannot read history", () =>
      this.#db
        .query<{ found: number }, [string]>(
          `SELECT EXISTS (SELECT 1 FROM outbox_sync_log WHERE namespace = ?1)
            OR EXISTS (SELECT 1 FROM outbox_dead_log WHERE namespace = ?1)
            OR (SELECT prev_seq FROM outbox_queue WHERE namespace = ?1 AND synced = 0 ORDER BY seq LIMIT 1) IS NOT NULL AS found`,
        )
        .get(this.namespace)!.found === 1,
    );
  }

  /** Dead letters of this namespace not yet replayed. */
  deadCount(): number {
    this.#open();
    return this.#read("cannot count dead letters", () =>
      this.#db
        .query<{ n: number }, [string]>("SELECT count(*) AS n FROM outbox_dead_log WHERE namespace = ? AND replayed_at IS NULL")
        .get(this.namespace)!.n,
    );
  }

  /** This namespace's health (see NamespaceHealth), with this outbox's maxPending. */
  health(now?: Date): NamespaceHealth {
    this.#open();
    // One read transaction, so depth and head come from the same state while producers write.
    return this.#read("cannot read health", () =>
      this.#db.transaction(() =>
        namespaceHealth(this.#db, this.path, this.namespace, migrated(this.#layout), { maxPending: this.maxPending, now }),
      )(),
    );
  }

  /** Whether close() was called. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Closes the file; idempotent. Every later call throws OutboxClosedError. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    // Finalize our prepared statements first: SQLite only closes (checkpointing and removing the
    // -wal/-shm files when it is the last connection) once no statement is left open.
    for (const stmt of [this.#begin, this.#commit, this.#rollback, this.#tail, this.#pending, this.#insert, this.#insertAtTail, this.#exists, this.#pendingRows]) stmt.finalize();
    this.#nextSlot?.finalize();
    this.#insertAt?.finalize();
    this.#db.close(false);
    this.#onClose?.();
  }

  /** @internal The producer registry learns about close() to forget the instance. */
  _setOnClose(hook: () => void): void {
    this.#onClose = hook;
  }

  #appendAtTail(tag: string, payload: string, source: string): number {
    return Number(this.#insertAtTail.run(this.namespace, isoTimestamp(), source, tag, payload).lastInsertRowid);
  }

  #append(tag: string, payload: string, source: string, prev: number | null, now = isoTimestamp()): number {
    return Number(this.#insert.run(this.namespace, now, source, tag, payload, prev).lastInsertRowid);
  }

  /**
   * Appends rows one after another inside one write transaction. In the lean layout the seq and
   * ord are read once and counted on (nobody else can insert while we hold the write lock): a
   * batch row then costs what a plain INSERT does.
   */
  #appender(now: string): (tag: string, payload: string, source: string, prev: number | null) => number {
    const insertAt = this.#insertAt;
    if (insertAt === null) return (tag, payload, source, prev) => this.#append(tag, payload, source, prev, now);
    let { seq, ord } = this.#nextSlot!.get(this.namespace)!;
    return (tag, payload, source, prev) => {
      insertAt.run(seq, ord++, now, this.namespace, source, tag, payload, prev);
      return seq++;
    };
  }

  /** Throws (and closes) when the file at our path is no longer the one we write: deleted, renamed or replaced. */
  #checkNotMoved(): void {
    const now = Date.now();
    if (now - this.#movedCheckedAt < MOVED_CHECK_MS) return;
    this.#movedCheckedAt = now;
    this.#movedFlag[0] = 0;
    if (this.#db.fileControl(constants.SQLITE_FCNTL_HAS_MOVED, this.#movedFlag) !== 0 || this.#movedFlag[0] === 0) return;
    this.close();
    throw new StorageError(
      `cannot enqueue: namespace "${this.namespace}" in ${this.path}: the file was deleted or replaced while open; events enqueued in the last ${MOVED_CHECK_MS} ms went with it. The outbox is closed; open it again to write to a new file at this path.`,
      this.path,
      this.namespace,
    );
  }

  #headOrd(): number | null {
    return this.#db
      .query<{ ord: number }, [string]>("SELECT ord FROM outbox_queue WHERE namespace = ? AND synced = 0 ORDER BY seq LIMIT 1")
      .get(this.namespace)?.ord ?? null;
  }

  #checkCapacity(adding: number): void {
    if (this.maxPending === null) return;
    const pending = this.#pending.get(this.namespace)!.pending;
    if (pending + adding > this.maxPending) throw new QueueFullError(this.namespace, this.maxPending, this.path);
  }

  #checkItem(tag: unknown, payload: unknown, source: unknown): void {
    // A lone surrogate would be silently replaced when SQLite stores the text as UTF-8.
    if (typeof tag !== "string" || tag === "" || !tag.isWellFormed()) throw this.#invalid("tag must be a non-empty, well-formed string");
    if (typeof payload !== "string" || !payload.isWellFormed()) throw this.#invalid("payload must be a well-formed string");
    if (typeof source !== "string" || !source.isWellFormed()) throw this.#invalid("source must be a well-formed string");
  }

  #requireHead(seq: number): void {
    const head = this.#db
      .query<{ seq: number }, [string]>("SELECT seq FROM outbox_queue WHERE namespace = ? AND synced = 0 ORDER BY seq LIMIT 1")
      .get(this.namespace);
    if (head?.seq === seq) return;
    const exists = this.#db.query("SELECT 1 FROM outbox_queue WHERE seq = ? AND namespace = ?").get(seq, this.namespace);
    if (!exists) throw new NotFoundError(`no pending row with seq ${seq} in namespace "${this.namespace}" (${this.path})`);
    throw this.#invalid(`seq ${seq} is not the head of namespace "${this.namespace}" (the head is ${head?.seq})`);
  }

  #dead(seq: number): DeadLetter | null {
    return this.#db
      .query<DeadLetter, [number, string]>(`SELECT ${DEAD_ROW_COLUMNS} FROM outbox_dead_log WHERE seq = ? AND namespace = ?`)
      .get(seq, this.namespace);
  }

  #update(what: string, seq: number, set: string, ...values: Array<string | number | null>): void {
    this.#open();
    const changes = this.#write(what, () =>
      this.#db.query(`UPDATE outbox_queue SET ${set} WHERE seq = ?1 AND namespace = ?2`).run(seq, this.namespace, ...values).changes,
    );
    if (changes === 0) throw new NotFoundError(`no pending row with seq ${seq} in namespace "${this.namespace}" (${this.path})`);
  }

  /** The reference confirms in two transactions; a crash between them leaves synced=1 rows. Finish them. */
  #finishReferenceConfirms(): void {
    const db = this.#db;
    if (!db.query("SELECT 1 FROM outbox_queue WHERE namespace = ? AND synced = 1 LIMIT 1").get(this.namespace)) return;
    db.transaction(() => {
      db.query(
        "INSERT OR IGNORE INTO outbox_sync_log (seq, namespace, synced_at) SELECT seq, namespace, ? FROM outbox_queue WHERE namespace = ? AND synced = 1",
      ).run(isoTimestamp(), this.namespace);
      db.query("DELETE FROM outbox_queue WHERE namespace = ? AND synced = 1").run(this.namespace);
    }).immediate();
  }

  #write<T>(what: string, fn: () => T): T {
    try {
      this.#begin.run();
    } catch (e) {
      throw storageError(e, what, this.path, this.namespace);
    }
    try {
      const result = fn();
      this.#commit.run();
      return result;
    } catch (e) {
      if (this.#db.inTransaction) this.#rollback.run();
      throw storageError(e, what, this.path, this.namespace);
    }
  }

  #read<T>(what: string, fn: () => T): T {
    try {
      return fn();
    } catch (e) {
      throw storageError(e, what, this.path, this.namespace);
    }
  }

  #open(): void {
    if (this.#closed) throw new OutboxClosedError(this.path, this.namespace);
  }

  #invalid(message: string): OutboxError {
    return new InvalidArgumentError(`${message} (namespace "${this.namespace}" in ${this.path})`, {
      namespace: this.namespace,
      file: this.path,
    });
  }
}
