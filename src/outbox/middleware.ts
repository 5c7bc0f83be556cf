import { mkdirSync, realpathSync } from "node:fs";
import { join, resolve } from "node:path";
import { InvalidArgumentError, StorageError } from "../errors.ts";
import { DIALECTS } from "../vocabulary.ts";
import { StatementCache } from "../sql/statement-cache.ts";
import type { Dialect } from "../vocabulary.ts";
import { Outbox } from "./outbox.ts";
import { encodeArgs, type PayloadLocation } from "./payload.ts";
import type { Durability } from "../vocabulary.ts";
import { tableNameProblem } from "./table-name.ts";

/**
 * Options of a producer. Defaults: unbounded, `normal` durability, source = the class name,
 * statements read with every dialect's lexer, no injected tables, 1 MiB per statement.
 */
export interface SQLMiddlewareOptions {
  /** Directory holding one `{table}.db` file per table; created on first use. */
  dbDir: string;
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
}

/** The default `maxPayloadBytes`: 1 MiB. */
export const DEFAULT_MAX_PAYLOAD_BYTES = 1_048_576;

// One Outbox per (file, namespace) per process: every producer of a table shares one connection
// and its cached statements. Keyed by the real path of db_dir, so `./a`, `/abs/a` and a symlink
// to it meet.
const shared = new Map<string, Outbox>();

// Statement verdicts depend only on the SQL text and the dialect: every producer of the process
// shares them, so a producer created per request still checks each text once.
const caches = new Map<Dialect | null, StatementCache>();
function cacheFor(dialect: Dialect | null): StatementCache {
  let cache = caches.get(dialect);
  if (cache === undefined) caches.set(dialect, (cache = new StatementCache(dialect)));
  return cache;
}

/**
 * The hot-path producer: `push(table, sql, args)` appends an SQL event to `{dbDir}/{table}.db`
 * synchronously (no network, no await) and returns its seq. Subclass it or use it directly.
 * Everything is checked at push time, before anything is written: the SQL text must be one
 * statement taking exactly `args.length` placeholders (InvalidStatementError naming the table;
 * verdicts cached per text), the arguments must round-trip losslessly (see payload.ts) and the
 * statement must fit `maxPayloadBytes` (InvalidArgumentError); every other failure is a typed
 * OutboxError.
 */
export class SQLMiddleware {
  readonly dbDir: string;
  readonly maxPending: number | null;
  readonly durability: Durability;
  readonly dialect: Dialect | null;
  readonly maxPayloadBytes: number;
  #source: string;
  #statements: StatementCache;
  /** Tables whose statements must be injectable: all (`true`) or these. */
  #inject: boolean | ReadonlySet<string>;
  /** The real path of dbDir once it exists (symlinks resolved): the registry key. */
  #realDir: string | undefined;
  /** This producer's outboxes by table: the push hot path skips the name check and the registry. */
  #mine = new Map<string, Outbox>();

  constructor(options: SQLMiddlewareOptions) {
    if (!options || typeof options.dbDir !== "string" || options.dbDir === "") {
      throw new InvalidArgumentError("SQLMiddleware needs a dbDir");
    }
    this.dbDir = resolve(options.dbDir);
    this.maxPending = options.maxPending ?? null;
    this.durability = options.durability ?? "normal";
    this.#source = options.source ?? new.target.name;
    const dialect = options.dialect ?? null;
    if (dialect !== null && !DIALECTS.includes(dialect)) {
      throw new InvalidArgumentError(`unknown SQL dialect ${JSON.stringify(dialect)} (expected one of ${DIALECTS.join(", ")})`);
    }
    this.dialect = dialect;
    this.#statements = cacheFor(dialect);
    const inject = options.injectOutboxSeq ?? false;
    if (typeof inject === "boolean") this.#inject = inject;
    else if (Array.isArray(inject) && inject.every((t) => typeof t === "string")) this.#inject = new Set(inject);
    else throw new InvalidArgumentError("injectOutboxSeq must be a boolean or an array of table names");
    const max = options.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
    if (!Number.isSafeInteger(max) || max < 1) throw new InvalidArgumentError(`maxPayloadBytes must be a positive integer, got ${String(max)}`);
    this.maxPayloadBytes = max;
  }

  /** The label stored in each row's `source` column; defaults to the class name. */
  get source(): string {
    return this.#source;
  }

