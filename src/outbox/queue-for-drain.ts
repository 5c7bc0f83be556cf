import { NotFoundError } from "../errors.ts";
import { Confirmation } from "./confirmation.ts";
import type { LetterInDoubt } from "./dead-log.ts";
import { DELIVERED } from "./delivered.ts";
import { type DeliveryRead, DeliveryReader } from "./delivery-read.ts";
import type { DrainQueue } from "./drain-queue.ts";
import type { QueueDb } from "./queue-db.ts";
import { SENT_KEY_PREFIX } from "./queue-file.ts";
import { type OutboxOptions, QueueView, SHARED, WRITE_HOLDS } from "./queue-view.ts";
import { type Resequenced, resequenceAbove } from "./resequence.ts";
import type { OutboxRow } from "./rows.ts";
import { LAYOUTS, TENANT_INDEX_DDL } from "./schema.ts";
import { isoTimestamp } from "./timestamp.ts";

/**
 * How many delivered-log entries one pruning transaction looks at: every producer of the file
 * waits for the write lock while it is held, so a long log is pruned in short transactions.
 */
const PRUNE_CHUNK_ENTRIES = 500;

/**
 * The drain's face of one namespace of a queue file (see DrainQueue): the delivery state of its
 * head (attempts, failures, the sent mark), its lane count and pruning here; the read
 * (delivery-read.ts), the confirmation (confirmation.ts) and the move above a seq (resequence.ts)
 * in their own files. Exported for tests that inject local faults into it.
 */
export class QueueForDrain extends QueueView implements DrainQueue {
  readonly #reader = new DeliveryReader(this.queueFile);
  readonly #confirmation = new Confirmation(this.queueFile);
  /** The outbox_meta key of this namespace's sent mark. */
  readonly #sentKey = `${SENT_KEY_PREFIX}${this.namespace}`;

  readForDelivery(
    limit: number,
    maxBytes: number,
    ready: (head: OutboxRow, pending: number) => boolean,
    after: number | null = null,
    skip: ((row: OutboxRow) => boolean) | null = null,
  ): DeliveryRead {
    this.queueFile.ensureOpen();
    return this.#reader.read(limit, maxBytes, ready, after, skip);
  }

  readTenantForDelivery(
    tenant: string | null,
    limit: number,
    maxBytes: number,
    ready: (head: OutboxRow, pending: number) => boolean,
    after: number | null = null,
    skip: ((row: OutboxRow) => boolean) | null = null,
  ): DeliveryRead {
    this.queueFile.ensureOpen();
    return this.#reader.read(limit, maxBytes, ready, after, skip, { tenant });
  }

  headSeq(): number | null {
    this.queueFile.ensureOpen();
    return this.queueFile.read("cannot read the head", () => this.queueFile.headSeq());
  }

  holdsGroup(grp: number): boolean {
    this.queueFile.ensureOpen();
    const file = this.queueFile;
    return file.read(
      "cannot look for a group's rows",
      () =>
        file.db
          .query(
            "SELECT 1 FROM outbox_queue WHERE namespace = ?1 AND synced = 0 AND seq >= ?2 AND seq <= ifnull((SELECT last_seq FROM outbox_group WHERE grp = ?2), ?2) LIMIT 1",
          )
          .get(file.namespace, grp) !== null,
    );
  }

  serveTenants(): void {
    this.queueFile.ensureOpen();
    const file = this.queueFile;
    file.write("cannot index the rows by tenant", () => file.db.run(TENANT_INDEX_DDL));
  }

  tenantsWithRows(after: string | null, limit: number): { tenants: string[]; withoutTenant: boolean } {
    this.queueFile.ensureOpen();
    const file = this.queueFile;
    return file.read("cannot list the tenants with rows", () => ({
      tenants: file.tenantsAfter(after, limit),
      withoutTenant: file.hasRowsWithoutTenant(),
    }));
  }

