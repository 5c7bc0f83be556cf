import { SQL, type ReservedSQL } from "bun";
import { WriteError } from "../errors.ts";
import type { ErrorKind } from "./classify.ts";
import { maskCause, maskSecrets, urlPassword } from "../masking.ts";
import { withTimeout } from "../timeout.ts";
import { booleanKey, type Connection, numberKey, stringKey } from "./connection.ts";
import { errorText, type Outcome, type PassResult, runIsolated } from "./isolate.ts";
import {
  DEFAULT_BATCH_TIMEOUT_S,
  DEFAULT_CONNECT_TIMEOUT_S,
  DEFAULT_MAX_CONNECTIONS,
  describeServer,
} from "./server-keys.ts";
import { statementKind } from "./statement-kind.ts";
import { unitOf, type OutboxWriter, type Statement, type WriteResult } from "./writer.ts";

type Engine = "postgres" | "mysql";

/**
 * MySQL: autocommit off instead of BEGIN, and a sql_mode the drain can rely on: STRICT_TRANS_TABLES
 * added, and ANSI_QUOTES, NO_BACKSLASH_ESCAPES (and ANSI, which implies the first) removed, since
 * the statement checks read `"…"` as a string and `\` as an escape, as MySQL does by default.
 */
const MYSQL_BEGIN =
  "SET autocommit = 0, sql_mode = TRIM(BOTH ',' FROM REPLACE(REPLACE(REPLACE(REPLACE(CONCAT(',', @@sql_mode, ',STRICT_TRANS_TABLES,'), ',ANSI_QUOTES,', ','), ',NO_BACKSLASH_ESCAPES,', ','), ',ANSI,', ','), ',,', ','))";
/** PostgreSQL: the statement checks read `'…\'` as the standard says (backslash is no escape), so the server must too. */
const PG_BEGIN = "BEGIN; SET LOCAL standard_conforming_strings = on";
/** The connection one writeBatch call is using, and whether that call has timed out. */
type InFlight = { reserved: ReservedSQL | null; timedOut: boolean };

/**
 * A writer on Bun's built-in SQL client (PostgreSQL, MySQL/MariaDB). Each batch runs on one reserved
 * connection as BEGIN + every statement pipelined (sent without waiting for each other) + COMMIT:
 * two round trips per batch, whatever its size; failures are isolated by `runIsolated`.
 */
export class BunSqlWriter implements OutboxWriter {
  readonly dialect: Engine;
  /** The target with its password masked: safe for logs and errors. */
  readonly description: string;
  readonly #sql: SQL;
  readonly #secrets: string[];
  readonly #classify: (error: unknown) => ErrorKind;
  readonly #batchTimeoutMs: number;
  readonly #coalesce: boolean;
  #closed = false;

  constructor(engine: Engine, connection: Connection, classify: (error: unknown) => ErrorKind) {
    this.dialect = engine;
    this.#classify = classify;
    const url = stringKey(connection, "url");
    const password = stringKey(connection, "password");
    this.#secrets = [password, urlPassword(url)].filter((s): s is string => !!s);
    this.#batchTimeoutMs = (numberKey(connection, "batch_timeout") ?? DEFAULT_BATCH_TIMEOUT_S) * 1000;
    this.#coalesce = booleanKey(connection, "coalesce", true);
    const tls = connection.ssl ?? connection.tls;
    const options = {
      adapter: engine,
      max: numberKey(connection, "max_connections") ?? DEFAULT_MAX_CONNECTIONS,
      connectionTimeout: numberKey(connection, "connect_timeout") ?? DEFAULT_CONNECT_TIMEOUT_S,
      idleTimeout: 60,
      // PostgreSQL keeps named prepared statements per connection, on the server too, without a
      // bound: right for a program's few texts, a leak for texts that are each new (trace comments),
      // which `prepare = false` sends unnamed. Bun's MySQL driver always prepares, 256 texts at most.
      ...(engine === "postgres" ? { prepare: booleanKey(connection, "prepare", true) } : {}),
      ...(tls !== undefined ? { tls: tls as boolean } : {}),
    } as const;
    this.description = describeServer(connection, engine);
    this.#sql = url
      ? new SQL(url, options)
      : new SQL({
          ...options,
          hostname: stringKey(connection, "host"),
          port: numberKey(connection, "port"),
          username: stringKey(connection, "user", "username"),
          password,
          database: stringKey(connection, "database"),
        });
  }

