import type { Database } from "bun:sqlite";
import { CrossTableTransactionError, CrossTenantTransactionError, InvalidArgumentError } from "../errors.ts";
import { StatementCache } from "../sql/statement-cache.ts";
import type { RowTrace } from "../trace-context.ts";
import type { Dialect } from "../vocabulary.ts";
import { type Outbox, type OutboxOptions, outboxOn } from "./outbox.ts";
import { callSynchronously, QueueDb } from "./queue-db.ts";

/** One namespace's queue as the producers share it: its Outbox and the open file under it. */
export interface OpenQueue {
  readonly outbox: Outbox;
  readonly queueDb: QueueDb;
}

/**
 * Where a namespace's queue is opened: `own`, a file of its own (db_dir), whose connection the queue
 * owns and closes; `file` (a db_file's real path) or `database` (the application's), on the one
 * connection every namespace of that file shares.
 */
type QueueSite =
  | { kind: "own"; path: string }
  | { kind: "file"; path: string }
  | { kind: "database"; database: Database };

const TRACE_WARNING_INTERVAL_MS = 60_000;

/**
 * What the producers of this process share, and its one owner: the queue files open (one Outbox
 * per file and namespace, so every producer of a table shares one connection and its cached
 * statements; one connection per db_file and per application database), the transaction
 * `transaction(fn)` has open on them, the statement verdicts per dialect (a producer created per
 * request still checks each text once) and the trace contexts dropped at the door since the last
 * warning. Files are known by a key: the real path of the file, so `./a`, `/abs/a` and a symlink to
 * it meet, or an application database's id.
 */
class OpenQueues {
  #queues = new Map<string, OpenQueue>();
  #files = new Map<string, QueueDb>();
  #databases = new Map<Database, QueueDb>();
  #databaseIds = new WeakMap<Database, number>();
  #nextDatabaseId = 1;
  #transaction: OpenTransaction | null = null;
  #statements = new Map<Dialect | null, StatementCache>();
  #dropped = { count: 0, warnedAt: -Infinity };

  /** The transaction `transaction(fn)` has open (fn is synchronous, so at most one), or null. */
  get transaction(): OpenTransaction | null {
    return this.#transaction;
  }

  /**
   * The queue of `namespace` in the file known as `key`, opened at `site` on first use (`file`
   * names it in messages). A producer asking for another maxPending or durability than the queue
   * was opened with is refused rather than silently given a different cap or a weaker durability.
   */
  queue(key: string, namespace: string, site: QueueSite, options: OutboxOptions, file: string): OpenQueue {
    const id = `${key}\0${namespace}`;
    const found = this.#queues.get(id);
    if (found !== undefined && !found.outbox.closed) {
      for (const [option, have, want] of [
        ["maxPending", found.outbox.maxPending, options.maxPending ?? null],
        ["durability", found.outbox.durability, options.durability ?? "normal"],
      ] as const) {
        if (have === want) continue;
        throw new InvalidArgumentError(
          `namespace "${namespace}" in ${file} is already open in this process with ${option}=${JSON.stringify(have)}, not ${JSON.stringify(want)}`,
          { namespace, file },
        );
      }
      return found;
    }
    // Absent, or closed by its owner (or found deleted while open): the file is opened again.
    const queue =
      site.kind === "own" ? ownQueue(site.path, namespace, options) : this.#sharedQueue(site, namespace, options);
    this.#queues.set(id, queue);
    return queue;
  }

