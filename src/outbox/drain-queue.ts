import { NotFoundError } from "../errors.ts";
import { Confirmation } from "./confirmation.ts";
import type { DeadLettered, LetterInDoubt } from "./dead-log.ts";
import { DELIVERED } from "./delivered.ts";
import { type DeliveryRead, DeliveryReader } from "./delivery-read.ts";
import type { NamespaceHealth } from "./health.ts";
import type { QueueDb } from "./queue-db.ts";
import { SENT_KEY_PREFIX } from "./queue-file.ts";
import { type OutboxOptions, QueueView, SHARED, WRITE_HOLDS } from "./queue-view.ts";
import { type Resequenced, resequenceAbove } from "./resequence.ts";
import type { DeadReason, OutboxRow } from "./rows.ts";
import { LAYOUTS, TENANT_INDEX_DDL } from "./schema.ts";
import { isoTimestamp } from "./timestamp.ts";

export type { DeliveryRead } from "./delivery-read.ts";

/**
 * How many delivered-log entries one pruning transaction looks at: every producer of the file
 * waits for the write lock while it is held, so a long log is pruned in short transactions.
 */
const PRUNE_CHUNK_ENTRIES = 500;

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
