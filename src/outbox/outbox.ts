import { resolve } from "node:path";
import { InvalidArgumentError } from "../errors.ts";
import type { Durability } from "../vocabulary.ts";
import { Appender, DEFAULT_GROUP_LIMITS, type RowTrace } from "./append.ts";
import { DeadLog, type DeadLettered } from "./dead-log.ts";
import type { DeadReplays, PurgeOutcome, PurgeRule } from "./dead-letters.ts";
import { DeliveryLog, type DeliveryRead, type Resequenced, type RetriedHead } from "./delivery-log.ts";
import { namespaceHealth, type NamespaceHealth } from "./health.ts";
import { DELIVERED } from "./delivered.ts";
import { QueueDb } from "./queue-db.ts";
import { QueueFile } from "./queue-file.ts";
import { QUEUE_ROW_COLUMNS, type ChainGap, type DeadLetter, type DeadReason, type OutboxRow } from "./rows.ts";
import { layoutPendingCount } from "./schema.ts";

export type { ChainGap, DeadLetter, DeadReason, OutboxRow } from "./rows.ts";
export type { DeliveryRead, Resequenced, RetriedHead } from "./delivery-log.ts";
export type { DeadLettered } from "./dead-log.ts";
export type { RowTrace } from "./append.ts";

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
  /** false: the file must exist (the drain serving a `db_file`: its producer creates it). Default true. */
  create?: boolean;
  /** Most statements one local transaction (a group) may hold. Default 10 000. */
  maxGroupStatements?: number;
  /** Most characters of SQL text and encoded arguments one local transaction may hold. Default 16 Mi. */
  maxGroupBytes?: number;
}

/** The open file an Outbox is a view of, when it shares one (outboxOn). */
const SHARED = Symbol("sqloutbox.sharedQueueDb");
/** Each Outbox's open file, for the producer's transactions (queueDbOf); not part of the public API. */
const queueDbs = new WeakMap<Outbox, QueueDb>();

