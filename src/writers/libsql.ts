import type { Client, InArgs, ResultSet, Transaction } from "@libsql/client";
import { ConfigError, WriteError } from "../errors.ts";
import { classifySqlite, type ErrorKind } from "./classify.ts";
import { maskCause, maskSecrets, maskUrl } from "../masking.ts";
import { withTimeout } from "../timeout.ts";
import {
  booleanKey,
  checkAliases,
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

/** Default `batch_timeout` (seconds) of the `libsql` writer. */
export const DEFAULT_LIBSQL_BATCH_TIMEOUT_S = 25;
const SCHEMES = ["libsql", "https", "http", "wss", "ws", "file"];

/**
 * Writes to Turso / libSQL with the official `@libsql/client` (imported on first use, so the CLI
 * does not load it unless a libsql target exists). A batch is one `client.batch(…, "write")`: one
 * round trip and one transaction; on a failed statement the batch re-runs without it
 * (`runIsolated`). Integers are read back as bigint.
 */
export class LibsqlWriter implements OutboxWriter {
  readonly dialect = "libsql" as const;
  /** Where the target is — the writer and the URL without its token or parameters (describeLibsql). */
  readonly description: string;
  readonly #url: string;
  readonly #authToken: string | undefined;
  /** Token values to mask: the auth token and an `authToken=` URL parameter. */
  readonly #secrets: string[];
  readonly #batchTimeoutMs: number;
  readonly #coalesce: boolean;
  #client: Promise<Client> | null = null;
  #closed = false;

  constructor(connection: Connection) {
    const url = stringKey(connection, "url", "db_url");
    if (!url)
      throw new ConfigError('is required by the libsql writer (or its alias "db_url")', { keyPath: "connection.url" });
    this.#url = url;
    this.#authToken = stringKey(connection, "auth_token", "db_token");
    this.#batchTimeoutMs = (numberKey(connection, "batch_timeout") ?? DEFAULT_LIBSQL_BATCH_TIMEOUT_S) * 1000;
    this.#coalesce = booleanKey(connection, "coalesce", true);
    this.description = describeLibsql(url);
    this.#secrets = [this.#authToken, tokenInUrl(url)].filter((s): s is string => !!s);
  }

  async writeBatch(stmts: Statement[]): Promise<WriteResult[]> {
    if (this.#closed) throw this.#fail("writer is closed", undefined);
    if (stmts.length === 0) return [];
    const client = await this.#connect();
    // The client cannot cancel a request in flight; the batch is abandoned (not committed by us).
    // Should it commit late, the ledger row it moved makes the drain's next fence fail and the
    // drain settles from the ledger instead of delivering those rows again.
    const work = runIsolated(
      stmts,
      (s, checking) => (checking ? this.#checkingPass(client, s) : this.#pass(client, s)),
      classifyLibsql,
      (m, e, misconfigured) => this.#fail(m, e, misconfigured),
      "libsql",
      { coalesce: this.#coalesce },
    );
    return withTimeout(work, this.#batchTimeoutMs, () => {
      throw this.#fail(`batch timed out after ${this.#batchTimeoutMs / 1000}s`, undefined);
    });
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const client = await this.#client?.catch(() => null);
    client?.close();
  }

  #connect(): Promise<Client> {
    this.#client ??= import("@libsql/client")
      .then(({ createClient }) => createClient({ url: this.#url, authToken: this.#authToken, intMode: "bigint" }))
      .catch((error: unknown) => {
        this.#client = null;
        throw this.#fail(`cannot create client: ${errorText(error)}`, error);
      });
    return this.#client;
  }

  async #pass(client: Client, stmts: Statement[]): Promise<PassResult> {
    // The client throws for such a value before sending anything, with no statement index: that
    // would read as an outage and stall the target on one row. Report it as that statement's fault.
    for (let i = 0; i < stmts.length; i++) {
      const error = unsendable(stmts[i]!.args);
      if (error)
        return {
          outcomes: stmts.map(
            (_, j): Outcome => (j < i ? { result: { ok: true } } : j === i ? { error } : { notRun: true }),
          ),
          committed: false,
        };
    }
    try {
      const results = await client.batch(
        stmts.map((s) => ({ sql: s.sql, args: s.args.map(integral) as InArgs })),
        "write",
      );
      return { outcomes: results.map((rs, i) => ({ result: toResult(stmts[i]!, rs) })), committed: true };
    } catch (error) {
      const index = (error as { statementIndex?: unknown }).statementIndex;
      if (index === undefined && classifyLibsql(error).kind === "row") {
        // A row fault no statement is blamed for: the COMMIT failed a deferred foreign key.
        return { outcomes: stmts.map((): Outcome => ({ result: { ok: true } })), committed: false, commitError: error };
      }
      if (typeof index !== "number" || index < 0 || index >= stmts.length)
        throw this.#fail(errorText(error), error, classifyLibsql(error).kind === "misconfigured");
      // The batch rolled back as a whole: the statements before `index` will run again.
      return {
        outcomes: stmts.map(
          (_, i): Outcome => (i < index ? { result: { ok: true } } : i === index ? { error } : { notRun: true }),
        ),
        committed: false,
      };
    }
  }

  /**
   * After a COMMIT failed a deferred foreign key: the statements run again in one interactive
   * transaction (a round trip each), counting violations after each (`blameDeferred`); rolled
   * back when one is blamed. Only this rare path pays the round trips.
   */
  async #checkingPass(client: Client, stmts: Statement[]): Promise<PassResult> {
    let tx: Transaction;
    try {
      tx = await client.transaction("write");
    } catch (error) {
      throw this.#fail(`cannot begin a transaction: ${errorText(error)}`, error);
    }
    try {
      const outcomes = await blameDeferred(stmts, {
        run: async (stmt) => {
          const bad = unsendable(stmt.args);
          if (bad !== undefined) throw bad;
          return toResult(stmt, await tx.execute({ sql: stmt.sql, args: stmt.args.map(integral) as InArgs }));
        },
        violations: async () => (await tx.execute("PRAGMA foreign_key_check")).rows.length,
      });
      if (!outcomes.every((o) => "result" in o)) {
        await tx.rollback();
        return { outcomes, committed: false };
      }
      try {
        await tx.commit();
      } catch (commitError) {
        return { outcomes, committed: false, commitError };
      }
      return { outcomes, committed: true };
    } catch (error) {
      throw this.#fail(`transaction failed: ${errorText(error)}`, error);
    } finally {
      tx.close();
    }
  }

  /** A `WriteError` whose message and cause never contain the auth token. */
  #fail(message: string, error: unknown, misconfigured = false): WriteError {
    const text = maskSecrets(`${this.description}: ${message}`, this.#secrets);
    const cause = error === undefined ? undefined : maskCause(error, this.#secrets);
    return new WriteError(text, undefined, { ...(cause === undefined ? {} : { cause }), misconfigured });
  }
}

/**
 * Where a libSQL target is, for logs, errors and `status`: `libsql libsql://acme.turso.io` or
 * `libsql file:/srv/local.db` — the URL without its credentials or parameters (`?authToken=`).
 */
export function describeLibsql(url: string): string {
  if (url.startsWith("file:")) return `libsql ${url.split("?")[0]}`;
  try {
    const u = new URL(url);
    const host = u.host === "" ? "" : `//${u.host}`;
    const path = u.pathname === "/" ? "" : decodeURIComponent(u.pathname);
    return `libsql ${u.protocol}${host}${path}`;
  } catch {
    return "libsql (url is not a valid URL)";
  }
}

function tokenInUrl(url: string): string | undefined {
  try {
    return new URL(url).searchParams.get("authToken") ?? undefined;
  } catch {
    return undefined;
  }
}

/**
 * The client sends every JS number as a Hrana `float` (REAL), so `42` would land as `42.0` in a TEXT
 * or untyped column (over HTTP and with `file:` alike). A safe integer goes as an integer instead,
 * as the `sqlite` writer binds it.
 */
function integral(value: unknown): unknown {
  return typeof value === "number" && Number.isSafeInteger(value) ? BigInt(value) : value;
}

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/** An `ERR_OUT_OF_RANGE` error (the code Bun gives the sqlite writer) for an argument the client cannot send. */
function unsendable(args: readonly unknown[]): Error | undefined {
  const i = args.findIndex(
    (v) =>
      (typeof v === "bigint" && (v < INT64_MIN || v > INT64_MAX)) || (typeof v === "number" && !Number.isFinite(v)),
  );
  if (i < 0) return undefined;
  const what =
    typeof args[i] === "bigint" ? "an integer outside the 64-bit range" : `not a finite number (${String(args[i])})`;
  return Object.assign(new RangeError(`argument ${i + 1} is ${what}`), { code: "ERR_OUT_OF_RANGE" });
}

/**
 * sqld (remote libSQL) reports only the primary SQLite code, and plain SQLITE_ERROR — a compile
 * error without a source offset, e.g. "no such table" or "table t has no column named c" — as
 * `SQLITE_UNKNOWN`, because its SQLite wrapper has no name for it. A missing table or column is the
 * remote schema's fault (as for a local file); any other SQLITE_UNKNOWN is the statement's, as is
 * an argument the client refuses to send (`ERR_OUT_OF_RANGE`, see `unsendable`). HTTP 401/403
 * means the token was refused: no retry fixes that. Everything else is classified as for SQLite.
 */
export function classifyLibsql(error: unknown): ErrorKind {
  const e = error as { code?: unknown; cause?: { status?: unknown } } | null;
  const status = e?.cause?.status;
  if (e?.code === "SERVER_ERROR" && (status === 401 || status === 403))
    return { kind: "misconfigured", errorClass: `HTTP_${status}` };
  const kind = classifySqlite(error);
  if (kind.kind === "schema") return kind;
  return e?.code === "SQLITE_UNKNOWN" || e?.code === "ERR_OUT_OF_RANGE" ? { kind: "row", errorClass: e.code } : kind;
}

function toResult(stmt: Statement, rs: ResultSet): WriteResult {
  const kind = statementKind(stmt.sql);
  // The client returns BLOBs as ArrayBuffer; rows carry Uint8Array like the other writers.
  const cell = (v: unknown) => (v instanceof ArrayBuffer ? new Uint8Array(v) : v);
  if (kind === "read" || rs.columns.length > 0)
    return { ok: true, rows: rs.rows.map((row) => rs.columns.map((_, i) => cell(row[i]))) };
  return { ok: true, rowsAffected: kind === "ddl" ? 0 : rs.rowsAffected };
}

/** The `libsql` writer: Turso / libSQL (`libsql://`, `https://`, `file:` URLs). */
export const libsqlWriter: WriterSpec = {
  dialect: "libsql",
  keys: [
    { name: "url", description: "database URL: libsql://…, https://… or file:path (alias: db_url); required" },
    { name: "db_url", description: "alias of url (the reference's name)" },
    { name: "auth_token", secret: true, description: "Turso auth token (alias: db_token)" },
    { name: "db_token", secret: true, description: "alias of auth_token (the reference's name)" },
    {
      name: "batch_timeout",
      description: `seconds one writeBatch may take before it is an outage (default ${DEFAULT_LIBSQL_BATCH_TIMEOUT_S})`,
    },
    COALESCE_KEY,
  ],
  validate(connection) {
    const problems = [
      ...checkAliases(connection, [
        ["url", "db_url"],
        ["auth_token", "db_token"],
      ]),
      ...checkNumbers(connection, ["batch_timeout"]),
      ...checkBooleans(connection, ["coalesce"]),
    ];
    const url = stringKey(connection, "url", "db_url");
    const key = connection.url !== undefined ? "url" : "db_url";
    if (!url) problems.push({ key: "url", message: 'is required (or its alias "db_url")' });
    else if (!SCHEMES.includes(url.split(":")[0]!.toLowerCase())) {
      problems.push({ key, message: `must start with libsql://, https:// or file:, got ${maskUrl(url)}` });
    }
    return problems;
  },
  describe: (connection) => describeLibsql(stringKey(connection, "url", "db_url") ?? ""),
  create: (connection) => new LibsqlWriter(connection),
};
