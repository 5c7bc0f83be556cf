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

/**
 * The connection one writeBatch call is using, whether that call has timed out, and whom to tell once its
 * first pass is issued.
 */
type InFlight = {
  slot: Slot | null;
  lease: Lease | null;
  timedOut: boolean;
  onSent: (() => void) | undefined;
};

/**
 * One reservation of a slot's connection, shared by the passes issued on it (two at most): released
 * when the last of them ends, and `broken` when a pass may have left a transaction open on it (a
 * timeout closed it, or a pass threw before its end was issued), so that no pass behind it runs
 * inside another's transaction.
 */
interface Lease {
  reserved: Promise<ReservedSQL>;
  passes: number;
  broken: boolean;
  /**
   * Resolves once the last pass given this lease has issued its end (PassTools.ended): the next one issues
   * its messages then.
   */
  tail: Promise<void>;
}

/**
 * One connection of the writer's pool: a client of at most one connection, the statement texts it
 * has run (so prepared, as Bun prepares every text it sends, per connection), the passes it carries
 * and the reservation they share.
 */
interface Slot {
  sql: SQL;
  texts: Set<string>;
  /** The texts of the passes it carries now, each with how many carry it: prepared before a pass behind them runs. */
  carrying: Map<string, number>;
  passes: number;
  lease: Lease | null;
}

/** How many passes one connection carries: the drain's chains are two batches deep (see Delivery.deliver). */
const PASSES_PER_CONNECTION = 2;

/**
 * The texts a slot remembers, newest kept: Bun's MySQL client keeps 256 prepared statements per
 * connection, and texts that are each new (trace comments) must not grow the set without a bound.
 */
const TEXTS_REMEMBERED = 256;

