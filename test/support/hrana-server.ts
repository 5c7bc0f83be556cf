/**
 * A test double of libSQL's server (sqld) for the part of the Hrana-over-HTTP protocol that
 * `@libsql/client` speaks over `http://` / `https://` / `libsql://` URLs — over a REAL engine:
 * every statement runs on a SQLite file through bun:sqlite (the engine libSQL is built on), one
 * connection per Hrana stream, so transactions, constraint checks, savepoint/rollback and
 * visibility to other connections are SQLite's own. Only the protocol is re-implemented here.
 *
 * Implemented (protocol version 2, JSON; `/v3` answers the same JSON pipeline):
 * - `GET /v2`, `GET /v3` (version probe, sent without a token: 200); `GET /v3-protobuf` is 404 so
 *   a v3 client falls back to JSON;
 * - `POST /v2/pipeline` (and `/v3/pipeline`): `{baton, requests}` → `{baton, base_url, results}` with
 *   requests `execute`, `batch`, `sequence`, `store_sql`, `close_sql`, `get_autocommit`, `close`;
 * - batons: a stream left open gets a fresh baton per response; the next request must present it
 *   (an unknown or used baton is HTTP 400 text/plain, as sqld); `close` ends the stream and its
 *   connection; a stream idle for `streamExpiryMs` (sqld: 10 s) is closed — its transaction rolls
 *   back — and its baton then gets HTTP 500 `STREAM_EXPIRED`;
 * - batch step conditions `ok`, `error`, `not`, `and`, `or`, `is_autocommit`;
 * - values `null` / `integer` (decimal string) / `float` / `text` / `blob` (base64), results with
 *   `cols` (name, decltype), `rows`, `affected_row_count`, `last_insert_rowid`;
 * - errors as sqld reports them (libsql-server/src/hrana/stmt.rs): syntax errors `SQL_PARSE_ERROR`
 *   (sqld parses before SQLite does); other compile errors with a source offset `SQL_INPUT_ERROR`;
 *   everything else the PRIMARY SQLite code name (`SQLITE_CONSTRAINT`, never the extended
 *   `SQLITE_CONSTRAINT_UNIQUE`), where plain SQLITE_ERROR is `SQLITE_UNKNOWN` (rusqlite has no
 *   name for it); wrong argument count `ARGS_INVALID`; no statement `SQL_NO_STATEMENT`;
 * - bearer-token auth: without `Authorization: Bearer <token>` every request is HTTP 401 with
 *   `{"error": …}` (sqld's shape);
 * - outage switches: `setToken()` (revoke or rotate the token), `stop()` (the port refuses
 *   connections), `refuse(status)` (every request gets that HTTP status), `hold()` (requests hang
 *   until released).
 *
 * Not implemented (the client does not use them over HTTP, or the tests do not need them):
 * cursors (`/v3/cursor`), protobuf encoding, `describe`, WebSocket,
 * `SQL_MANY_STATEMENTS` (bun:sqlite silently ignores a statement's tail), replication.
 * Known difference: bun:sqlite binds an integral `float` (e.g. 42.0) as INTEGER, sqld as REAL;
 * the stored value differs only in columns without INTEGER/REAL/NUMERIC affinity. Such arguments
 * are counted in `integralFloatArgs` so tests can assert a client never sends them.
 */
import { Database, type SQLQueryBindings, SQLiteError } from "bun:sqlite";

type Value =
  | { type: "null" }
  | { type: "integer"; value: string }
  | { type: "float"; value: number }
  | { type: "text"; value: string }
  | { type: "blob"; base64: string };
interface Stmt {
  sql?: string;
  sql_id?: number;
  args?: Value[];
  named_args?: Array<{ name: string; value: Value }>;
  want_rows?: boolean;
}
type Cond =
  | { type: "ok" | "error"; step: number }
  | { type: "not"; cond: Cond }
  | { type: "and" | "or"; conds: Cond[] }
  | { type: "is_autocommit" };
interface ProtoError {
  message: string;
  code: string;
}
interface StmtResult {
  cols: Array<{ name: string; decltype: string | null }>;
  rows: Value[][];
  affected_row_count: number;
  last_insert_rowid: string | null;
}
interface Counters {
  integralFloatArgs: number;
}
interface Stream {
  db: Database;
  sqls: Map<number, string>;
  counters: Counters;
  expiry?: ReturnType<typeof setTimeout>;
}
/** A request the protocol does not allow (sqld answers HTTP 400 text/plain for the whole pipeline). */
class ProtocolError extends Error {}
interface PipelineBody {
  baton?: string | null;
  requests: Array<Record<string, unknown>>;
}

