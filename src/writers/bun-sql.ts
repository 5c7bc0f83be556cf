import { SQL, type ReservedSQL } from "bun";
import { WriteError } from "../errors.ts";
import type { ErrorKind } from "./classify.ts";
import { maskCause, maskSecrets, urlPassword } from "../masking.ts";
import { withTimeout } from "../timeout.ts";
import { booleanKey, type Connection, numberKey, stringKey } from "./connection.ts";
import { errorText, type Fail, type Outcome, type PassResult, runIsolated } from "./isolate.ts";
import {
  DEFAULT_BATCH_TIMEOUT_S,
  DEFAULT_CONNECT_TIMEOUT_S,
  DEFAULT_MAX_CONNECTIONS,
  describeServer,
} from "./server-keys.ts";
import { statementKind } from "./statement-kind.ts";
import type { OutboxWriter, Statement, WriteOptions, WriteResult } from "./writer.ts";

type Engine = "postgres" | "mysql";

/** The connection one writeBatch call is using, whether that call has timed out, and whom to tell once its first pass is issued. */
type InFlight = { reserved: ReservedSQL | null; timedOut: boolean; onSent: (() => void) | undefined };

/**
 * One connection of the writer's pool: a client of at most one connection, and the statement texts
 * it has run (so prepared, as Bun prepares every text it sends, per connection).
 */
interface Slot {
  sql: SQL;
  texts: Set<string>;
  busy: boolean;
}

/**
 * The texts a slot remembers, newest kept: Bun's MySQL client keeps 256 prepared statements per
 * connection, and texts that are each new (trace comments) must not grow the set without a bound.
 */
const TEXTS_REMEMBERED = 256;

/** What an engine's pass needs from its writer: the engine's error classes and the writer's masked errors. */
export interface PassTools {
  classify: (error: unknown) => ErrorKind;
  fail: Fail;
}

/** One engine's optimistic pass (see `Pass`) on a connection reserved for it, released afterwards by the writer. */
export type ReservedPass = (
  reserved: ReservedSQL,
  stmts: Statement[],
  checking: boolean,
  tools: PassTools,
) => Promise<PassResult>;

/**
 * A writer on Bun's built-in SQL client (PostgreSQL, MySQL/MariaDB). Each batch runs on one reserved
 * connection with every statement pipelined (sent without waiting for each other), in the engine's
 * `pass`: PostgreSQL sends BEGIN, the statements and COMMIT at once (`postgresPass`), MySQL needs a
 * second round trip for COMMIT (`mysqlPass`). Failures are isolated by `runIsolated`.
 */
export class BunSqlWriter implements OutboxWriter {
  readonly dialect: Engine;
  /** Each batch reserves its own connection from the pool (`max_connections`; see #acquire). */
  readonly concurrent = true;
  /** The target with its password masked: safe for logs and errors. */
  readonly description: string;
  /** The pool: `max_connections` clients of one connection each (see #acquire). */
  readonly #slots: Slot[];
  /** Calls waiting for a slot, first come first served. */
  readonly #waiting: Array<(slot: Slot) => void> = [];
  readonly #secrets: string[];
  readonly #classify: (error: unknown) => ErrorKind;
  readonly #batchTimeoutMs: number;
  readonly #coalesce: boolean;
  readonly #enginePass: ReservedPass;
  readonly #tools: PassTools;
  #closed = false;