/** What an engine's pass needs from its writer: the engine's error classes and the writer's masked errors. */
export interface PassTools {
  classify: (error: unknown) => ErrorKind;
  fail: Fail;
  /**
   * Called by the pass once it has issued its last message, the COMMIT or ROLLBACK that ends its
   * transaction: a pass queued behind it on the connection issues its own then, and they reach the
   * server in that order. A pass that fails before it (throws) leaves the connection to be closed.
   */
  ended: () => void;
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
  /** Each batch reserves a connection from the pool (`max_connections`; see #acquire). */
  readonly concurrent = true;
  /** Whether a batch may go on a busy connection, behind the one there (see #pass; `pipeline`, default true). */
  readonly pipelined: boolean;
  /** Where the target is — writer, user, host, port, database; never the password (describeServer). */
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
  readonly #tools: Omit<PassTools, "ended">;
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
    this.pipelined = booleanKey(connection, "pipeline", true);
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
    this.#slots = Array.from({ length: Math.max(1, size) }, () => ({
      sql: client(),
      texts: new Set(),
      carrying: new Map(),
      passes: 0,
      lease: null,
    }));
  }

  async writeBatch(stmts: Statement[], options: WriteOptions = {}): Promise<WriteResult[]> {
    if (this.#closed) throw this.#fail("writer is closed", undefined);
    if (stmts.length === 0) return [];
    // The connection this call is using, so its timeout closes it (and no other call's).
    const inFlight: InFlight = { slot: null, lease: null, timedOut: false, onSent: options.onSent };
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
      if (inFlight.slot !== null && inFlight.lease !== null) this.#breakLease(inFlight.slot, inFlight.lease);
      throw this.#fail(`batch timed out after ${this.#batchTimeoutMs / 1000}s`, undefined);
    });
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await Promise.all(this.#slots.map((slot) => slot.sql.close({ timeout: 5 })));
  }

  /**
   * One optimistic pass on a reserved connection (see `Pass`), released once no pass uses it. Behind
   * another pass on the connection it issues its messages only once that one has issued its end:
   * at once on PostgreSQL, whose pass sends its COMMIT with its statements; after that one's
   * answers on MySQL, whose COMMIT waits for them — so its statements go out with that COMMIT.
   */
  async #pass(stmts: Statement[], inFlight: InFlight, checking: boolean): Promise<PassResult> {
    const texts = new Set(stmts.map((s) => s.sql));
    const slot = await this.#acquire(texts);
    for (const t of texts) slot.carrying.set(t, (slot.carrying.get(t) ?? 0) + 1);
    const lease = (slot.lease ??= { reserved: slot.sql.reserve(), passes: 0, broken: false, tail: Promise.resolve() });
    lease.passes += 1;
    const ahead = lease.tail;
    const issued = Promise.withResolvers<void>();
    lease.tail = issued.promise;
    let ended = false;
    const end = () => {
      ended = true;
      issued.resolve();
    };
    let reserved: ReservedSQL;
    try {
      reserved = await lease.reserved;
    } catch (error) {
      end();
      await this.#release(slot, lease, texts, false);
      throw this.#fail(`cannot connect: ${errorText(error)}`, error, this.#classify(error).kind === "misconfigured");
    }
    await ahead;
    if (inFlight.timedOut || lease.broken) {
      // The caller already got a timeout, or a pass ahead on this connection may have left its transaction open.
      end();
      await this.#release(slot, lease, texts, false);
      throw this.#fail(
        inFlight.timedOut
          ? "batch timed out while waiting for a connection"
          : "the connection was closed under the batch",
        undefined,
      );
    }
    inFlight.slot = slot;
    inFlight.lease = lease;
    let answered = false;
    // A text the connection has not run waits for its prepare before it, and all behind it, go out:
    // the batch is on the connection only once issued on one that knows every text.
    let known = true;
    for (const t of texts) known &&= slot.texts.has(t);
    try {
      const pass = this.#enginePass(reserved, stmts, checking, { ...this.#tools, ended: end }); // issues every statement before it waits
      if (known && Bun.peek.status(pass) !== "rejected") inFlight.onSent?.();
      inFlight.onSent = undefined;
      const result = await pass;
      answered = !inFlight.timedOut;
      return result;
    } finally {
      inFlight.slot = inFlight.lease = null;
      // A pass that threw before its end may have left BEGIN and statements open: a pass behind it
      // would run inside that transaction (a BEGIN there is only a warning), so the connection goes.
      if (!ended) {
        this.#breakLease(slot, lease);
        end();
      }
      // A pass that threw may have lost its connection, and the next one prepares every text anew.
      await this.#release(slot, lease, texts, answered);
    }
  }

  /**
   * A connection for a batch of `texts`: the one that has run most of them, a free one before a
   * busy one that knows as many. Bun prepares each text the first time a connection sends it, two
   * round trips apiece, one text after another, before the batch goes on: on a long link a
   * connection's first batches take ten round trips or more. Bun's own pool hands out whichever
   * connection is free, so with several connections every one would, in time, prepare every
   * table's texts; kept to the connections that know them, a table's batches pay that once. So the
   * batch behind one of its table's goes behind it on its connection (see #pass), not on a free
   * connection that would prepare its texts first: connections beyond what the drain's chains need
   * stay unopened (on MySQL the batch behind also rides with the COMMIT of the one ahead). With
   * every connection carrying all it takes, it waits, first come first served.
   */
  #acquire(texts: Set<string>): Promise<Slot> {
    const best = this.#mostKnowing(texts, this.pipelined ? PASSES_PER_CONNECTION - 1 : 0);
    if (best !== null) {
      best.passes += 1;
      return Promise.resolve(best);
    }
    return new Promise((resolve) => this.#waiting.push(resolve));
  }

  /**
   * Of the slots carrying at most `passes` passes, the one that knows most of `texts`; of those, the one
   * carrying fewest.
   */
  #mostKnowing(texts: Set<string>, passes: number): Slot | null {
    let best: Slot | null = null;
    let bestKnown = -1;
    for (const slot of this.#slots) {
      if (slot.passes > passes) continue;
      let known = 0;
      for (const t of texts) if (slot.texts.has(t) || slot.carrying.has(t)) known += 1;
      if (known > bestKnown || (known === bestKnown && slot.passes < best!.passes)) [best, bestKnown] = [slot, known];
    }
    return best;
  }

  /**
   * A pass of `texts` on `slot` ended; `answered`, the connection knows them too (else it may have
   * lost its connection, and what it knew). The reservation goes back when no pass uses it (Bun
   * closes, instead of pooling, a connection released inside an open transaction); a caller
   * waiting for a connection gets the slot.
   */
  #release(slot: Slot, lease: Lease, texts: Set<string>, answered: boolean): Promise<void> {
    for (const t of texts) {
      const n = slot.carrying.get(t)! - 1;
      if (n === 0) slot.carrying.delete(t);
      else slot.carrying.set(t, n);
    }
    if (!answered) slot.texts.clear();
    else
      for (const t of texts) {
        slot.texts.delete(t); // re-added as the newest
        slot.texts.add(t);
        if (slot.texts.size > TEXTS_REMEMBERED) slot.texts.delete(slot.texts.values().next().value!);
      }
    slot.passes -= 1;
    const next = this.#waiting.shift();
    if (next) {
      slot.passes += 1;
      next(slot);
    }
    lease.passes -= 1;
    if (lease.passes > 0) return Promise.resolve();
    if (slot.lease === lease) slot.lease = null;
    return lease.reserved.then((r) => r.release()).catch(() => {});
  }

  /**
   * Closes the connection under `lease` (the server rolls back what is open on it); the slot's next pass
   * reserves anew.
   */
  #breakLease(slot: Slot, lease: Lease): void {
    lease.broken = true;
    if (slot.lease === lease) slot.lease = null;
    void lease.reserved.then((r) => r.close()).catch(() => {});
  }

  /** A `WriteError` whose message and cause never contain the password. */
  #fail(message: string, error: unknown, misconfigured = false): WriteError {
    const text = maskSecrets(`${this.description}: ${message}`, this.#secrets);
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