/** A running Hrana test server over one SQLite file. */
export interface HranaServer {
  /** `http://127.0.0.1:<port>` */
  readonly url: string;
  readonly port: number;
  /** The SQLite file every stream opens. */
  readonly file: string;
  /** Streams (connections) currently open. */
  readonly openStreams: number;
  /** HTTP requests answered so far (any path, any status). */
  readonly requests: number;
  /** `float` arguments received with an integral value (sqld stores them as REAL, this server cannot). */
  readonly integralFloatArgs: number;
  /** Accept only this bearer token from now on (a rotated or revoked token); undefined disables auth. */
  setToken(token: string | undefined): void;
  /** Answer every request with this HTTP status (e.g. 503) until `refuse(null)`. */
  refuse(status: number | null): void;
  /** Make requests hang until the returned function is called. */
  hold(): () => void;
  /** Close the listener (connections are refused afterwards) and every stream. Idempotent. */
  stop(): Promise<void>;
}

/** Starts a Hrana server on 127.0.0.1 (random port) over `file`; `token` enables bearer auth;
 *  `foreignKeys` turns on `PRAGMA foreign_keys` for every stream (a server that enforces them). */
export function startHranaServer(options: {
  file: string;
  token?: string;
  streamExpiryMs?: number;
  foreignKeys?: boolean;
  /**
   * A database per host, as Turso's `libsql://{db}-{org}.turso.io`: a stream opened through
   * `http://<name>.localhost:<port>` works on `fileOf(name)` (the name the first label of the host).
   */
  fileOf?: (name: string) => string;
}): HranaServer {
  const expiryMs = options.streamExpiryMs ?? 10_000;
  const expired = new Set<string>();
  const { file } = options;
  let token = options.token;
  const streams = new Map<string, Stream>();
  let refusing: number | null = null;
  let held: Promise<void> | null = null;
  let requests = 0;
  let stopped = false;
  const counters = { integralFloatArgs: 0 };

  // Exactly "application/json", as sqld (axum) sends: the client compares the header verbatim.
  const json = (body: unknown, status = 200) =>
    new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
  const text = (body: string, status: number) =>
    new Response(body, { status, headers: { "content-type": "text/plain" } });

  async function handle(req: Request): Promise<Response> {
    requests++;
    if (held) await held;
    if (refusing !== null) return text("unavailable (test switch)", refusing);
    const path = new URL(req.url).pathname.replace(/\/+$/, "");
    if (req.method === "GET" && (path === "/v2" || path === "/v3")) return new Response(null, { status: 200 });
    if (token !== undefined && req.headers.get("authorization") !== `Bearer ${token}`) {
      return json({ error: "Unauthorized: `The JWT is invalid`" }, 401);
    }
    if (req.method === "POST" && (path === "/v2/pipeline" || path === "/v3/pipeline"))
      return pipeline((await req.json()) as PipelineBody, fileFor(req));
    return text("not found", 404);
  }

  /** The file a new stream of `req` opens (see options.fileOf). */
  function fileFor(req: Request): string {
    const host = new URL(req.url).hostname;
    return options.fileOf !== undefined && host.endsWith(".localhost") ? options.fileOf(host.split(".")[0]!) : file;
  }

  function pipeline(body: PipelineBody, streamFile: string): Response {
    let stream: Stream | undefined;
    if (body.baton != null) {
      if (expired.has(body.baton))
        return json({ message: "The stream has expired due to inactivity", code: "STREAM_EXPIRED" }, 500);
      stream = streams.get(body.baton);
      if (!stream) return text("Invalid baton", 400);
      streams.delete(body.baton); // a baton is good for one request
      clearTimeout(stream.expiry);
    }
    stream ??= openStream(counters, streamFile);
    let open = true;
    const results: unknown[] = [];
    try {
      for (const r of body.requests) {
        if (!open) throw new ProtocolError("The stream was closed by an earlier request");
        if (r.type === "close") {
          stream.db.close();
          open = false;
          results.push(ok({ type: "close" }));
        } else {
          results.push(request(stream, r));
        }
      }
    } catch (error) {
      if (!(error instanceof ProtocolError)) throw error;
      if (open) stream.db.close();
      return text(error.message, 400);
    }
    if (!open) return json({ baton: null, base_url: null, results });
    const baton = crypto.randomUUID();
    streams.set(baton, stream);
    const idle = stream;
    idle.expiry = setTimeout(() => {
      streams.delete(baton);
      expired.add(baton);
      idle.db.close(); // rolls back an open transaction, as sqld dropping the connection
    }, expiryMs);
    idle.expiry.unref(); // an idle test stream never keeps the test process alive
    return json({ baton, base_url: null, results });
  }

  function openStream(counters: Counters, streamFile: string): Stream {
    const db = new Database(streamFile, { safeIntegers: true });
    // bun:sqlite blocks the event loop while it waits: keep a lock wait short.
    db.run("PRAGMA busy_timeout = 1000");
    if (options.foreignKeys) db.run("PRAGMA foreign_keys = ON");
    return { db, sqls: new Map(), counters };
  }

  const server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: handle, maxRequestBodySize: 256 * 1024 * 1024 });
  return {
    url: `http://127.0.0.1:${server.port}`,
    port: server.port!,
    file,
    get openStreams() {
      return streams.size;
    },
    get requests() {
      return requests;
    },
    get integralFloatArgs() {
      return counters.integralFloatArgs;
    },
    setToken(t) {
      token = t;
    },
    refuse(status) {
      refusing = status;
    },
    hold() {
      let release!: () => void;
      held = new Promise((resolve) => (release = resolve));
      return () => {
        held = null;
        release();
      };
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      await server.stop(true);
      for (const s of streams.values()) {
        clearTimeout(s.expiry);
        s.db.close();
      }
      streams.clear();
    },
  };
}

