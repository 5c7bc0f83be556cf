import type { DeadLettered, LetterInDoubt } from "./dead-log.ts";
import type { DeliveryRead } from "./delivery-read.ts";
import type { NamespaceHealth } from "./health.ts";
import type { QueueDb } from "./queue-db.ts";
import type { Resequenced } from "./resequence.ts";
import type { DeadReason, OutboxRow } from "./rows.ts";

export type { DeliveryRead } from "./delivery-read.ts";

/**
 * What the drain needs of one namespace of a queue file, and all it reaches the file through: its
 * origin, the read for delivery, attempts and failures, dead-lettering, confirmation and the sent
 * mark, moving rows above a remote's high water, counts, and the open file for its care. Every
 * method that writes does so in one transaction of its own; every failure is a typed OutboxError.
 */
export interface DrainQueue {
  readonly path: string;
  readonly namespace: string;
  /** The file's origin id: how every target's delivery ledger knows this queue file. */
  readonly origin: string;
  readonly closed: boolean;
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
    after?: number | null,
    skip?: ((row: OutboxRow) => boolean) | null,
  ): DeliveryRead;
  /**
   * readForDelivery over `tenant`'s rows only (null: the rows without a tenant), for a table a
   * tenant template serves: each tenant its own database, read on its own (see serveTenants).
   * The head and the pending count are still the namespace's.
   */
  readTenantForDelivery(
    tenant: string | null,
    limit: number,
    maxBytes: number,
    ready: (head: OutboxRow, pending: number) => boolean,
    after?: number | null,
    skip?: ((row: OutboxRow) => boolean) | null,
  ): DeliveryRead;
  /** Indexes the rows by tenant (if they are not yet: a file written before its first tenant row). */
  serveTenants(): void;
  /**
   * Up to `limit` tenants with pending rows, by name, after `after` (null: from the first);
   * `withoutTenant`: whether pending rows without a tenant are left too.
   */
  tenantsWithRows(after: string | null, limit: number): { tenants: string[]; withoutTenant: boolean };
  head(): OutboxRow | null;
  /** The head's seq alone (no row read), or null when the queue is empty. */
  headSeq(): number | null;
  pendingCount(): number;
  /** Whether a row of the group that starts at seq `grp` (one transaction across tables) is still pending here. */
  holdsGroup(grp: number): boolean;
  /**
   * Whether this namespace has a history in this file: a row delivered or dead-lettered,
   * or a pending head linked to an earlier row (logs pruned). A fresh queue has none.
   */
  hasHistory(): boolean;
  health(now?: Date): NamespaceHealth;
  /**
   * What this connection has seen of its file: `version` (`PRAGMA data_version`) changes whenever
   * another connection, in any process, committed to the file — never for this connection's own
   * commits, which `writes` (`total_changes()`: rows it inserted, updated or deleted) counts.
   */
  commitCounters(): { version: number; writes: number };
  /**
   * Charges one delivery attempt to a pending row BEFORE delivering it (crash-loop protection).
   * With `sentThrough`, also raises this namespace's sent mark to it, in the same transaction
   * (see `sentMark`). With `sent`, the seqs about to be sent (read earlier: an operator may have
   * moved one to the dead letters since), in the same transaction: such a letter is marked in doubt
   * (it goes all the same), and one replayed meanwhile throws NotFoundError — nothing is charged
   * and the rows are read again (its replay delivers it).
   */
  recordAttempt(seq: number, at?: Date, sentThrough?: number | null, sent?: readonly number[]): void;
  /** Undoes one attempt charge (the target was down: not the row's fault); never below zero. */
  refundAttempt(seq: number): void;
  /**
   * Records a failed delivery of a pending row: the error, its class and when to retry; with
   * `attempts`, its attempt count is raised to at least that (a group that spans tables counts its
   * attempts across its heads).
   */
  recordFailure(seq: number, error: string, errorClass: string, nextAttemptAt: Date, attempts?: number): void;
  /**
   * See Outbox.deadLetter; `inDoubt`: whether a batch of the drain's carrying the group may still commit, or
   * did unanswered.
   */
  deadLetter(
    seq: number,
    reason: DeadReason,
    error?: string | null,
    errorClass?: string | null,
    inDoubt?: boolean,
  ): DeadLettered;
  /** This namespace's dead letters in doubt with a seq in `(after, through]`, seq order (see LetterRemote). */
  lettersInDoubt(after: number, through: number): LetterInDoubt[];
  /** Settles letters in doubt: the remote applied them, or did not and never will. Returns how many changed. */
  settleLetters(seqs: readonly number[], remote: "applied" | "not applied"): number;
  /**
   * The highest seq of this namespace ever sent to a target (0 when none): it only rises. Rows at
   * or below it may have been applied by a batch whose outcome is unknown — a crash, a timeout, a
   * COMMIT that becomes visible late — so the drain settles them from the delivery ledger; rows
   * above it were never sent. (Files written by earlier versions kept this on the head as
   * `sent_through`; it is honoured too.)
   */
  sentMark(): number;
  /**
   * Confirms every pending row at or below `bound` (delivered log + delete, in transactions of at
   * most confirmChunkRows rows), or only the first `maxRows` of them: the drain's settlement of rows
   * the delivery ledger says were applied. Returns how many.
   */
  confirmThrough(bound: number, maxRows?: number): number;
  /**
   * A tenant template's: marks rows a target applied out of the queue's order (`synced = 1`, in one
   * transaction): read no more, and confirmed by confirmThrough with the prefix they end up in. The
   * namespace's last row is never marked. Returns how many were.
   */
  markApplied(seqs: readonly number[]): number;
  /** The highest seq markApplied marked that is still queued, or 0. */
  markedThrough(): number;
  /**
   * Confirms the slice it holds in memory without reading its rows again; false (nothing changed)
   * when the queue no longer holds exactly those rows.
   */
  confirmSlice(slice: { first: number; last: number; rows: number; firstPrev: number | null }): boolean;
  /**
   * Most rows one confirmation transaction should take: fewer in an application's own database (its
   * writers wait for each) than in files of ours.
   */
  readonly confirmChunkRows: number;
  /** Makes the next allocated seq of the file greater than `minSeq`; never lowers it. */
  seedSequence(minSeq: number): void;
  /**
   * Moves this namespace's WHOLE pending queue, in order, above `minSeq` when its head is at or
   * below it — rows whose seqs a remote already holds from elsewhere (another machine's queue)
   * would otherwise be absorbed there as duplicates. One transaction: seeds the sequence, then per
   * row appends a copy at the tail (created_at, source and delivery state kept, the chain linked
   * on) and records the old row in outbox_dead_log as `resequenced`, replayed as the new seq.
   * Returns the old and new ranges, or null when no pending row is at or below `minSeq`.
   */
  resequenceAbove(minSeq: number): Resequenced | null;
  /**
   * Deletes this namespace's delivered-log entries older than `retainDays` (compared as times, not
   * strings), except the entries that bridge the chain: any entry a queued row still links to (the
   * head's predecessor; also a reference leftover's) and the newest entry (the predecessor of the
   * next row once the queue is empty). Returns the count.
   */
  pruneSyncLog(retainDays: number, now?: Date): number;
  /**
   * One step of pruneSyncLog: at most one chunk (one short write transaction). `done` is false when
   * more may be due: a caller that prunes a long log steps with pauses between, so producers of the
   * file get its write lock in between (SQLite's lock is not fair).
   */
  pruneSyncLogStep(retainDays: number, now?: Date): { removed: number; done: boolean };
  /**
   * The drain's retention of replayed dead letters: deletes this namespace's letters replayed more
   * than `retainDays` ago (compared as times), with purgeDead's protections. Letters never
   * replayed are kept however old. Returns the count.
   */
  pruneReplayedDead(retainDays: number, now?: Date): number;
  /** The lane count this namespace's rows were last delivered with (null: never recorded, which is 1). */
  laneCount(): number | null;
  /** Records the lane count the drain delivers this namespace with. */
  recordLaneCount(lanes: number): void;
  /** The open file, for the drain's checkpoints and the space it gives back (file-care.ts). */
  openFile(): QueueDb;
  close(): void;
}