  recordAttempt(
    seq: number,
    at: Date = new Date(),
    sentThrough: number | null = null,
    sent: readonly number[] = [],
  ): void {
    this.queueFile.ensureOpen();
    const file = this.queueFile;
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
        if (sent.length > 0) this.#sentFromTheDead(sent);
      }
      return changed;
    });
    if (changes === 0) throw this.#notPending(seq);
  }

  /**
   * Rows about to be sent that an operator moved to the dead letters since they were read: a skip
   * before this sent mark took them for never sent, so their letters say in doubt now (the batch
   * may apply them); one replayed meanwhile must not go as well (its replay delivers it).
   */
  #sentFromTheDead(sent: readonly number[]): void {
    const file = this.queueFile;
    let first = sent[0]!;
    let last = first;
    for (const s of sent) {
      if (s < first) first = s;
      if (s > last) last = s;
    }
    const letters = file.db
      .query<{ seq: number; replayedAsSeq: number | null }, [string, number, number]>(
        "SELECT seq, replayed_as_seq AS replayedAsSeq FROM outbox_dead_log WHERE namespace = ?1 AND seq >= ?2 AND seq <= ?3",
      )
      .all(file.namespace, first, last);
    if (letters.length === 0) return;
    const rows = new Set(sent);
    for (const letter of letters) {
      if (!rows.has(letter.seq)) continue;
      if (letter.replayedAsSeq !== null)
        throw new NotFoundError(
          `seq ${letter.seq} of namespace "${this.namespace}" was dead-lettered and replayed as seq ${letter.replayedAsSeq} after it was read for delivery: not sent; its rows are read again (${file.path})`,
        );
      file.db
        .query("UPDATE outbox_dead_log SET remote = 'in doubt' WHERE namespace = ?1 AND seq = ?2 AND remote IS NULL")
        .run(file.namespace, letter.seq);
    }
  }

  lettersInDoubt(after: number, through: number): LetterInDoubt[] {
    this.queueFile.ensureOpen();
    return this.deadLog.lettersInDoubt(after, through);
  }

  settleLetters(seqs: readonly number[], remote: "applied" | "not applied"): number {
    this.queueFile.ensureOpen();
    return this.deadLog.settleLetters(seqs, remote);
  }

  sentMark(): number {
    this.queueFile.ensureOpen();
    const file = this.queueFile;
    return file.read("cannot read the sent mark", () => file.sentMark());
  }

  refundAttempt(seq: number): void {
    this.queueFile.ensureOpen();
    const file = this.queueFile;
    const changes = file.write(
      "cannot refund attempt",
      () =>
        file.db
          .query("UPDATE outbox_queue SET attempts = max(attempts - 1, 0) WHERE seq = ?1 AND namespace = ?2")
          .run(seq, file.namespace).changes,
    );
    if (changes === 0) throw this.#notPending(seq);
  }

  recordFailure(seq: number, error: string, errorClass: string, nextAttemptAt: Date, attempts = 0): void {
    this.queueFile.ensureOpen();
    const file = this.queueFile;
    const changes = file.write(
      "cannot record failure",
      () =>
        file.db
          .query(
            "UPDATE outbox_queue SET last_error = ?3, last_error_class = ?4, next_attempt_at = ?5, attempts = max(attempts, ?6) WHERE seq = ?1 AND namespace = ?2",
          )
          .run(
            seq,
            file.namespace,
            String(error),
            errorClass === null || errorClass === undefined ? null : String(errorClass),
            isoTimestamp(nextAttemptAt),
            attempts,
          ).changes,
    );
    if (changes === 0) throw this.#notPending(seq);
  }

  confirmThrough(bound: number, maxRows = Number.POSITIVE_INFINITY): number {
    this.queueFile.ensureOpen();
    return this.#confirmation.through(bound, maxRows);
  }

  markApplied(seqs: readonly number[]): number {
    this.queueFile.ensureOpen();
    return this.#confirmation.markApplied(seqs);
  }

  markedThrough(): number {
    this.queueFile.ensureOpen();
    const file = this.queueFile;
    return file.read("cannot read the rows marked applied", () => this.#confirmation.markedThrough());
  }

  get confirmChunkRows(): number {
    return this.#confirmation.chunkRows;
  }

  confirmSlice(slice: { first: number; last: number; rows: number; firstPrev: number | null }): boolean {
    this.queueFile.ensureOpen();
    return this.#confirmation.slice(slice);
  }

  seedSequence(minSeq: number): void {
    this.queueFile.ensureOpen();
    const file = this.queueFile;
    if (!Number.isSafeInteger(minSeq) || minSeq < 0)
      throw file.invalid(`seedSequence expects a non-negative integer, got ${minSeq}`);
    file.write("cannot seed sequence", () => LAYOUTS[file.layout].raiseSequence(file.db, minSeq));
  }

  resequenceAbove(minSeq: number): Resequenced | null {
    this.queueFile.ensureOpen();
    if (!Number.isSafeInteger(minSeq) || minSeq < 0)
      throw this.queueFile.invalid(`resequenceAbove expects a non-negative integer, got ${minSeq}`);
    return resequenceAbove(this.queueFile, this.appender, minSeq);
  }

  pruneSyncLog(retainDays: number, now: Date = new Date()): number {
    return this.#prune(retainDays, now, Number.POSITIVE_INFINITY).removed;
  }

  pruneSyncLogStep(retainDays: number, now: Date = new Date()): { removed: number; done: boolean } {
    return this.#prune(retainDays, now, 1);
  }

  pruneReplayedDead(retainDays: number, now: Date = new Date()): number {
    this.queueFile.ensureOpen();
    this.checkDays(retainDays);
    return this.deadLog.purge({ before: new Date(now.getTime() - retainDays * 86_400_000), by: "replayedAt" }).purged
      .length;
  }

  commitCounters(): { version: number; writes: number } {
    this.queueFile.ensureOpen();
    const db = this.queueFile.db;
    return this.queueFile.read(
      "cannot read data_version",
      () =>
        db
          .query<{ version: number; writes: number }, []>(
            "SELECT data_version AS version, total_changes() AS writes FROM pragma_data_version",
          )
          .get()!,
    );
  }

  hasHistory(): boolean {
    this.queueFile.ensureOpen();
    const file = this.queueFile;
    return file.read(
      "cannot read history",
      () =>
        file.db
          .query<{ found: number }, [string]>(
            `SELECT ${DELIVERED[file.layout].any}
            OR EXISTS (SELECT 1 FROM outbox_dead_log WHERE namespace = ?1)
            OR (SELECT prev_seq FROM outbox_queue WHERE namespace = ?1 AND synced = 0 ORDER BY seq LIMIT 1) IS NOT NULL AS found`,
          )
          .get(this.namespace)!.found === 1,
    );
  }

  laneCount(): number | null {
    this.queueFile.ensureOpen();
    const file = this.queueFile;
    const value = file.read("cannot read the lane count", () =>
      file.db
        .query<{ value: string }, [string]>("SELECT value FROM outbox_meta WHERE key = ?")
        .get(`lanes:${file.namespace}`),
    );
    return value ? Number(value.value) : null;
  }

  recordLaneCount(lanes: number): void {
    this.queueFile.ensureOpen();
    const file = this.queueFile;
    file.write("cannot record the lane count", () =>
      file.db
        .query(
          "INSERT INTO outbox_meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .run(`lanes:${file.namespace}`, String(lanes)),
    );
  }

  openFile(): QueueDb {
    return this.queueFile.queueDb;
  }

  /**
   * By the log's namespace index, oldest first, PRUNE_CHUNK_ENTRIES entries per write transaction,
   * so producers never wait on a long prune; stops at the first chunk that keeps an entry (the log
   * is oldest first: what follows is newer), or after `maxChunks` (`done` false: more may be due).
   */
  #prune(retainDays: number, now: Date, maxChunks: number): { removed: number; done: boolean } {
    this.queueFile.ensureOpen();
    this.checkDays(retainDays);
    const file = this.queueFile;
    const cutoff = isoTimestamp(new Date(now.getTime() - retainDays * 86_400_000));
    const prune = file.db.query(DELIVERED[file.layout].prune);
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
      `no pending row with seq ${seq} in namespace "${this.namespace}" (${this.queueFile.path})`,
    );
  }
}

/**
 * Opens the drain's queue of `namespace` in `path` on a connection of its own (see OutboxOptions);
 * `onWriteHold` is told how long each of its write transactions held the file's lock, in seconds.
 */
export function openDrainQueue(
  path: string,
  namespace: string,
  options: OutboxOptions = {},
  onWriteHold: ((seconds: number) => void) | null = null,
): DrainQueue {
  return new QueueForDrain(path, namespace, { ...options, [WRITE_HOLDS]: onWriteHold });
}

/** The drain's queue of `namespace` in an open file shared with its other namespaces. */
export function drainQueueOn(queueDb: QueueDb, namespace: string, options: OutboxOptions = {}): DrainQueue {
  return new QueueForDrain(queueDb.path, namespace, { ...options, [SHARED]: queueDb });
}
