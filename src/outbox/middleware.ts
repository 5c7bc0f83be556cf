import { mkdirSync, realpathSync } from "node:fs";
import { join, resolve } from "node:path";
import { InvalidArgumentError, StorageError } from "../errors.ts";
import { Outbox } from "./outbox.ts";
import { encodeArgs } from "./payload.ts";
import type { Durability } from "./sqlite-open.ts";

/** Options of a producer. Defaults: unbounded, `normal` durability, source = the class name. */
export interface SQLMiddlewareOptions {
  /** Directory holding one `{table}.db` file per table; created on first use. */
  dbDir: string;
  maxPending?: number | null;
  durability?: Durability;
  /** Label stored with every row this producer writes. */
  source?: string;
}

// One Outbox per (file, namespace) per process: every producer of a table shares one connection
// and its cached statements. Keyed by the real path of db_dir, so `./a`, `/abs/a` and a symlink
// to it meet.
const shared = new Map<string, Outbox>();

/**
 * The hot-path producer: `push(table, sql, args)` appends an SQL event to `{dbDir}/{table}.db`
 * synchronously (no network, no await) and returns its seq. Subclass it or use it directly.
 * Bind arguments are checked and encoded at push time (see payload.ts); anything that would not
 * round-trip losslessly throws InvalidArgumentError, and every other failure a typed OutboxError.
 */
export class SQLMiddleware {
  readonly dbDir: string;
  readonly maxPending: number | null;
  readonly durability: Durability;
  #source: string;
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
  }

  /** The label stored in each row's `source` column; defaults to the class name. */
  get source(): string {
    return this.#source;
  }

  /** Enqueues one SQL statement for `table`; returns its seq. */
  push(table: string, sql: string, args: readonly unknown[] = []): number {
    const outbox = this.outbox(table);
    return outbox.enqueue(sql, encodeArgs(args, { namespace: table, file: outbox.path }), this.#source);
  }

  /** Enqueues several statements for `table` in one transaction (all or none); returns their seqs. */
  pushMany(table: string, stmts: ReadonlyArray<readonly [string, (readonly unknown[])?]>): number[] {
    const outbox = this.outbox(table);
    const where = { namespace: table, file: outbox.path };
    if (!Array.isArray(stmts)) throw new InvalidArgumentError(`pushMany expects an array of [sql, args] (namespace "${table}" in ${outbox.path})`, where);
    const items = stmts.map((stmt, i) => {
      if (!Array.isArray(stmt)) throw new InvalidArgumentError(`statement ${i} is not a [sql, args] pair (namespace "${table}" in ${outbox.path})`, where);
      return { tag: stmt[0], payload: encodeArgs(stmt[1] ?? [], where) };
    });
    return outbox.enqueueBatch(items, this.#source);
  }

  /** The process-wide shared Outbox of `table` in this dbDir (created, with its file, on first use). */
  outbox(table: string): Outbox {
    const mine = this.#mine.get(table);
    if (mine !== undefined && !mine.closed) return mine;
    const file = this.#fileFor(table);
    const key = `${join(this.#ensureDir(), `${table}.db`)}\0${table}`;
    let outbox = shared.get(key);
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
      const created = outbox;
      outbox._setOnClose(() => {
        if (shared.get(key) === created) shared.delete(key);
      });
    }
    this.#mine.set(table, outbox);
    return outbox;
  }

  #fileFor(table: string): string {
    // The table name becomes a file name: refuse anything that could leave dbDir.
    if (typeof table !== "string" || !/^[A-Za-z0-9_$][A-Za-z0-9_$.-]*$/.test(table) || table.includes("..")) {
      throw new InvalidArgumentError(
        `invalid table name ${JSON.stringify(table)}: use letters, digits, _ $ . - (it names the file {dbDir}/{table}.db in ${this.dbDir})`,
        { namespace: String(table) },
      );
    }
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
  for (const outbox of [...shared.values()]) outbox.close();
}