  async writeBatch(stmts: Statement[]): Promise<WriteResult[]> {
    if (this.#closed) throw this.#fail("writer is closed", undefined);
    if (stmts.length === 0) return [];
    // The connection this call is using, so its timeout closes it (and no other call's).
    const inFlight: InFlight = { reserved: null, timedOut: false };
    const work = runIsolated(
      stmts,
      (s, checking) => this.#pass(s, inFlight, checking),
      this.#classify,
      (m, e, misconfigured) => this.#fail(m, e, misconfigured),
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
    await this.#sql.close({ timeout: 5 });
  }

  /**
   * One optimistic pass on one reserved connection: BEGIN (MySQL: autocommit off) and every
   * statement pipelined, then COMMIT or ROLLBACK after looking at the outcomes: two round trips.
   * PostgreSQL commits only when every statement succeeded. COMMIT is deliberately not pipelined
   * behind the statements: a statement Bun refuses before sending it would not abort the server's
   * transaction, and a blind COMMIT would then commit the rest of its namespace. MySQL rolls back
   * just a failed statement, so it commits when no later statement of a failed namespace was
   * applied; otherwise it rolls back for a re-run. A PostgreSQL COMMIT refused for a row-fault
   * SQLSTATE (a deferred constraint) is reported as `commitError`; a `checking` pass then starts
   * with SET CONSTRAINTS ALL IMMEDIATE so the offending statement fails itself. MySQL has no
   * deferred constraints (InnoDB checks foreign keys per statement).
   */
  async #pass(stmts: Statement[], inFlight: InFlight, checking: boolean): Promise<PassResult> {
    let reserved: ReservedSQL;
    try {
      reserved = await this.#sql.reserve();
    } catch (error) {
      throw this.#fail(`cannot connect: ${errorText(error)}`, error, this.#classify(error).kind === "misconfigured");
    }
    if (inFlight.timedOut) {
      // The caller already got a timeout: do not start the batch on a late connection.
      await reserved.release().catch(() => {});
      throw this.#fail("batch timed out while waiting for a connection", undefined);
    }
    inFlight.reserved = reserved;
    try {
      // MySQL: autocommit off instead of BEGIN, so statements that run after a server-side
      // rollback (deadlock) or an implicit commit (DDL) are still undone by our ROLLBACK. Strict
      // mode whatever the server's default: without it a bad value is stored truncated or as a
      // default (a warning, not an error), and the duplicate-absorbing INSERT … SELECT form
      // would even differ from the original VALUES statement.
      const begin = settle(reserved.unsafe(this.dialect === "postgres" ? PG_BEGIN : MYSQL_BEGIN));
      const immediate =
        checking && this.dialect === "postgres" ? settle(reserved.unsafe("SET CONSTRAINTS ALL IMMEDIATE")) : undefined;
      const running = stmts.map((s) => settle(this.#run(reserved, s)));
      const began = await begin;
      if ("error" in began) throw this.#fail(`BEGIN failed: ${errorText(began.error)}`, began.error);
      const set = await immediate;
      if (set && "error" in set) throw this.#fail(`SET CONSTRAINTS failed: ${errorText(set.error)}`, set.error);
      const outcomes: Outcome[] = await Promise.all(running);
      const committed =
        this.dialect === "postgres" ? outcomes.every((o) => "result" in o) : this.#isolatedByServer(stmts, outcomes);
      const ended = await settle(reserved.unsafe(committed ? "COMMIT" : "ROLLBACK"));
      // PostgreSQL ends the transaction (rolled back) when COMMIT fails a deferred constraint.
      if (committed && this.dialect === "postgres" && "error" in ended && this.#classify(ended.error).kind === "row") {
        return { outcomes, committed: false, commitError: ended.error };
      }
      if ("error" in ended)
        throw this.#fail(`${committed ? "COMMIT" : "ROLLBACK"} failed: ${errorText(ended.error)}`, ended.error);
      // PostgreSQL answers COMMIT with the tag ROLLBACK when the transaction had failed.
      const tag = (ended.result as { command?: unknown }).command;
      if (committed && this.dialect === "postgres" && tag !== "COMMIT")
        throw this.#fail(`COMMIT was answered with ${String(tag)}`, undefined);
      return { outcomes, committed };
    } finally {
      inFlight.reserved = null;
      // Bun closes (instead of pooling) a connection released inside an open transaction.
      await reserved.release().catch(() => {});
    }
  }

  /**
   * MySQL rolls back only a failed statement: the transaction may still commit when every failure
   * is the statement's own (row or schema) and nothing else of its namespace was applied, which
   * keeps namespaces atomic. Otherwise it rolls back for a re-run without the failed namespace.
   */
  #isolatedByServer(stmts: Statement[], outcomes: Outcome[]): boolean {
    const failed = new Set<string>();
    const applied = new Set<string>();
    for (const [i, o] of outcomes.entries()) {
      const namespace = unitOf(stmts[i]!);
      if ("result" in o) applied.add(namespace);
      else if (!("error" in o)) return false;
      else {
        const kind = this.#classify(o.error).kind;
        if (kind !== "row" && kind !== "schema") return false;
        failed.add(namespace);
      }
    }
    return [...failed].every((namespace) => !applied.has(namespace));
  }

  async #run(reserved: ReservedSQL, stmt: Statement): Promise<WriteResult> {
    const kind = statementKind(stmt.sql);
    const query = reserved.unsafe(stmt.sql, stmt.args as unknown[]);
    if (kind === "read") return { ok: true, rows: Array.from((await query.values()) as unknown[][]) };
    const result = (await query) as { count?: number | null; affectedRows?: number | null };
    if (kind === "ddl") return { ok: true, rowsAffected: 0 };
    return {
      ok: true,
      rowsAffected: Number(this.dialect === "mysql" ? (result.affectedRows ?? 0) : (result.count ?? 0)),
    };
  }

  /** A `WriteError` whose message and cause never contain the password. */
  #fail(message: string, error: unknown, misconfigured = false): WriteError {
    const text = maskSecrets(`${this.dialect} ${this.description}: ${message}`, this.#secrets);
    const cause = error === undefined ? undefined : maskCause(error, this.#secrets);
    return new WriteError(text, undefined, { ...(cause === undefined ? {} : { cause }), misconfigured });
  }
}

/** Starts `promise` now (Bun.SQL queries are lazy) and turns it into an outcome that never rejects. */
function settle<T>(promise: PromiseLike<T>): Promise<{ result: T } | { error: unknown }> {
  return Promise.resolve(promise).then(
    (result) => ({ result }),
    (error: unknown) => ({ error }),
  );
}
