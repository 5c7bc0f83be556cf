import { Database, type SQLQueryBindings } from "bun:sqlite";
import { ConfigError, WriteError } from "../errors.ts";
import { classifySqlite, type ErrorKind } from "./classify.ts";
import {
  booleanKey,
  checkBooleans,
  checkNumbers,
  COALESCE_KEY,
  type Connection,
  numberKey,
  stringKey,
} from "./connection.ts";
import { blameDeferred, errorText, type Outcome, type PassResult, runIsolated } from "./isolate.ts";
import type { WriterSpec } from "./writer-spec.ts";
import { statementKind } from "./statement-kind.ts";
import type { OutboxWriter, Statement, WriteResult } from "./writer.ts";

/** Default `busy_timeout` (milliseconds) of the `sqlite` writer. */
export const DEFAULT_SQLITE_BUSY_TIMEOUT_MS = 5000;

/**
 * Writes into a local SQLite file with bun:sqlite (WAL, busy_timeout). The file is opened on the
 * first batch, so a missing directory is an outage (retried), not a startup crash. Integers are read
 * back as bigint (lossless above 2^53).
 */
export class SqliteWriter implements OutboxWriter {
  readonly dialect = "sqlite" as const;
  readonly path: string;
  readonly #busyTimeoutMs: number;
  readonly #foreignKeys: boolean;
  readonly #coalesce: boolean;
  #db: Database | null = null;
  #closed = false;

  constructor(connection: Connection) {
    const path = stringKey(connection, "path");
    if (!path) throw new ConfigError("is required by the sqlite writer", { keyPath: "connection.path" });
    this.path = path;
    this.#busyTimeoutMs = numberKey(connection, "busy_timeout") ?? DEFAULT_SQLITE_BUSY_TIMEOUT_MS;
    this.#foreignKeys = booleanKey(connection, "foreign_keys", false);
    this.#coalesce = booleanKey(connection, "coalesce", true);
  }

  async writeBatch(stmts: Statement[]): Promise<WriteResult[]> {
    if (this.#closed) throw this.#fail("writer is closed", undefined);
    if (stmts.length === 0) return [];
    const db = this.#open();
    return runIsolated(
      stmts,
      (s, checking) => (checking ? this.#checkingPass(db, s) : this.#pass(db, s)),
      classifyLocal,
      (m, e, misconfigured) => this.#fail(m, e, misconfigured),
      "sqlite",
      { coalesce: this.#coalesce },
    );
  }

  close(): void {
    this.#closed = true;
    this.#db?.close();
    this.#db = null;
  }

  #open(): Database {
    if (this.#db) return this.#db;
    try {
      const db = new Database(this.path, { create: true, safeIntegers: true });
      db.run(`PRAGMA busy_timeout = ${Math.trunc(this.#busyTimeoutMs)}`);
      db.run("PRAGMA journal_mode = WAL");
      // A per-connection setting (SQLite's default is off), so it cannot come from a batch.
      if (this.#foreignKeys) db.run("PRAGMA foreign_keys = ON");
      this.#db = db;
      return db;
    } catch (error) {
      throw this.#fail(`cannot open ${this.path}: ${errorText(error)}`, error);
    }
  }

  /** Runs the statements in order inside BEGIN IMMEDIATE; stops at the first failure and rolls back. */
  async #pass(db: Database, stmts: Statement[]): Promise<PassResult> {
    try {
      db.run("BEGIN IMMEDIATE");
    } catch (error) {
      throw this.#fail(`BEGIN failed: ${errorText(error)}`, error);
    }
    const outcomes: Outcome[] = [];
    try {
      for (const stmt of stmts) {
        if (outcomes.length > 0 && !("result" in outcomes[outcomes.length - 1]!)) {
          outcomes.push({ notRun: true });
          continue;
        }
        try {
          outcomes.push({ result: run(db, stmt) });
        } catch (error) {
          outcomes.push({ error });
        }
      }
      const committed = outcomes.every((o) => "result" in o);
      if (committed) {
        const commitError = tryCommit(db);
        if (commitError !== undefined) return { outcomes, committed: false, commitError };
      } else if (db.inTransaction) db.run("ROLLBACK");
      return { outcomes, committed };
    } catch (error) {
      if (db.inTransaction) db.run("ROLLBACK");
      throw this.#fail(`transaction failed: ${errorText(error)}`, error);
    }
  }

  /**
   * After a COMMIT failed a deferred foreign key: the statements run again in one transaction,
   * counting violations after each (`blameDeferred`); rolled back when one is blamed.
   */
  async #checkingPass(db: Database, stmts: Statement[]): Promise<PassResult> {
    try {
      db.run("BEGIN IMMEDIATE");
    } catch (error) {
      throw this.#fail(`BEGIN failed: ${errorText(error)}`, error);
    }
    try {
      const outcomes = await blameDeferred(stmts, {
        run: async (stmt) => run(db, stmt),
        violations: async () => db.query("PRAGMA foreign_key_check").all().length,
      });
      const committed = outcomes.every((o) => "result" in o);
      if (!committed) db.run("ROLLBACK");
      else {
        const commitError = tryCommit(db);
        if (commitError !== undefined) return { outcomes, committed: false, commitError };
      }
      return { outcomes, committed };
    } catch (error) {
      if (db.inTransaction) db.run("ROLLBACK");
      throw this.#fail(`transaction failed: ${errorText(error)}`, error);
    }
  }

  #fail(message: string, error: unknown, misconfigured = false): WriteError {
    return new WriteError(`sqlite ${this.path}: ${message}`, undefined, {
      ...(error === undefined ? {} : { cause: error }),
      misconfigured,
    });
  }
}

/** COMMIT, or — when it fails for a row fault (a deferred foreign key), which leaves the transaction
 *  open — ROLLBACK and that error. Other COMMIT failures throw. */
function tryCommit(db: Database): unknown {
  try {
    db.run("COMMIT");
    return undefined;
  } catch (error) {
    if (classifySqlite(error).kind !== "row") throw error;
    if (db.inTransaction) db.run("ROLLBACK");
    return error;
  }
}

/** bun:sqlite is in-process: a statement that throws an error without an SQLite code failed while
 *  binding (wrong number of values, integer out of range), which is the statement's fault. */
function classifyLocal(error: unknown): ErrorKind {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code !== "string" && error instanceof Error) return { kind: "row", errorClass: "E_INVALID_ARG" };
  return classifySqlite(error);
}

