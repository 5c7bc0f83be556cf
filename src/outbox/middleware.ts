import type { Database } from "bun:sqlite";
import { mkdirSync, realpathSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { InvalidArgumentError, InvalidStatementError, StorageError } from "../errors.ts";
import { DIALECTS } from "../vocabulary.ts";
import type { StatementCache } from "../sql/statement-cache.ts";
import type { Dialect } from "../vocabulary.ts";
import type { Outbox, OutboxOptions } from "./outbox.ts";
import { encodeArgs, type PayloadLocation } from "./payload.ts";
import type { QueueDb } from "./queue-db.ts";
import type { Durability } from "../vocabulary.ts";
import { type OpenQueue, OpenTransaction, openQueues } from "./open-queues.ts";
import { tableFile } from "./files.ts";
import { tableNameProblem } from "./table-name.ts";
import { type LaneKey, laneKeyText } from "../lane-key.ts";
import { tenantNameProblem } from "../tenant.ts";
import { checkTraceContext, type RowTrace, type TraceContextInput } from "../trace-context.ts";
import type { RowContext } from "./append.ts";
import type { AppendItem } from "./layout.ts";
import { activeTrace } from "./active-trace.ts";

/**
 * Options of a producer: where the queues are — exactly one of `dbDir`, `dbFile` and `database` —
 * and how they are written. Defaults: unbounded, `normal` durability, source = the class name,
 * statements read with every dialect's lexer, no injected tables, 1 MiB per statement, 10 000
 * statements and 16 Mi characters per transaction.
 */
export interface SQLMiddlewareOptions {
  /** Directory holding one `{table}.db` file per table; created on first use. */
  dbDir?: string;
  /** One file holding every table as a namespace (created on first use): transactions may span tables. */
  dbFile?: string;
  /**
   * The application's own `bun:sqlite` database (a file, in WAL mode): the outbox creates its
   * `outbox_*` tables in it, and `transaction(fn)` commits the application's writes and the events
   * together. The drain is pointed at its file with `db_file`.
   */
  database?: Database;
  maxPending?: number | null;
  durability?: Durability;
  /** Label stored with every row this producer writes. */
  source?: string;
  /** The remote dialect, when the producer knows it: statements are then read with its lexer only. */
  dialect?: Dialect;
  /**
   * Tables whose statements must also be accepted by `injectOutboxSeq` (the compatibility mode),
   * for `dialect` or every dialect; `true` for every table.
   */
  injectOutboxSeq?: boolean | readonly string[];
  /** Largest UTF-8 size of one statement's SQL text plus its encoded arguments, in bytes. */
  maxPayloadBytes?: number;
  /** Most statements one transaction (a `pushMany`, a `transaction`) may hold. */
  maxGroupStatements?: number;
  /** Most characters of SQL text and encoded arguments one transaction may hold. */
  maxGroupBytes?: number;
}

/** What a push may say besides its statement: its key (see `push`) and its W3C trace context. */
export interface PushOptions extends TraceContextInput {
  key?: LaneKey | null;
  /**
   * The tenant whose database the event goes to, on a tenant template target (SPEC §4c): letters,
   * digits, `_` and `-`, up to 63, starting with a letter or digit. One transaction, one tenant.
   */
  tenant?: string | null;
}

/** A tenant name given at the door, checked (see tenant.ts); `where` names what it was given for. */
function checkedTenant(tenant: unknown, where: string): string {
  const problem = tenantNameProblem(tenant);
  if (problem !== null) throw new InvalidArgumentError(`${problem} (for ${where})`);
  return tenant as string;
}

/** The default `maxPayloadBytes`: 1 MiB. */
export const DEFAULT_MAX_PAYLOAD_BYTES = 1_048_576;

/** Where a producer's queues are (see SQLMiddlewareOptions). */
type Where = { kind: "dir"; dir: string } | { kind: "file"; file: string } | { kind: "database"; database: Database };

/**
 * The hot-path producer: `push(table, sql, args)` appends an SQL event for `table` synchronously
 * (no network, no await) and returns its seq — into `{dbDir}/{table}.db`, or as a namespace of
 * `dbFile` or of the application's `database`. `pushMany` and everything pushed inside
 * `transaction(fn)` form one group, delivered whole in one remote transaction. Subclass it or use it
 * directly. Everything is checked at push time, before anything is written: the SQL text must be
 * one statement taking exactly `args.length` placeholders (InvalidStatementError naming the table;
 * verdicts cached per text), the arguments must round-trip losslessly (see payload.ts) and the
 * statement must fit `maxPayloadBytes` (InvalidArgumentError); every other failure is a typed
 * OutboxError.
 */
export class SQLMiddleware {
  /** The directory of the queue files (`dbDir`), or the directory of `dbFile` / of the application's database. */
  readonly dbDir: string;
  /** The one file every table is a namespace of (`dbFile`, or the application's database), or null with `dbDir`. */
  readonly dbFile: string | null;
  readonly maxPending: number | null;
  readonly durability: Durability;
  readonly dialect: Dialect | null;
  readonly maxPayloadBytes: number;
  #where: Where;
  #source: string;
  #statements: StatementCache;
  #groupLimits: Pick<OutboxOptions, "maxGroupStatements" | "maxGroupBytes">;
  /** Tables whose statements must be injectable: all (`true`) or these. */
  #inject: boolean | ReadonlySet<string>;
  /** The real path of dbDir once it exists (symlinks resolved): the registry key. */
  #realDir: string | undefined;
  /** This producer's queues by table: the push hot path skips the name check and the registry. */
  #mine = new Map<string, OpenQueue>();

  constructor(options: SQLMiddlewareOptions) {
    const given = options ? (["dbDir", "dbFile", "database"] as const).filter((k) => options[k] !== undefined) : [];
    if (given.length !== 1) {
      throw new InvalidArgumentError(
        given.length === 0
          ? "SQLMiddleware needs where its queues are: dbDir (one file per table), dbFile (every table in one file) or database (the application's own bun:sqlite database)"
          : `SQLMiddleware takes exactly one of dbDir, dbFile and database, got ${given.join(" and ")}`,
      );
    }
    if (options.database !== undefined) {
      const database = options.database;
      if (typeof database !== "object" || database === null || typeof (database as Database).prepare !== "function") {
        throw new InvalidArgumentError("SQLMiddleware({ database }) expects a bun:sqlite Database");
      }
      this.#where = { kind: "database", database };
      this.dbFile = resolve(database.filename);
      this.dbDir = dirname(this.dbFile);
    } else {
      const path = options.dbDir ?? options.dbFile;
      const key = options.dbDir !== undefined ? "dbDir" : "dbFile";
      if (typeof path !== "string" || path === "")
        throw new InvalidArgumentError(`SQLMiddleware needs a non-empty ${key}`);
      if (options.dbDir !== undefined) {
        this.dbDir = resolve(path);
        this.dbFile = null;
        this.#where = { kind: "dir", dir: this.dbDir };
      } else {
        this.dbFile = resolve(path);
        this.dbDir = dirname(this.dbFile);
        this.#where = { kind: "file", file: this.dbFile };
      }
    }
    this.maxPending = options.maxPending ?? null;
    this.durability = options.durability ?? "normal";
    this.#source = options.source ?? new.target.name;
    const dialect = options.dialect ?? null;
    if (dialect !== null && !DIALECTS.includes(dialect)) {
      throw new InvalidArgumentError(
        `unknown SQL dialect ${JSON.stringify(dialect)} (expected one of ${DIALECTS.join(", ")})`,
      );
    }
    this.dialect = dialect;
    this.#statements = openQueues.statements(dialect);
    const inject = options.injectOutboxSeq ?? false;
    if (typeof inject === "boolean") this.#inject = inject;
    else if (Array.isArray(inject) && inject.every((t) => typeof t === "string")) this.#inject = new Set(inject);
    else throw new InvalidArgumentError("injectOutboxSeq must be a boolean or an array of table names");
    const max = options.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
    if (!Number.isSafeInteger(max) || max < 1)
      throw new InvalidArgumentError(`maxPayloadBytes must be a positive integer, got ${String(max)}`);
    this.maxPayloadBytes = max;
    this.#groupLimits = { maxGroupStatements: options.maxGroupStatements, maxGroupBytes: options.maxGroupBytes };
  }

  /** The label stored in each row's `source` column; defaults to the class name. */
  get source(): string {
    return this.#source;
  }

  /**
   * Enqueues one SQL statement for `table`; returns its seq. Inside `transaction(fn)` it joins the
   * transaction's group. `options.key`: the entity the event is about (a string, or a safe
   * integer): in a table with lanes, events of one key are delivered in order and a failure holds
   * only its key's lane; without it, the transaction's key, else none (the event then orders with
   * every lane). A key that is not one (see lane-key.ts) is refused here, before anything is
   * stored. `options.traceparent`/`tracestate`: the W3C trace context the event belongs to;
   * without them, the transaction's, else the span active in OpenTelemetry's current context (when
   * the application registered one), else none. A header that is not W3C is dropped with a
   * warning, never refused: the event is stored either way.
   */
  push(table: string, sql: string, args: readonly unknown[] = [], options?: PushOptions): number {
    let mine = this.#mine.get(table);
    if (mine?.outbox.closed) mine = undefined;
    const where = { namespace: table, file: mine?.outbox.path ?? this.#fileFor(table) };
    const payload = this.#payload(table, sql, args, where, this.#injects(table));
    const target = openQueues.transaction === null ? (mine ?? this.#queue(table)).outbox : this.#joined(table, mine);
    const context = this.#context(options, table);
    return target.enqueue(sql, payload, this.#source, context);
  }

  /**
   * Enqueues several statements for `table` in one transaction (all or none) as one group,
   * delivered whole in one remote transaction; returns their seqs. Inside `transaction(fn)` they
   * join its group. `options`: as for `push`, for every statement.
   */
  pushMany(
    table: string,
    stmts: ReadonlyArray<readonly [string, (readonly unknown[])?]>,
    options?: PushOptions,
  ): number[] {
    let mine = this.#mine.get(table);
    if (mine?.outbox.closed) mine = undefined;
    const file = mine?.outbox.path ?? this.#fileFor(table);
    const where = { namespace: table, file };
    if (!Array.isArray(stmts))
      throw new InvalidArgumentError(
        `pushMany expects an array of [sql, args] (namespace "${table}" in ${file})`,
        where,
      );
    const inject = this.#injects(table);
    const items = new Array<AppendItem>(stmts.length);
    // A text accepted for `checkedArgs` arguments is accepted again for as many: a run of one
    // statement (a bulk insert) is checked once, and a repeat with another count checked afresh.
    let checkedSql: unknown;
    let checkedArgs = -1;
    for (let i = 0; i < stmts.length; i++) {
      const stmt = stmts[i];
      if (!Array.isArray(stmt))
        throw new InvalidArgumentError(
          `statement ${i} is not a [sql, args] pair (namespace "${table}" in ${file})`,
          where,
        );
      const sql = stmt[0];
      const args = stmt[1] ?? [];
      try {
        const repeated = sql === checkedSql && args.length === checkedArgs;
        items[i] = { tag: sql, payload: this.#payload(table, sql, args, where, inject, repeated) };
      } catch (error) {
        throw ofStatement(error, i);
      }
      checkedSql = sql;
      checkedArgs = args.length;
    }
    const target =
      openQueues.transaction !== null && items.length > 0
        ? this.#joined(table, mine)
        : (mine ?? this.#queue(table)).outbox;
    return target.enqueueBatch(items, this.#source, { trace: this.#context(options, table) });
  }

  /**
   * What a push stores besides its statement: its key (the one given, checked; else the
   * transaction's) and its trace context (the one given, checked; else the transaction's, else the
   * active span's).
   */
  #context(given: PushOptions | undefined, table: string): RowContext {
    const tx = openQueues.transaction;
    const key = given?.key == null ? (tx?.laneKey ?? null) : laneKeyText(given.key, `table "${table}"`);
    const tenant = given?.tenant == null ? (tx?.tenant ?? null) : checkedTenant(given.tenant, `table "${table}"`);
    if (tenant !== null) tx?.forTenant(tenant, table);
    const traced = given !== undefined && (given.traceparent !== undefined || given.tracestate !== undefined);
    let trace: RowTrace;
    if (!traced) trace = tx?.trace ?? activeTrace();
    else {
      const checked = checkTraceContext(given);
      if (checked.problem !== null) openQueues.traceDropped(checked.problem, table);
      trace = checked.trace;
    }
    if (key === null && tenant === null) return trace;
    return { traceparent: trace.traceparent, tracestate: trace.tracestate, key, tenant };
  }

  /**
   * Runs `fn` in one local transaction: every push inside it — whichever producer makes it, into
   * whichever table — is one group, committed together and delivered together, in one remote
   * transaction, in commit order. With `database`, the application's own writes on that connection
   * commit or roll back with them (BEGIN IMMEDIATE: the write lock is taken up front, so a read that
   * later writes cannot fail with SQLITE_BUSY). With `dbDir` (one file per table) every push must
   * go to one table: a second table throws CrossTableTransactionError at that push. A throw inside
   * `fn` rolls everything back; `fn` must be synchronous. A nested call joins the open transaction.
   * `options`: the key and trace context of every push inside that gives none (as for `push`);
   * without a trace context, each push takes the span active when it is made.
   */
  transaction<T>(fn: () => T, options?: PushOptions): T {
    if (typeof fn !== "function") throw new InvalidArgumentError("transaction(fn) expects a function");
    if (openQueues.transaction !== null) return fn();
    const laneKey = options?.key == null ? null : laneKeyText(options.key, "a transaction");
    const tenant = options?.tenant == null ? null : checkedTenant(options.tenant, "a transaction");
    const queueDb = this.#where.kind === "dir" ? null : this.#connection();
    let checked: RowTrace | undefined;
    if (options !== undefined && (options.traceparent !== undefined || options.tracestate !== undefined)) {
      const { trace: kept, problem } = checkTraceContext(options);
      if (problem !== null) openQueues.traceDropped(problem, "(transaction)");
      checked = kept;
    }
    const key = queueDb === null ? null : this.#registryKey(""); // one file for every table: any name gives its key
    return openQueues.run(new OpenTransaction(queueDb, key, checked, laneKey, tenant), fn);
  }

  /**
   * The Outbox of `table` (`mine`, when this producer has it open already) bound to the open
   * `transaction(fn)`: its first push opens the transaction in that file; a push into another file
   * is refused — before that file is opened, so a refused push leaves no empty queue file behind
   * (which status and verify would list).
   */
  #joined(table: string, mine: OpenQueue | undefined): Outbox {
    const tx = openQueues.transaction!;
    if (mine === undefined && tx.key !== null && this.#existingKey(table) !== tx.key)
      throw tx.refusal(table, this.#fileFor(table));
    const queue = mine ?? this.#queue(table);
    if (tx.key === null) tx.bind(table, queue.queueDb, this.#registryKey(table));
    else tx.join(table, queue.queueDb);
    return queue.outbox;
  }

  /** Whether the statements of `table` must be ones `injectOutboxSeq` can rewrite. */
  #injects(table: string): boolean {
    const inject = this.#inject;
    return inject === true || (inject !== false && inject.has(table));
  }

  /**
   * Checks one statement at the door and returns its encoded payload. `checked`: its text was
   * accepted for as many arguments already (the statement before it in a pushMany).
   */
  #payload(
    table: string,
    sql: string,
    args: readonly unknown[],
    where: PayloadLocation,
    inject: boolean,
    checked = false,
  ): string {
    const limit = this.maxPayloadBytes;
    // UTF-8 takes at least one byte per UTF-16 unit: a text longer than the limit is refused before it is lexed.
    if (typeof sql === "string" && sql.length > limit) throw this.#tooLarge(table, sql, "", where);
    if (!Array.isArray(args)) return encodeArgs(args, where); // throws, naming what args is
    if (!checked) this.#statements.check(table, sql, args.length, inject);
    const payload = encodeArgs(args, where);
    // At most 3 UTF-8 bytes per UTF-16 unit: only a statement that could be over the limit is measured.
    if (
      (sql.length + payload.length) * 3 > limit &&
      Buffer.byteLength(sql, "utf8") + Buffer.byteLength(payload, "utf8") > limit
    ) {
      throw this.#tooLarge(table, sql, payload, where);
    }
    return payload;
  }

  #tooLarge(table: string, sql: string, payload: string, where: PayloadLocation): InvalidArgumentError {
    const size = Buffer.byteLength(sql, "utf8") + Buffer.byteLength(payload, "utf8");
    return new InvalidArgumentError(
      `statement for table "${table}" is ${size} bytes of SQL text and encoded arguments, over maxPayloadBytes=${this.maxPayloadBytes} (in ${where.file})`,
      where,
    );
  }

  /** The process-wide shared Outbox of `table` (created, with its file, on first use). */
  outbox(table: string): Outbox {
    return this.#queue(table).outbox;
  }

  #queue(table: string): OpenQueue {
    const mine = this.#mine.get(table);
    if (mine !== undefined && !mine.outbox.closed) return mine;
    const file = this.#fileFor(table);
    const options: OutboxOptions = { maxPending: this.maxPending, durability: this.durability, ...this.#groupLimits };
    const site = this.#where.kind === "dir" ? ({ kind: "own", path: file } as const) : this.#site();
    const queue = openQueues.queue(this.#registryKey(table), table, site, options, file);
    this.#mine.set(table, queue);
    return queue;
  }

  /** The registry key of the file `table` lives in (its directory created on first use). */
  #registryKey(table: string): string {
    return this.#where.kind === "database"
      ? openQueues.databaseKey(this.#where.database)
      : this.#keyIn(this.#ensureDir(), table);
  }

  /** The same, creating nothing: null while the directory does not exist (no open file can be in it). */
  #existingKey(table: string): string | null {
    if (this.#where.kind === "database") return openQueues.databaseKey(this.#where.database);
    const dir = this.#existingDir();
    return dir === null ? null : this.#keyIn(dir, table);
  }

  /** The real path of the file `table` lives in, given the real path of its directory. */
  #keyIn(realDir: string, table: string): string {
    return join(realDir, this.dbFile === null ? `${table}.db` : basename(this.dbFile));
  }

  /** Where every table of `dbFile` (or of the application's database) is: one file, one shared connection. */
  #site(): { kind: "file"; path: string } | { kind: "database"; database: Database } {
    const where = this.#where;
    return where.kind === "database" ? where : { kind: "file", path: this.#realFile() };
  }

  /** The shared connection every table of `dbFile` (or of the application's database) uses. */
  #connection(): QueueDb {
    return openQueues.connection(this.#site(), this.durability);
  }

  #fileFor(table: string): string {
    // The table name becomes a file name (or a namespace): refuse anything that could leave dbDir.
    const problem = tableNameProblem(table);
    if (problem !== null)
      throw new InvalidArgumentError(
        `${problem} (${this.dbFile === null ? `db_dir ${this.dbDir}` : `db_file ${this.dbFile}`})`,
        { namespace: String(table) },
      );
    return tableFile(this, table);
  }

  /** Creates dbDir (or dbFile's directory) on first use and returns its real path. */
  #ensureDir(): string {
    if (this.#realDir !== undefined) return this.#realDir;
    try {
      mkdirSync(this.dbDir, { recursive: true });
      this.#realDir = realpathSync(this.dbDir);
    } catch (e) {
      throw new StorageError(
        `cannot create ${this.dbFile === null ? "db_dir" : "the directory of db_file"} ${this.dbDir}: ${(e as Error).message}`,
        this.dbDir,
        undefined,
        { cause: e },
      );
    }
    return this.#realDir;
  }

  /** dbDir's real path when it exists, else null; creates nothing. */
  #existingDir(): string | null {
    if (this.#realDir !== undefined) return this.#realDir;
    try {
      return (this.#realDir = realpathSync(this.dbDir));
    } catch {
      return null;
    }
  }

  /** dbFile's real path (its directory created on first use). */
  #realFile(): string {
    return join(this.#ensureDir(), basename(this.dbFile!));
  }
}

/** The refusal of statement `i` of a pushMany, saying which statement it was; any other error as it is. */
function ofStatement(error: unknown, i: number): unknown {
  if (error instanceof InvalidStatementError) return new InvalidStatementError(error.reason, error.table, i);
  if (error instanceof InvalidArgumentError)
    return new InvalidArgumentError(`statement ${i}: ${error.message}`, { ...error.details, statement: i });
  return error;
}

/** Closes every shared Outbox of this process (shutdown, tests); later pushes reopen them. */
export function closeSharedOutboxes(): void {
  openQueues.close();
}