/**
 * The local queue of one namespace in one SQLite file: an ordered, singly linked chain of events
 * (`prev_seq`) that producers append to and the drain delivers head first. Creates the file and
 * schema (idempotent migrations) but not the directory. Every failure throws a typed OutboxError.
 *
 * Three audiences use it, and each has its own home behind this class: producers append
 * (append.ts), the drain keeps its books (delivery-log.ts), operators work on dead letters
 * (dead-log.ts); all of them run on the open file (queue-file.ts).
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
  readonly #file: QueueFile;
  readonly #append: Appender;
  readonly #delivery: DeliveryLog;
  readonly #dead: DeadLog;

  constructor(path: string, namespace: string, options: OutboxOptions & { [SHARED]?: QueueDb } = {}) {
    if (typeof path !== "string" || path === "")
      throw new InvalidArgumentError("outbox path must be a non-empty string");
    if (typeof namespace !== "string" || namespace === "" || !namespace.isWellFormed()) {
      throw new InvalidArgumentError(`outbox namespace must be a non-empty string (file ${path})`, { file: path });
    }
    const maxPending = options.maxPending ?? null;
    if (maxPending !== null && !(Number.isSafeInteger(maxPending) && maxPending > 0)) {
      throw new InvalidArgumentError(
        `maxPending must be a positive integer or null, got ${maxPending} (namespace "${namespace}" in ${path})`,
        { namespace, file: path },
      );
    }
    const durability = options.durability ?? "normal";
    if (durability !== "normal" && durability !== "full") {
      throw new InvalidArgumentError(
        `durability must be "normal" or "full", got ${JSON.stringify(durability)} (namespace "${namespace}" in ${path})`,
        { namespace, file: path },
      );
    }
    this.path = resolve(path);
    this.namespace = namespace;
    this.maxPending = maxPending;
    this.durability = durability;
    const limits = {
      maxRows: positive(
        options.maxGroupStatements,
        DEFAULT_GROUP_LIMITS.maxRows,
        "maxGroupStatements",
        namespace,
        path,
      ),
      maxChars: positive(options.maxGroupBytes, DEFAULT_GROUP_LIMITS.maxChars, "maxGroupBytes", namespace, path),
    };
    const shared = options[SHARED];
    const queueDb = shared
      ? shared.acquire()
      : QueueDb.open(this.path, {
          durability,
          busyTimeoutMs: options.busyTimeoutMs ?? 10_000,
          fileMode: options.fileMode,
          create: options.create,
          namespace,
        });
    this.#file = new QueueFile(queueDb, namespace);
    queueDbs.set(this, queueDb);
    this.origin = this.#file.origin;
    this.#append = new Appender(this.#file, maxPending, limits);
    this.#delivery = new DeliveryLog(this.#file, this.#append);
    this.#dead = new DeadLog(this.#file, this.#append);
  }

  // ── producers ─────────────────────────────────────────────────────────────────────────────

  /**
   * Appends one event at the namespace tail and returns its seq: one write transaction that holds
   * the write lock from before the tail is read until the row is committed.
   */
  enqueue(tag: string, payload: string, source = "", trace?: RowTrace): number {
    this.#file.ensureOpen();
    this.#checkItem(tag, payload, source);
    this.#file.checkNotMoved();
    return this.#append.one(tag, payload, source, trace);
  }

  /**
   * Appends events in one transaction, as one group (delivered whole, in one remote transaction):
   * item 0 links to the tail, item i to item i−1's seq. Inside `transaction` they join its group.
   * `{ grouped: false }` commits them together but delivers each on its own (a bulk load of
   * independent events).
   */
  enqueueBatch(
    items: ReadonlyArray<{ tag: string; payload: string }>,
    source = "",
    options: { trace?: RowTrace; grouped?: boolean } = {},
  ): number[] {
    this.#file.ensureOpen();
    if (!Array.isArray(items)) throw this.#file.invalid("enqueueBatch expects an array of { tag, payload }");
    for (const item of items) this.#checkItem(item?.tag, item?.payload, source);
    this.#file.checkNotMoved();
    if (items.length === 0) return [];
    return this.#append.many(items, source, options.trace, options.grouped ?? true);
  }

  /**
   * Runs `fn` in one local transaction (BEGIN IMMEDIATE) of this outbox's file: everything it
   * enqueues — into any namespace of the file — is one group, committed together and delivered
   * together. `fn` must be synchronous; a nested call joins the open transaction.
   */
  transaction<T>(fn: () => T): T {
    this.#file.ensureOpen();
    return this.#file.queueDb.transaction(fn);
  }

  // ── reading the queue ─────────────────────────────────────────────────────────────────────

  /** Up to `limit` pending rows of this namespace, ascending seq (the head first). */
  fetchUnsynced(limit: number): OutboxRow[] {
    this.#file.ensureOpen();
    if (!Number.isSafeInteger(limit) || limit < 0)
      throw this.#file.invalid(`fetchUnsynced limit must be a non-negative integer, got ${limit}`);
    const file = this.#file;
    return file.read("cannot fetch", () =>
      file.db
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
   * What this connection has seen of its file: `version` (`PRAGMA data_version`) changes whenever
   * another connection, in any process, committed to the file — never for this connection's own
   * commits, which `writes` (`total_changes()`: rows it inserted, updated or deleted) counts.
   */
  commitCounters(): { version: number; writes: number } {
    this.#file.ensureOpen();
    const db = this.#file.db;
    return this.#file.read(
      "cannot read data_version",
      () =>
        db
          .query<{ version: number; writes: number }, []>(
            "SELECT data_version AS version, total_changes() AS writes FROM pragma_data_version",
          )
          .get()!,
    );
  }

  /** Pending rows of this namespace, without a scan. */
  pendingCount(): number {
    this.#file.ensureOpen();
    return this.#file.read("cannot count", () => this.#file.pendingCount());
  }

  /**
   * Checks that each row's `prevSeq` is the row before it in `rows`, or exists as a pending,
   * delivered (sync log) or dead-lettered row of this namespace. A null `prevSeq` starts a chain.
   */
  verifyChain(rows: readonly OutboxRow[]): { ok: boolean; gaps: ChainGap[] } {
    this.#file.ensureOpen();
    const gaps: ChainGap[] = [];
    this.#file.read("cannot verify chain", () => {
      for (let i = 0; i < rows.length; i++) {
        const row = rows[i]!;
        if (row.prevSeq === null || row.prevSeq === undefined) continue;
        if (i > 0 && rows[i - 1]!.seq === row.prevSeq) continue;
        if (!this.#file.exists(row.prevSeq)) gaps.push({ seq: row.seq, prevSeq: row.prevSeq });
      }
    });
    return { ok: gaps.length === 0, gaps };
  }

  /**
   * Whether this namespace has a history in this file: a row delivered or dead-lettered,
   * or a pending head linked to an earlier row (logs pruned). A fresh queue has none.
   */
  hasHistory(): boolean {
    this.#file.ensureOpen();
    const file = this.#file;
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

  /** This namespace's health (see NamespaceHealth), with this outbox's maxPending. */
  health(now?: Date): NamespaceHealth {
    this.#file.ensureOpen();
    const file = this.#file;
    // A file an Outbox opened went through migrations, so it has every table and column: the
    // schema need not be read. One read transaction: depth and head from the same state.
    const features = {
      pendingCount: layoutPendingCount(file.layout),
      delivery: true,
      deliveredLog: DELIVERED[file.layout],
      deadLog: true,
      deadReplay: true,
    } as const;
    return file.read("cannot read health", () =>
      file.db.transaction(() =>
        namespaceHealth(file.db, this.path, this.namespace, features, { maxPending: this.maxPending, now }),
      )(),
    );
  }

  // ── the drain's bookkeeping ───────────────────────────────────────────────────────────────

  /**
   * The drain's read of this namespace, in ONE read transaction: the head and the pending count,
   * and — when `ready(head, pending)` says so — up to `limit` rows head first, no more than
   * `maxBytes` of SQL text and payload (the first row always, however large), cut before the
   * first row whose chain link exists nowhere. Rows are streamed, so a backlog of large rows is
   * never loaded beyond the budget. With `after`, the rows at or below it are passed over (a target
   * applied them; their local confirmation is still to come) and the first row above it is the head.
   */
  readForDelivery(
    limit: number,
    maxBytes: number,
    ready: (head: OutboxRow, pending: number) => boolean,
    after: number | null = null,
  ): DeliveryRead {
    this.#file.ensureOpen();
    return this.#delivery.readForDelivery(limit, maxBytes, ready, after);
  }

  /**
   * Charges one delivery attempt to a pending row BEFORE delivering it (crash-loop protection).
   * With `sentThrough`, also raises this namespace's sent mark to it, in the same transaction
   * (see `sentMark`).
   */
  recordAttempt(seq: number, at: Date = new Date(), sentThrough: number | null = null): void {
    this.#file.ensureOpen();
    this.#delivery.recordAttempt(seq, at, sentThrough);
  }

  /**
   * The highest seq of this namespace ever sent to a target (0 when none): it only rises. Rows at
   * or below it may have been applied by a batch whose outcome is unknown — a crash, a timeout, a
   * COMMIT that becomes visible late — so the drain settles them from the delivery ledger; rows
   * above it were never sent. (Files written by earlier versions kept this on the head as
   * `sent_through`; it is honoured too.)
   */
  sentMark(): number {
    this.#file.ensureOpen();
    return this.#delivery.sentMark();
  }

  /** Undoes one attempt charge (the target was down: not the row's fault); never below zero. */
  refundAttempt(seq: number): void {
    this.#file.ensureOpen();
    this.#delivery.refundAttempt(seq);
  }

  /**
   * Records a failed delivery of a pending row: the error, its class and when to retry; with
   * `attempts`, its attempt count is raised to at least that (a group that spans tables counts its
   * attempts across its heads).
   */
  recordFailure(seq: number, error: string, errorClass: string, nextAttemptAt: Date, attempts = 0): void {
    this.#file.ensureOpen();
    this.#delivery.recordFailure(
      seq,
      String(error),
      errorClass === null || errorClass === undefined ? null : String(errorClass),
      nextAttemptAt,
      attempts,
    );
  }

  /**
   * Confirms every pending row at or below `bound` (sync log + delete, one transaction): the
   * drain's settlement of rows the delivery ledger says were applied. Returns how many.
   */
  confirmThrough(bound: number): number {
    this.#file.ensureOpen();
    return this.#delivery.confirmThrough(bound);
  }

  /**
   * Records delivered rows in the sync log and deletes them from the queue, in ONE transaction:
   * any set of pending seqs, not only a prefix (unknown ones are ignored). For an application
   * that delivers rows itself; the drain confirms prefixes with `confirmThrough`.
   */
  confirm(seqs: readonly number[]): void {
    this.#file.ensureOpen();
    if (seqs.length > 0) this.#delivery.confirm(seqs);
  }

  /** Makes the next allocated seq of the file greater than `minSeq`; never lowers it. */
  seedSequence(minSeq: number): void {
    this.#file.ensureOpen();
    if (!Number.isSafeInteger(minSeq) || minSeq < 0)
      throw this.#file.invalid(`seedSequence expects a non-negative integer, got ${minSeq}`);
    this.#delivery.seedSequence(minSeq);
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
    this.#file.ensureOpen();
    if (!Number.isSafeInteger(minSeq) || minSeq < 0)
      throw this.#file.invalid(`resequenceAbove expects a non-negative integer, got ${minSeq}`);
    return this.#delivery.resequenceAbove(minSeq);
  }

  /**
   * Deletes this namespace's sync-log entries older than `retainDays` (compared as times, not
   * strings), except the entries that bridge the chain: any entry a queued row still links to (the
   * head's predecessor; also a reference leftover's) and the newest entry (the predecessor of the
   * next row once the queue is empty). Returns the count.
   */
  pruneSyncLog(retainDays: number, now: Date = new Date()): number {
    this.#file.ensureOpen();
    this.#checkDays(retainDays);
    return this.#delivery.pruneSyncLog(retainDays, now).removed;
  }

  /**
   * One step of pruneSyncLog: at most one chunk (500 entries, one short write transaction).
   * `done` is false when more may be due: a caller that prunes a long log steps with pauses
   * between, so producers of the file get its write lock in between (SQLite's lock is not fair).
   */
  pruneSyncLogStep(retainDays: number, now: Date = new Date()): { removed: number; done: boolean } {
    this.#file.ensureOpen();
    this.#checkDays(retainDays);
    return this.#delivery.pruneSyncLog(retainDays, now, 1);
  }

  // ── dead letters ──────────────────────────────────────────────────────────────────────────

  /**
   * Moves the head atomically to outbox_dead_log with a reason, so the namespace advances. `error`
   * and `errorClass` default to the head's last recorded failure.
   */
  deadLetter(
    seq: number,
    reason: DeadReason,
    error: string | null = null,
    errorClass: string | null = null,
  ): DeadLettered {
    this.#file.ensureOpen();
    if (typeof reason !== "string" || reason === "") throw this.#file.invalid("deadLetter needs a reason");
    return this.#dead.deadLetter(seq, reason, error, errorClass);
  }

  /**
   * Operator action: ends the backoff of this namespace's head (and of its group, in every table it
   * spans), so the drain retries it at its next look — in place, with its attempts; `skipHead`
   * moves it away instead. Null when nothing was backing off.
   */
  retryHead(): RetriedHead | null {
    this.#file.ensureOpen();
    return this.#delivery.retryHead();
  }

  /** Operator action: dead-letters the head (and its group) with reason "skipped". */
  skipHead(seq: number): DeadLettered {
    return this.deadLetter(seq, "skipped", "skipped by operator");
  }

  /** Re-enqueues a dead letter at the tail (once) and records replayed_at / replayed_as_seq; returns the new seq. */
  replayDead(seq: number, source?: string): number {
    this.#file.ensureOpen();
    return this.#dead.replay(seq, source);
  }

  /**
   * Re-enqueues many dead letters at the tail in ONE transaction, in ascending seq order whatever
   * the order given, each linked to the one before (as replayDead, from the same tail and append);
   * letters replayed before are skipped, never replayed twice. A seq that is no dead letter of
   * this namespace throws NotFoundError and nothing is replayed. `source` defaults to each letter's.
   */
  replayDeadMany(seqs: readonly number[], source?: string): DeadReplays {
    this.#file.ensureOpen();
    if (!Array.isArray(seqs) || !seqs.every((s) => Number.isSafeInteger(s) && s > 0))
      throw this.#file.invalid("replayDeadMany expects an array of positive integer seqs");
    const ordered = [...new Set(seqs)].sort((a, b) => a - b);
    if (ordered.length === 0) return { replayed: [], skipped: [] };
    return this.#dead.replayMany(ordered, source);
  }

  /**
   * Deletes this namespace's dead letters that `rule` selects (see PurgeRule) in ONE transaction,
   * except those the chain still needs: one a queued row links to, and the namespace's newest
   * (see PurgeOutcome). Returns what was deleted and what was kept.
   */
  purgeDead(rule: PurgeRule): PurgeOutcome {
    this.#file.ensureOpen();
    if (!(rule?.before instanceof Date) || Number.isNaN(rule.before.getTime()))
      throw this.#file.invalid("purgeDead needs a valid `before` Date");
    return this.#dead.purge(rule);
  }

  /**
   * The drain's retention of replayed dead letters: deletes this namespace's letters replayed more
   * than `retainDays` ago (compared as times), with purgeDead's protections. Letters never
   * replayed are kept however old. Returns the count.
   */
  pruneReplayedDead(retainDays: number, now: Date = new Date()): number {
    this.#file.ensureOpen();
    this.#checkDays(retainDays);
    return this.#dead.purge({ before: new Date(now.getTime() - retainDays * 86_400_000), by: "replayedAt" }).purged
      .length;
  }

  /** Every dead letter of this namespace, ascending seq (replayed ones included). */
  listDead(): DeadLetter[] {
    this.#file.ensureOpen();
    return this.#dead.list();
  }

  /** One dead letter of this namespace, or null. */
  getDead(seq: number): DeadLetter | null {
    this.#file.ensureOpen();
    return this.#dead.get(seq);
  }

  /**
   * The letters dead-lettered with the letter `seq` of this namespace, seq order, itself included:
   * its group, in every namespace of the file (itself alone when it has none). Empty when `seq` is
   * no dead letter here.
   */
  listDeadGroup(seq: number): DeadLetter[] {
    this.#file.ensureOpen();
    return this.#dead.groupOf(seq);
  }

  /** Dead letters of this namespace not yet replayed. */
  deadCount(): number {
    this.#file.ensureOpen();
    return this.#dead.count();
  }

  // ── lifecycle ─────────────────────────────────────────────────────────────────────────────

  /** Whether close() was called (or the file was found deleted or replaced while open). */
  get closed(): boolean {
    return this.#file.closed;
  }

  /** Closes the file (its connection closes with the last namespace open on it); idempotent. Every later call throws OutboxClosedError. */
  close(): void {
    this.#dead.close();
    this.#file.close();
  }

  #checkItem(tag: unknown, payload: unknown, source: unknown): void {
    // A lone surrogate would be silently replaced when SQLite stores the text as UTF-8.
    if (typeof tag !== "string" || tag === "" || !tag.isWellFormed())
      throw this.#file.invalid("tag must be a non-empty, well-formed string");
    if (typeof payload !== "string" || !payload.isWellFormed())
      throw this.#file.invalid("payload must be a well-formed string");
    if (typeof source !== "string" || !source.isWellFormed())
      throw this.#file.invalid("source must be a well-formed string");
  }

  #checkDays(retainDays: number): void {
    if (!Number.isFinite(retainDays) || retainDays < 0)
      throw this.#file.invalid(`retainDays must be a non-negative number, got ${retainDays}`);
  }
}

/** The open file `outbox` is a view of. */
export function queueDbOf(outbox: Outbox): QueueDb {
  return queueDbs.get(outbox)!;
}

/** The queue of `namespace` in an open file shared with its other namespaces (one connection, one transaction across them). */
export function outboxOn(queueDb: QueueDb, namespace: string, options: OutboxOptions = {}): Outbox {
  return new Outbox(queueDb.path, namespace, { ...options, [SHARED]: queueDb });
}

function positive(value: number | undefined, fallback: number, name: string, namespace: string, path: string): number {
  if (value === undefined) return fallback;
  if (Number.isSafeInteger(value) && value > 0) return value;
  throw new InvalidArgumentError(
    `${name} must be a positive integer, got ${String(value)} (namespace "${namespace}" in ${path})`,
    { namespace, file: path },
  );
}

/** Opens the queue of `namespace` in `path`, runs `fn` on it and closes it, whatever `fn` does. */
export function withOutbox<T>(path: string, namespace: string, fn: (outbox: Outbox) => T): T {
  const outbox = new Outbox(path, namespace);
  try {
    return fn(outbox);
  } finally {
    outbox.close();
  }
}