const TRACE_COMMENT_OPEN = "/*traceparent='";

function run(db: Database, stmt: Statement): WriteResult {
  const kind = statementKind(stmt.sql);
  // DDL, and a text with a trace comment (trace_comments: each row's is new), is prepared uncached:
  // its text is one-off and the cache would only grow.
  // An uncached statement is finalized at once: left to the garbage collector, it would keep a
  // closed database's file open (a tenant template closes and opens files all day).
  const oneOff = kind === "ddl" || stmt.sql.includes(TRACE_COMMENT_OPEN);
  const query = oneOff ? db.prepare(stmt.sql) : db.query(stmt.sql);
  try {
    const args = stmt.args as SQLQueryBindings[];
    if (kind === "read" || query.columnNames.length > 0)
      return { ok: true, rows: query.values(...args) as unknown[][] };
    const { changes } = query.run(...args);
    return { ok: true, rowsAffected: kind === "ddl" ? 0 : Number(changes) };
  } finally {
    if (oneOff) query.finalize();
  }
}

/** The `sqlite` writer: a local SQLite file (`path`), for demos, tests and local fan-out. */
export const sqliteWriter: WriterSpec = {
  dialect: "sqlite",
  keys: [
    {
      name: "path",
      required: true,
      description: "SQLite database file (created if missing; relative to outbox.toml when loaded from TOML)",
    },
    {
      name: "busy_timeout",
      description: `milliseconds to wait for a lock (default ${DEFAULT_SQLITE_BUSY_TIMEOUT_MS})`,
    },
    {
      name: "foreign_keys",
      description: "true to enforce foreign keys (PRAGMA foreign_keys = ON; default false, as SQLite)",
    },
    COALESCE_KEY,
  ],
  validate: (connection) => [
    ...checkNumbers(connection, ["busy_timeout"]),
    ...checkBooleans(connection, ["foreign_keys", "coalesce"]),
  ],
  describe: (connection) => `sqlite:${stringKey(connection, "path") ?? ""}`,
  create: (connection) => new SqliteWriter(connection),
};
