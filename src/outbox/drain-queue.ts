import type { DeadLettered } from "./dead-log.ts";
import type { DeliveryRead, Resequenced } from "./delivery-log.ts";
import { DELIVERED } from "./delivered.ts";
import type { NamespaceHealth } from "./health.ts";
import type { QueueDb } from "./queue-db.ts";
import type { DeadReason, OutboxRow } from "./rows.ts";
import { type OutboxOptions, QueueView, SHARED, WRITE_HOLDS } from "./queue-view.ts";

export type { DeliveryRead } from "./delivery-log.ts";

/**
 * What the drain needs of one namespace of a queue file, and all it reaches the file through: its
 * origin, the read for delivery, attempts and failures, dead-lettering, confirmation and the sent
 * mark, moving rows above a remote's high water, counts, and the open file for its care.
 */
export interface DrainQueue {
  readonly path: string;
  readonly namespace: string;
  /** The file's origin id: how every target's delivery ledger knows this queue file. */
  readonly origin: string;
  readonly closed: boolean;
  readForDelivery(
    limit: number,
    maxBytes: number,
    ready: (head: OutboxRow, pending: number) => boolean,
    after?: number | null,
    skip?: ((row: OutboxRow) => boolean) | null,
  ): DeliveryRead;
  head(): OutboxRow | null;
  pendingCount(): number;
  hasHistory(): boolean;
  health(now?: Date): NamespaceHealth;
  commitCounters(): { version: number; writes: number };
  recordAttempt(seq: number, at?: Date, sentThrough?: number | null): void;
  refundAttempt(seq: number): void;
  recordFailure(seq: number, error: string, errorClass: string, nextAttemptAt: Date, attempts?: number): void;
  deadLetter(seq: number, reason: DeadReason, error?: string | null, errorClass?: string | null): DeadLettered;
  sentMark(): number;
  confirmThrough(bound: number, maxRows?: number): number;
  /** Confirms the slice it holds in memory without reading its rows again; false (nothing changed) when the queue no longer holds exactly those rows. */
  confirmSlice(slice: { first: number; last: number; rows: number; firstPrev: number | null }): boolean;
  /** Most rows one confirmation transaction should take: 100 in an application's own database (its writers wait for each), 2 000 in files of ours. */
  readonly confirmChunkRows: number;
  seedSequence(minSeq: number): void;
  resequenceAbove(minSeq: number): Resequenced | null;
  pruneSyncLog(retainDays: number, now?: Date): number;
  pruneSyncLogStep(retainDays: number, now?: Date): { removed: number; done: boolean };
  pruneReplayedDead(retainDays: number, now?: Date): number;
  /** The lane count this namespace's rows were last delivered with (null: never recorded, which is 1). */
  laneCount(): number | null;
  /** Records the lane count the drain delivers this namespace with. */
  recordLaneCount(lanes: number): void;
  /** The open file, for the drain's checkpoints and the space it gives back (file-care.ts). */
  openFile(): QueueDb;
  close(): void;
}

/** The drain's face of one namespace of a queue file (see DrainQueue); exported for tests that inject local faults into it. */
export class QueueForDrain extends QueueView implements DrainQueue {
  /**
   * The drain's read of this namespace, in ONE read transaction: the head and the pending count,
   * and — when `ready(head, pending)` says so — up to `limit` rows head first, no more than
   * `maxBytes` of SQL text and payload (the first row always, however large), cut before the
   * first row whose chain link exists nowhere. Rows are streamed, so a backlog of large rows is
   * never loaded beyond the budget. With `after`, the rows at or below it are passed over (a target
   * applied them; their local confirmation is still to come) and the first row above it is the head.
   * Rows `skip` says so of (applied already, or waiting in a lane held back) are passed over too: a
   * group is skipped whole or not at all (its rows share what skip looks at).
   */
  readForDelivery(
    limit: number,
    maxBytes: number,
    ready: (head: OutboxRow, pending: number) => boolean,
    after: number | null = null,
    skip: ((row: OutboxRow) => boolean) | null = null,
  ): DeliveryRead {
    this.queueFile.ensureOpen();
    return this.deliveryLog.readForDelivery(limit, maxBytes, ready, after, skip);
  }

  /**
   * Charges one delivery attempt to a pending row BEFORE delivering it (crash-loop protection).
   * With `sentThrough`, also raises this namespace's sent mark to it, in the same transaction
   * (see `sentMark`).
   */
  recordAttempt(seq: number, at: Date = new Date(), sentThrough: number | null = null): void {
    this.queueFile.ensureOpen();
    this.deliveryLog.recordAttempt(seq, at, sentThrough);
  }

  /**
   * The highest seq of this namespace ever sent to a target (0 when none): it only rises. Rows at
   * or below it may have been applied by a batch whose outcome is unknown — a crash, a timeout, a
   * COMMIT that becomes visible late — so the drain settles them from the delivery ledger; rows
   * above it were never sent. (Files written by earlier versions kept this on the head as
   * `sent_through`; it is honoured too.)
   */
  sentMark(): number {
    this.queueFile.ensureOpen();
    return this.deliveryLog.sentMark();
  }