const ok = (response: Record<string, unknown>) => ({ type: "ok", response });
const fail = (error: ProtoError) => ({ type: "error", error });

/** One stream request (everything but `close`). */
function request(stream: Stream, r: Record<string, unknown>) {
  switch (r.type) {
    case "execute": {
      const out = execute(stream, r.stmt as Stmt);
      return "error" in out ? fail(out.error) : ok({ type: "execute", result: out.result });
    }
    case "batch":
      return ok({
        type: "batch",
        result: batch(stream, (r.batch as { steps: Array<{ condition?: Cond | null; stmt: Stmt }> }).steps),
      });
    case "sequence": {
      const sql = (r.sql as string | undefined) ?? stream.sqls.get(r.sql_id as number);
      if (sql === undefined) throw new ProtocolError(`SQL text ${String(r.sql_id)} not found`);
      try {
        stream.db.run(sql);
        return ok({ type: "sequence" });
      } catch (error) {
        return fail(sqliteError(error, "step"));
      }
    }
    case "store_sql":
      stream.sqls.set(r.sql_id as number, r.sql as string);
      return ok({ type: "store_sql" });
    case "close_sql":
      stream.sqls.delete(r.sql_id as number);
      return ok({ type: "close_sql" });
    case "get_autocommit":
      return ok({ type: "get_autocommit", is_autocommit: !stream.db.inTransaction });
    default:
      throw new ProtocolError(`unsupported request type ${JSON.stringify(r.type)}`);
  }
}

/** Runs the steps in order; a step runs only when its condition holds (sqld's batch semantics). */
function batch(stream: Stream, steps: Array<{ condition?: Cond | null; stmt: Stmt }>) {
  const step_results: Array<StmtResult | null> = [];
  const step_errors: Array<ProtoError | null> = [];
  const holds = (c: Cond): boolean => {
    switch (c.type) {
      case "ok":
        return step_results[c.step] != null;
      case "error":
        return step_errors[c.step] != null;
      case "not":
        return !holds(c.cond);
      case "and":
        return c.conds.every(holds);
      case "or":
        return c.conds.some(holds);
      case "is_autocommit":
        return !stream.db.inTransaction;
    }
  };
  for (const { condition, stmt } of steps) {
    if (condition && !holds(condition)) {
      step_results.push(null);
      step_errors.push(null);
      continue;
    }
    const out = execute(stream, stmt);
    step_results.push("result" in out ? out.result : null);
    step_errors.push("error" in out ? out.error : null);
  }
  return { step_results, step_errors };
}