  constructor(engine: Engine, connection: Connection, classify: (error: unknown) => ErrorKind, pass: ReservedPass) {
    this.dialect = engine;
    this.#classify = classify;
    this.#enginePass = pass;
    this.#tools = { classify, fail: (m, e, misconfigured) => this.#fail(m, e, misconfigured) };
    const url = stringKey(connection, "url");
    const password = stringKey(connection, "password");
    this.#secrets = [password, urlPassword(url)].filter((s): s is string => !!s);
    this.#batchTimeoutMs = (numberKey(connection, "batch_timeout") ?? DEFAULT_BATCH_TIMEOUT_S) * 1000;
    this.#coalesce = booleanKey(connection, "coalesce", true);
    const tls = connection.ssl ?? connection.tls;
    const options = {
      adapter: engine,
      max: 1,
      connectionTimeout: numberKey(connection, "connect_timeout") ?? DEFAULT_CONNECT_TIMEOUT_S,
      idleTimeout: 60,
      // PostgreSQL keeps named prepared statements per connection, on the server too, without a
      // bound: right for a program's few texts, a leak for texts that are each new (trace comments),
      // which `prepare = false` sends unnamed. Bun's MySQL driver always prepares, 256 texts at most.
      ...(engine === "postgres" ? { prepare: booleanKey(connection, "prepare", true) } : {}),
      ...(tls !== undefined ? { tls: tls as boolean } : {}),
    } as const;
    this.description = describeServer(connection, engine);
    const client = () =>
      url
        ? new SQL(url, options)
        : new SQL({
            ...options,
            hostname: stringKey(connection, "host"),
            port: numberKey(connection, "port"),
            username: stringKey(connection, "user", "username"),
            password,
            database: stringKey(connection, "database"),
          });
    const size = numberKey(connection, "max_connections") ?? DEFAULT_MAX_CONNECTIONS;
    this.#slots = Array.from({ length: Math.max(1, size) }, () => ({ sql: client(), texts: new Set(), busy: false }));
  }

  async writeBatch(stmts: Statement[], options: WriteOptions = {}): Promise<WriteResult[]> {
    if (this.#closed) throw this.#fail("writer is closed", undefined);
    if (stmts.length === 0) return [];
    // The connection this call is using, so its timeout closes it (and no other call's).
    const inFlight: InFlight = { reserved: null, timedOut: false, onSent: options.onSent };
    const work = runIsolated(
      stmts,
      (s, checking) => this.#pass(s, inFlight, checking),
      this.#tools.classify,
      this.#tools.fail,
      this.dialect,
      { coalesce: this.#coalesce },
    );
    return withTimeout(work, this.#batchTimeoutMs, () => {
      // Closing the connection makes the pipelined queries reject and the server roll back.
      inFlight.timedOut = true;
      void inFlight.reserved?.close().catch(() => {});
      throw this.#fail(`batch timed out after ${this.#batchTimeoutMs / 1000}s`, undefined);
    });
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await Promise.all(this.#slots.map((slot) => slot.sql.close({ timeout: 5 })));
  }

  /** One optimistic pass on one reserved connection (see `Pass`), released afterwards. */
  async #pass(stmts: Statement[], inFlight: InFlight, checking: boolean): Promise<PassResult> {
    const texts = new Set(stmts.map((s) => s.sql));
    const slot = await this.#acquire(texts);
    let reserved: ReservedSQL;
    try {
      reserved = await slot.sql.reserve();
    } catch (error) {
      this.#release(slot, null);
      throw this.#fail(`cannot connect: ${errorText(error)}`, error, this.#classify(error).kind === "misconfigured");
    }
    if (inFlight.timedOut) {
      // The caller already got a timeout: do not start the batch on a late connection.
      await reserved.release().catch(() => {});
      this.#release(slot, null);
      throw this.#fail("batch timed out while waiting for a connection", undefined);
    }
    inFlight.reserved = reserved;
    let answered = false;
    // A text the connection has not run waits for its prepare before it, and all behind it, go out:
    // the batch is on the connection only once issued on one that knows every text.
    let known = true;
    for (const t of texts) known &&= slot.texts.has(t);
    try {
      const pass = this.#enginePass(reserved, stmts, checking, this.#tools); // issues every statement before it waits
      if (known) inFlight.onSent?.();
      inFlight.onSent = undefined;
      const result = await pass;
      answered = !inFlight.timedOut;
      return result;
    } finally {
      inFlight.reserved = null;
      // Bun closes (instead of pooling) a connection released inside an open transaction.
      await reserved.release().catch(() => {});
      // A pass that threw may have lost its connection, and the next one prepares every text anew.
      this.#release(slot, answered ? texts : null);
    }
  }

  /**
   * A free connection for a batch of `texts`: the one that has run most of them. Bun prepares each
   * text the first time a connection sends it, two round trips apiece, one text after another, before
   * the batch goes on: on a long link a connection's first batches take ten round trips or more.
   * Bun's own pool hands out whichever connection is free, so with several connections every one
   * would, in time, prepare every table's texts; kept to the connections that know them, a table's
   * batches pay that once. Waits, first come first served, while every connection is busy.
   */
  #acquire(texts: Set<string>): Promise<Slot> {
    let best: Slot | null = null;
    let bestKnown = -1;
    for (const slot of this.#slots) {
      if (slot.busy) continue;
      let known = 0;
      for (const t of texts) if (slot.texts.has(t)) known += 1;
      if (known > bestKnown) [best, bestKnown] = [slot, known];
    }
    if (best !== null) {
      best.busy = true;
      return Promise.resolve(best);
    }
    return new Promise((resolve) => this.#waiting.push(resolve));
  }

  /** `slot` is free again, knowing `texts` too (null: it may have lost its connection, and what it knew). */
  #release(slot: Slot, texts: Set<string> | null): void {
    if (texts === null) slot.texts.clear();
    else
      for (const t of texts) {
        slot.texts.delete(t); // re-added as the newest
        slot.texts.add(t);
        if (slot.texts.size > TEXTS_REMEMBERED) slot.texts.delete(slot.texts.values().next().value!);
      }
    const next = this.#waiting.shift();
    if (next) next(slot);
    else slot.busy = false;
  }