  /** Undoes one attempt charge (the target was down: not the row's fault); never below zero. */
  refundAttempt(seq: number): void {
    this.queueFile.ensureOpen();
    this.deliveryLog.refundAttempt(seq);
  }

  /**
   * Records a failed delivery of a pending row: the error, its class and when to retry; with
   * `attempts`, its attempt count is raised to at least that (a group that spans tables counts its
   * attempts across its heads).
   */
  recordFailure(seq: number, error: string, errorClass: string, nextAttemptAt: Date, attempts = 0): void {
    this.queueFile.ensureOpen();
    this.deliveryLog.recordFailure(
      seq,
      String(error),
      errorClass === null || errorClass === undefined ? null : String(errorClass),
      nextAttemptAt,
      attempts,
    );
  }

  /**
   * Confirms every pending row at or below `bound` (sync log + delete, in transactions of at most
   * confirmChunkRows rows), or only the first `maxRows` of them: the drain's settlement of rows the
   * delivery ledger says were applied. Returns how many.
   */
  confirmThrough(bound: number, maxRows = Number.POSITIVE_INFINITY): number {
    this.queueFile.ensureOpen();
    return this.deliveryLog.confirmThrough(bound, maxRows);
  }
  get confirmChunkRows(): number {
    return this.deliveryLog.confirmChunkRows;
  }
  confirmSlice(slice: { first: number; last: number; rows: number; firstPrev: number | null }): boolean {
    this.queueFile.ensureOpen();
    return this.deliveryLog.confirmSlice(slice);
  }

  /** Makes the next allocated seq of the file greater than `minSeq`; never lowers it. */
  seedSequence(minSeq: number): void {
    this.queueFile.ensureOpen();
    if (!Number.isSafeInteger(minSeq) || minSeq < 0)
      throw this.queueFile.invalid(`seedSequence expects a non-negative integer, got ${minSeq}`);
    this.deliveryLog.seedSequence(minSeq);
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
    this.queueFile.ensureOpen();
    if (!Number.isSafeInteger(minSeq) || minSeq < 0)
      throw this.queueFile.invalid(`resequenceAbove expects a non-negative integer, got ${minSeq}`);
    return this.deliveryLog.resequenceAbove(minSeq);
  }

  /**
   * Deletes this namespace's sync-log entries older than `retainDays` (compared as times, not
   * strings), except the entries that bridge the chain: any entry a queued row still links to (the
   * head's predecessor; also a reference leftover's) and the newest entry (the predecessor of the
   * next row once the queue is empty). Returns the count.
   */
  pruneSyncLog(retainDays: number, now: Date = new Date()): number {
    this.queueFile.ensureOpen();
    this.checkDays(retainDays);
    return this.deliveryLog.pruneSyncLog(retainDays, now).removed;
  }

  /**
   * One step of pruneSyncLog: at most one chunk (500 entries, one short write transaction).
   * `done` is false when more may be due: a caller that prunes a long log steps with pauses
   * between, so producers of the file get its write lock in between (SQLite's lock is not fair).
   */
  pruneSyncLogStep(retainDays: number, now: Date = new Date()): { removed: number; done: boolean } {
    this.queueFile.ensureOpen();
    this.checkDays(retainDays);
    return this.deliveryLog.pruneSyncLog(retainDays, now, 1);
  }

  /**
   * The drain's retention of replayed dead letters: deletes this namespace's letters replayed more
   * than `retainDays` ago (compared as times), with purgeDead's protections. Letters never
   * replayed are kept however old. Returns the count.
   */
  pruneReplayedDead(retainDays: number, now: Date = new Date()): number {
    this.queueFile.ensureOpen();
    this.checkDays(retainDays);
    return this.deadLog.purge({ before: new Date(now.getTime() - retainDays * 86_400_000), by: "replayedAt" }).purged
      .length;
  }

  /**
   * What this connection has seen of its file: `version` (`PRAGMA data_version`) changes whenever
   * another connection, in any process, committed to the file — never for this connection's own
   * commits, which `writes` (`total_changes()`: rows it inserted, updated or deleted) counts.
   */
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

  /**
   * Whether this namespace has a history in this file: a row delivered or dead-lettered,
   * or a pending head linked to an earlier row (logs pruned). A fresh queue has none.
   */
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
    return this.deliveryLog.laneCount();
  }

  recordLaneCount(lanes: number): void {
    this.queueFile.ensureOpen();
    this.deliveryLog.recordLaneCount(lanes);
  }

  openFile(): QueueDb {
    return this.queueFile.queueDb;
  }
}

/** Opens the drain's queue of `namespace` in `path` on a connection of its own (see OutboxOptions); `onWriteHold` is told how long each of its write transactions held the file's lock, in seconds. */
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