  /** Enqueues one SQL statement for `table`; returns its seq. */
  push(table: string, sql: string, args: readonly unknown[] = []): number {
    const mine = this.#mine.get(table);
    const outbox = mine !== undefined && !mine.closed ? mine : undefined;
    const where = { namespace: table, file: outbox?.path ?? this.#fileFor(table) };
    const payload = this.#payload(table, sql, args, where);
    return (outbox ?? this.outbox(table)).enqueue(sql, payload, this.#source);
  }

  /** Enqueues several statements for `table` in one transaction (all or none); returns their seqs. */
  pushMany(table: string, stmts: ReadonlyArray<readonly [string, (readonly unknown[])?]>): number[] {
    const file = this.#fileFor(table);
    const where = { namespace: table, file };
    if (!Array.isArray(stmts)) throw new InvalidArgumentError(`pushMany expects an array of [sql, args] (namespace "${table}" in ${file})`, where);
    const items = stmts.map((stmt, i) => {
      if (!Array.isArray(stmt)) throw new InvalidArgumentError(`statement ${i} is not a [sql, args] pair (namespace "${table}" in ${file})`, where);
      return { tag: stmt[0], payload: this.#payload(table, stmt[0], stmt[1] ?? [], where) };
    });
    return this.outbox(table).enqueueBatch(items, this.#source);
  }

  /** Checks one statement at the door and returns its encoded payload. */
  #payload(table: string, sql: string, args: readonly unknown[], where: PayloadLocation): string {
    const limit = this.maxPayloadBytes;
    // UTF-8 takes at least one byte per UTF-16 unit: a text longer than the limit is refused before it is lexed.
    if (typeof sql === "string" && sql.length > limit) throw this.#tooLarge(table, sql, "", where);
    if (!Array.isArray(args)) return encodeArgs(args, where); // throws, naming what args is
    const inject = this.#inject;
    this.#statements.check(table, sql, args.length, inject === true || (inject !== false && inject.has(table)));
    const payload = encodeArgs(args, where);
    // At most 3 UTF-8 bytes per UTF-16 unit: only a statement that could be over the limit is measured.
    if ((sql.length + payload.length) * 3 > limit && Buffer.byteLength(sql, "utf8") + Buffer.byteLength(payload, "utf8") > limit) {
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

  /** The process-wide shared Outbox of `table` in this dbDir (created, with its file, on first use). */
  outbox(table: string): Outbox {
    const mine = this.#mine.get(table);
    if (mine !== undefined && !mine.closed) return mine;
    const file = this.#fileFor(table);
    const key = `${join(this.#ensureDir(), `${table}.db`)}\0${table}`;
    let outbox = shared.get(key);
    if (outbox?.closed) {
      shared.delete(key); // closed by its owner (or found deleted while open): the next push reopens the file
      outbox = undefined;
    }
    if (outbox) {
      // A second producer must not silently get a different cap or a weaker durability.
      for (const [option, have, want] of [["maxPending", outbox.maxPending, this.maxPending], ["durability", outbox.durability, this.durability]] as const) {
        if (have === want) continue;
        throw new InvalidArgumentError(
          `namespace "${table}" in ${file} is already open in this process with ${option}=${JSON.stringify(have)}, not ${JSON.stringify(want)}`,
          { namespace: table, file },
        );
      }
    } else {
      outbox = new Outbox(file, table, { maxPending: this.maxPending, durability: this.durability });
      shared.set(key, outbox);
    }
    this.#mine.set(table, outbox);
    return outbox;
  }

  #fileFor(table: string): string {
    // The table name becomes a file name: refuse anything that could leave dbDir.
    const problem = tableNameProblem(table);
    if (problem !== null) throw new InvalidArgumentError(`${problem} (db_dir ${this.dbDir})`, { namespace: String(table) });
    return join(this.dbDir, `${table}.db`);
  }

  /** Creates dbDir on first use and returns its real path. */
  #ensureDir(): string {
    if (this.#realDir !== undefined) return this.#realDir;
    try {
      mkdirSync(this.dbDir, { recursive: true });
      this.#realDir = realpathSync(this.dbDir);
    } catch (e) {
      throw new StorageError(`cannot create db_dir ${this.dbDir}: ${(e as Error).message}`, this.dbDir, undefined, { cause: e });
    }
    return this.#realDir;
  }
}

/** Closes every shared Outbox of this process (shutdown, tests); later pushes reopen them. */
export function closeSharedOutboxes(): void {
  for (const outbox of shared.values()) outbox.close();
  shared.clear();
}