function execute(stream: Stream, stmt: Stmt): { result: StmtResult } | { error: ProtoError } {
  const sql = stmt.sql ?? stream.sqls.get(stmt.sql_id!);
  if (sql === undefined) throw new ProtocolError(`SQL text ${String(stmt.sql_id)} not found`);
  const { db } = stream;
  let prepared: ReturnType<typeof db.prepare>;
  try {
    prepared = db.prepare(sql);
  } catch (error) {
    return { error: sqliteError(error, "prepare") };
  }
  try {
    for (const v of [...(stmt.args ?? []), ...(stmt.named_args ?? []).map((a) => a.value)]) {
      if (v.type === "float" && Number.isInteger(v.value)) stream.counters.integralFloatArgs++;
    }
    const args: SQLQueryBindings[] = stmt.named_args?.length
      ? [Object.fromEntries(stmt.named_args.map((a) => [a.name, fromValue(a.value)])) as SQLQueryBindings]
      : (stmt.args ?? []).map(fromValue);
    const before = changes(db);
    const cols = prepared.columnNames.map((name, i) => ({ name, decltype: prepared.declaredTypes[i] ?? null }));
    const rows = cols.length > 0 ? prepared.values(...args) : (prepared.run(...args), []);
    const after = changes(db);
    // sqld reports changes() (this statement's rows, not its triggers') for INSERT/UPDATE/DELETE
    // only; changes() is stale after other statements, which leave total_changes() as it was.
    const wrote = after.total !== before.total;
    return {
      result: {
        cols,
        rows: stmt.want_rows === false ? [] : rows.map((row) => row.map(toValue)),
        affected_row_count: wrote ? Number(after.changes) : 0,
        last_insert_rowid: wrote ? String(after.rowid) : null,
      },
    };
  } catch (error) {
    return { error: sqliteError(error, "step") };
  } finally {
    prepared.finalize();
  }
}

function changes(db: Database): { total: bigint; changes: bigint; rowid: bigint } {
  const [total, changes, rowid] = db.query("SELECT total_changes(), changes(), last_insert_rowid()").values()[0] as [
    bigint,
    bigint,
    bigint,
  ];
  return { total, changes, rowid };
}

function fromValue(v: Value): SQLQueryBindings {
  switch (v.type) {
    case "null":
      return null;
    case "integer":
      return BigInt(v.value);
    case "float":
      return v.value;
    case "text":
      return v.value;
    case "blob":
      return Uint8Array.from(atob(v.base64), (c) => c.charCodeAt(0));
  }
}

function toValue(v: unknown): Value {
  if (v === null || v === undefined) return { type: "null" };
  if (typeof v === "bigint") return { type: "integer", value: String(v) };
  if (typeof v === "number") return { type: "float", value: v };
  if (typeof v === "string") return { type: "text", value: v };
  if (v instanceof Uint8Array) return { type: "blob", base64: Buffer.from(v).toString("base64") };
  throw new Error(`unexpected SQLite value ${String(v)}`);
}

/** SQLite primary result code names by number (rusqlite's list, as sqld maps them). */
const PRIMARY: Record<number, string> = {
  1: "SQLITE_UNKNOWN",
  2: "SQLITE_INTERNAL",
  3: "SQLITE_PERM",
  4: "SQLITE_ABORT",
  5: "SQLITE_BUSY",
  6: "SQLITE_LOCKED",
  7: "SQLITE_NOMEM",
  8: "SQLITE_READONLY",
  9: "SQLITE_INTERRUPT",
  10: "SQLITE_IOERR",
  11: "SQLITE_CORRUPT",
  12: "SQLITE_NOTFOUND",
  13: "SQLITE_FULL",
  14: "SQLITE_CANTOPEN",
  15: "SQLITE_PROTOCOL",
  17: "SQLITE_SCHEMA",
  18: "SQLITE_TOOBIG",
  19: "SQLITE_CONSTRAINT",
  20: "SQLITE_MISMATCH",
  21: "SQLITE_MISUSE",
  22: "SQLITE_NOLFS",
  23: "SQLITE_AUTH",
  25: "SQLITE_RANGE",
  26: "SQLITE_NOTADB",
};

/** The Hrana error sqld would send for `error`, raised while compiling (`prepare`) or running a statement. */
function sqliteError(error: unknown, phase: "prepare" | "step"): ProtoError {
  if (!(error instanceof SQLiteError)) {
    // bun:sqlite's own checks before SQLite runs: no statement at all, or the argument count or type.
    if (phase === "prepare") return { message: "SQL string does not contain any statement", code: "SQL_NO_STATEMENT" };
    return { message: `Arguments do not match SQL parameters: ${(error as Error).message}`, code: "ARGS_INVALID" };
  }
  if (phase === "prepare" && /syntax error|incomplete input|unrecognized token/.test(error.message)) {
    return { message: `SQL string could not be parsed: ${error.message}`, code: "SQL_PARSE_ERROR" };
  }
  if (phase === "prepare" && error.byteOffset >= 0) {
    return { message: `SQL input error: ${error.message} (at offset ${error.byteOffset})`, code: "SQL_INPUT_ERROR" };
  }
  return { message: `SQLite error: ${error.message}`, code: PRIMARY[error.errno & 0xff] ?? "SQLITE_UNKNOWN" };
}
