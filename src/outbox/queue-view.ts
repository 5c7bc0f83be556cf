import { resolve } from "node:path";
import { InvalidArgumentError } from "../errors.ts";
import type { Durability } from "../vocabulary.ts";
import { Appender, DEFAULT_GROUP_LIMITS } from "./append.ts";
import { DeadLog, type DeadLettered } from "./dead-log.ts";
import { namespaceHealth, type NamespaceHealth } from "./health.ts";
import { DELIVERED } from "./delivered.ts";
import { QueueDb } from "./queue-db.ts";
import { QueueFile } from "./queue-file.ts";
import { QUEUE_ROW_COLUMNS, type DeadReason, type OutboxRow } from "./rows.ts";
import { layoutPendingCount } from "./schema.ts";

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

/** The open file a view shares with the file's other namespaces (outboxOn, drainQueueOn). */
export const SHARED = Symbol("sqloutbox.sharedQueueDb");
/** Told how long each write transaction on a file the view opens held its lock (openDrainQueue: the drain's metric). */
export const WRITE_HOLDS = Symbol("sqloutbox.writeHolds");

/**
 * What a view is opened with besides its OutboxOptions: a file shared with other views, or a watch on the
 * lock holds of the one it opens.
 */
export interface ViewOptions extends OutboxOptions {
  [SHARED]?: QueueDb;
  [WRITE_HOLDS]?: ((seconds: number) => void) | null;
}

/**
 * One namespace of one queue file, opened: what every audience of the queue shares — the open
 * file, the reads everyone asks (head, pending count, health) and moving the head to the dead
 * letters. Its faces add their own: `Outbox` the producer's and the operator's, `DrainQueue` the
 * drain's. Creates the file and schema (idempotent migrations) but not the directory. Every
 * failure throws a typed OutboxError.
 */
export class QueueView {
  /** Absolute path of the SQLite file. */
  readonly path: string;
  readonly namespace: string;
  readonly maxPending: number | null;
  /** `normal` (synchronous=NORMAL) or `full` (synchronous=FULL). */
  readonly durability: Durability;
  /** The file's origin id: how every target's delivery ledger knows this queue file. */
  readonly origin: string;
  protected readonly queueFile: QueueFile;
  protected readonly appender: Appender;
  protected readonly deadLog: DeadLog;

  constructor(path: string, namespace: string, options: ViewOptions = {}) {
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
          onWriteHold: options[WRITE_HOLDS],
        });
    this.queueFile = new QueueFile(queueDb, namespace);
    this.origin = this.queueFile.origin;
    this.appender = new Appender(this.queueFile, maxPending, limits);
    this.deadLog = new DeadLog(this.queueFile, this.appender);
  }

  /** Up to `limit` pending rows of this namespace, ascending seq (the head first). */
  fetchUnsynced(limit: number): OutboxRow[] {
    this.queueFile.ensureOpen();
    if (!Number.isSafeInteger(limit) || limit < 0)
      throw this.queueFile.invalid(`fetchUnsynced limit must be a non-negative integer, got ${limit}`);
    const file = this.queueFile;
    file.adoptForeignRows();
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

  /** Pending rows of this namespace, without a scan. */
  pendingCount(): number {
    this.queueFile.ensureOpen();
    this.queueFile.adoptForeignRows();
    return this.queueFile.read("cannot count", () => this.queueFile.pendingCount());
  }

  /** This namespace's health (see NamespaceHealth), with this outbox's maxPending. */
  health(now?: Date): NamespaceHealth {
    this.queueFile.ensureOpen();
    const file = this.queueFile;
    // A file an Outbox opened went through migrations, so it has every table and column: the
    // schema need not be read. One read transaction: depth and head from the same state.
    const features = {
      pendingCount: layoutPendingCount(file.layout),
      delivery: true,
      deliveredLog: DELIVERED[file.layout],
      deadLog: true,
      deadReplay: true,
      deadRemote: true,
    } as const;
    return file.read("cannot read health", () =>
      file.db.transaction(() =>
        namespaceHealth(file.db, this.path, this.namespace, features, { maxPending: this.maxPending, now }),
      )(),
    );
  }

  /**
   * Moves the head atomically to outbox_dead_log with a reason, so the namespace advances. `error`
   * and `errorClass` default to the head's last recorded failure. `inDoubt` says whether a batch
   * carrying it may still commit or have committed unanswered; unsaid, whether it was ever sent
   * (see DeadLog.deadLetter).
   */
  deadLetter(
    seq: number,
    reason: DeadReason,
    error: string | null = null,
    errorClass: string | null = null,
    inDoubt?: boolean,
  ): DeadLettered {
    this.queueFile.ensureOpen();
    if (typeof reason !== "string" || reason === "") throw this.queueFile.invalid("deadLetter needs a reason");
    return this.deadLog.deadLetter(seq, reason, error, errorClass, inDoubt);
  }

  /** Whether close() was called (or the file was found deleted or replaced while open). */
  get closed(): boolean {
    return this.queueFile.closed;
  }

  /**
   * Closes the file (its connection closes with the last namespace open on it); idempotent. Every later call
   * throws OutboxClosedError.
   */
  close(): void {
    this.deadLog.close();
    this.queueFile.close();
  }

  protected checkDays(retainDays: number): void {
    if (!Number.isFinite(retainDays) || retainDays < 0)
      throw this.queueFile.invalid(`retainDays must be a non-negative number, got ${retainDays}`);
  }
}

function positive(value: number | undefined, fallback: number, name: string, namespace: string, path: string): number {
  if (value === undefined) return fallback;
  if (Number.isSafeInteger(value) && value > 0) return value;
  throw new InvalidArgumentError(
    `${name} must be a positive integer, got ${String(value)} (namespace "${namespace}" in ${path})`,
    { namespace, file: path },
  );
}