  /** A `WriteError` whose message and cause never contain the password. */
  #fail(message: string, error: unknown, misconfigured = false): WriteError {
    const text = maskSecrets(`${this.dialect} ${this.description}: ${message}`, this.#secrets);
    const cause = error === undefined ? undefined : maskCause(error, this.#secrets);
    return new WriteError(text, undefined, { ...(cause === undefined ? {} : { cause }), misconfigured });
  }
}

/** How a query ended: its result or its error. */
export type Settled<T> = { result: T } | { error: unknown };

/**
 * `query`'s outcome as a promise that never rejects. Calling `then` starts a Bun.SQL query (they
 * are lazy) at once, in call order: what `Promise.resolve(query)` would do only a microtask later,
 * too late to see a refusal before COMMIT is queued behind it.
 */
export function settle<T>(query: PromiseLike<T>): Promise<Settled<T>> {
  return Promise.resolve(
    query.then(
      (result): Settled<T> => ({ result }),
      (error: unknown): Settled<T> => ({ error }),
    ),
  );
}

/** Starts `stmt` now on `reserved`: the query (to see whether Bun refused it) and its outcome. */
export function startStatement(
  reserved: ReservedSQL,
  stmt: Statement,
  dialect: Engine,
): { query: Promise<unknown>; outcome: Promise<Outcome> } {
  const kind = statementKind(stmt.sql);
  const query = reserved.unsafe(stmt.sql, stmt.args as unknown[]);
  if (kind === "read") query.values();
  const outcome = settle(query).then(
    (o): Outcome => ("error" in o ? o : { result: toResult(kind, o.result, dialect) }),
  );
  return { query, outcome };
}

function toResult(kind: ReturnType<typeof statementKind>, result: unknown, dialect: Engine): WriteResult {
  if (kind === "read") return { ok: true, rows: Array.from(result as unknown[][]) };
  if (kind === "ddl") return { ok: true, rowsAffected: 0 };
  const r = result as { count?: number | null; affectedRows?: number | null };
  return { ok: true, rowsAffected: Number(dialect === "mysql" ? (r.affectedRows ?? 0) : (r.count ?? 0)) };
}