  /** The connection every namespace of a db_file or of the application's database shares (opened on first use). */
  connection(site: Exclude<QueueSite, { kind: "own" }>, durability: OutboxOptions["durability"]): QueueDb {
    if (site.kind === "database") {
      let queueDb = this.#databases.get(site.database);
      if (queueDb === undefined || queueDb.closed)
        this.#databases.set(site.database, (queueDb = QueueDb.borrow(site.database)));
      return queueDb;
    }
    let queueDb = this.#files.get(site.path);
    if (queueDb === undefined || queueDb.closed)
      this.#files.set(
        site.path,
        (queueDb = QueueDb.open(site.path, { durability: durability ?? "normal", busyTimeoutMs: 10_000 })),
      );
    return queueDb;
  }

  /** The key of an application database: its connection has no path of its own to be known by. */
  databaseKey(database: Database): string {
    let id = this.#databaseIds.get(database);
    if (id === undefined) this.#databaseIds.set(database, (id = this.#nextDatabaseId++));
    return `database#${id}`;
  }

  /** The statement verdicts of `dialect` (null: every dialect's), shared by every producer. */
  statements(dialect: Dialect | null): StatementCache {
    let cache = this.#statements.get(dialect);
    if (cache === undefined) this.#statements.set(dialect, (cache = new StatementCache(dialect)));
    return cache;
  }

  /**
   * Runs `fn` as the open transaction `tx`: committed when `fn` returns, rolled back when it
   * throws. `fn` must be synchronous.
   */
  run<T>(tx: OpenTransaction, fn: () => T): T {
    this.#transaction = tx;
    let result: T;
    try {
      result = callSynchronously(fn, "transaction(fn)");
    } catch (e) {
      this.#transaction = null;
      tx.rollback();
      throw e;
    }
    this.#transaction = null;
    tx.commit();
    return result;
  }

  /**
   * Says that a trace context was dropped — through process.emitWarning (stderr unless the
   * application listens for "warning"), at most once a minute, so a producer that sends a bad
   * header on every request does not flood its log; the event itself was stored.
   */
  traceDropped(problem: string, table: string): void {
    const dropped = this.#dropped;
    dropped.count += 1;
    const now = Date.now();
    if (now - dropped.warnedAt < TRACE_WARNING_INTERVAL_MS) return;
    const more = dropped.count > 1 ? ` (${dropped.count} trace contexts dropped since the last warning)` : "";
    dropped.count = 0;
    dropped.warnedAt = now;
    process.emitWarning(`sqloutbox: push to "${table}": ${problem}; the event was stored without it${more}`, {
      type: "SqloutboxTraceContextWarning",
      code: "SQLOUTBOX_TRACE_CONTEXT",
    });
  }

  /** Closes every queue and lets go of every shared connection; the next push opens them again. */
  close(): void {
    for (const queue of this.#queues.values()) queue.outbox.close();
    this.#queues.clear();
    for (const queueDb of [...this.#files.values(), ...this.#databases.values()]) queueDb.release();
    this.#files.clear();
    this.#databases.clear();
  }

  #sharedQueue(site: Exclude<QueueSite, { kind: "own" }>, namespace: string, options: OutboxOptions): OpenQueue {
    const queueDb = this.connection(site, options.durability);
    return { outbox: outboxOn(queueDb, namespace, options), queueDb };
  }
}

/** A queue in a file of its own: its connection is opened here and handed to the queue, which closes it. */
function ownQueue(path: string, namespace: string, options: OutboxOptions): OpenQueue {
  const queueDb = QueueDb.open(path, { durability: options.durability ?? "normal", busyTimeoutMs: 10_000, namespace });
  try {
    return { outbox: outboxOn(queueDb, namespace, options), queueDb };
  } finally {
    queueDb.release(); // the queue acquired it: it is the only user left
  }
}

/**
 * The transaction `transaction(fn)` has open: every push while it runs belongs to it, whichever
 * producer makes it. On a file shared by every table it is open from the start; with one file per
 * table it binds to the file of its first push, and a push into another file is refused.
 */
export class OpenTransaction {
  /** The trace context of every push inside that passes none. */
  readonly trace: RowTrace | undefined;
  /** The key of every push inside that gives none (its text, checked); null: none. */
  readonly laneKey: string | null;
  /** The tenant of every push inside (given to the transaction, or by its first push for one); null: none yet. */
  #tenant: string | null;
  #queueDb: QueueDb | null;
  #key: string | null;
  #table: string | null = null;
  /** Whether it began the local transaction (else it joined an Outbox.transaction open there). */
  #began = false;

  /** A transaction on `queueDb` (the file known as `key`), begun now; null for both: bound at its first push. */
  constructor(
    queueDb: QueueDb | null,
    key: string | null,
    trace: RowTrace | undefined,
    laneKey: string | null = null,
    tenant: string | null = null,
  ) {
    this.#queueDb = queueDb;
    this.#key = key;
    this.trace = trace;
    this.laneKey = laneKey;
    this.#tenant = tenant;
    if (queueDb !== null) this.#begin(queueDb);
  }

  /** The tenant of every push inside that names none; null: none yet. */
  get tenant(): string | null {
    return this.#tenant;
  }

  /**
   * A push for `tenant` into `table`: the first one names the transaction's tenant; another tenant is refused
   * (one group, one database).
   */
  forTenant(tenant: string, table: string): void {
    if (this.#tenant === null) this.#tenant = tenant;
    else if (this.#tenant !== tenant) throw new CrossTenantTransactionError([this.#tenant, tenant], table);
  }

  /** The key of the file it is bound to; null until its first push (one file per table). */
  get key(): string | null {
    return this.#key;
  }

  /**
   * Binds it to the file of its first push, into `table` on `queueDb` (the file known as `key`),
   * and begins the local transaction there.
   */
  bind(table: string, queueDb: QueueDb, key: string): void {
    this.#queueDb = queueDb;
    this.#key = key;
    this.#table = table;
    this.#begin(queueDb);
  }

  /** Joins a push into `table` on `queueDb`; refused when that is another file than the transaction's. */
  join(table: string, queueDb: QueueDb): void {
    this.#table ??= table;
    if (this.#queueDb !== queueDb)
      throw new CrossTableTransactionError([this.#table, table], [this.#queueDb!.path, queueDb.path]);
  }

  /** The refusal of a push into `table`, whose file (`path`) is not this transaction's. */
  refusal(table: string, path: string): CrossTableTransactionError {
    return new CrossTableTransactionError([this.#table ?? table, table], [this.#queueDb!.path, path]);
  }

  commit(): void {
    if (this.#began) this.#queueDb!.commit();
  }

  rollback(): void {
    if (this.#began) this.#queueDb!.rollback();
  }

  #begin(queueDb: QueueDb): void {
    if (queueDb.group !== null) return; // an Outbox.transaction is open there: it joins it
    queueDb.begin();
    this.#began = true;
  }
}

/** The process's one registry of what its producers share. */
export const openQueues = new OpenQueues();
