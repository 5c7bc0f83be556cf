// A remote for a test: a fresh database on one engine that a drain or a writer writes to, the target
// config that reaches it, and the test's own connection to it, so a test asserts what actually
// landed (rows, order, no duplicates) rather than what the writer said. One shape on every engine:
// a SQLite file (the sqlite writer, libsql on a file: URL, libsql over HTTP to the Hrana double in
// front of the file) or a throwaway PostgreSQL or MariaDB database (server-db.ts).
import { Database } from "bun:sqlite";
import { ledgerDdl } from "../../src/sql/ledger.ts";
import type { BindValue, Dialect } from "../../src/vocabulary.ts";
import { type BuiltinWriterName, createWriter } from "../../src/writers/registry.ts";
import type { OutboxWriter } from "../../src/writers/writer.ts";
import { type HranaServer, startHranaServer } from "./hrana-server.ts";
import { createServerDb, type ServerDb, type ServerEngine } from "./server-db.ts";
import { makeTempDir } from "./tmp.ts";

/** A built-in writer on its engine, or "libsql-http": the libsql writer over HTTP to the Hrana double. */
export type Engine = BuiltinWriterName | "libsql-http";
/** The engines whose remote is a SQLite file. */
export type FileEngine = Exclude<Engine, ServerEngine>;

/** Every engine the drain is tested against. */
export const ENGINES: readonly Engine[] = ["sqlite", "libsql", "libsql-http", "postgres", "mysql"];

/** An auto-numbered first column per dialect: the order the remote inserted rows in. */
export const AUTO_POS: Record<Dialect, string> = {
  sqlite: "pos INTEGER PRIMARY KEY",
  libsql: "pos INTEGER PRIMARY KEY",
  postgres: "pos BIGSERIAL PRIMARY KEY",
  mysql: "pos BIGINT AUTO_INCREMENT PRIMARY KEY",
};

/** A fresh remote database, how a target reaches it, and the test's own connection to it. */
export interface Remote {
  engine: Engine;
  dialect: Dialect;
  /** The `writer` and `[connection]` of a target on it. */
  writer: BuiltinWriterName;
  connection: Record<string, unknown>;
  /** A writer on it, `extra` keys added to its connection; the caller closes it (a service closes its writers). */
  createWriter(extra?: Record<string, unknown>): OutboxWriter;
  /** Runs DDL or DML on the test's connection: one statement with `args` (`?`, PostgreSQL `$n`), or without them several where the engine takes them. */
  exec(sql: string, args?: BindValue[]): Promise<void>;
  /** The rows of a query on the test's connection, as the driver returns them (PostgreSQL's BIGINT as text). */
  rows(sql: string, args?: BindValue[]): Promise<unknown[][]>;
  /** The rows of a query as plain numbers (NULL as 0). */
  ints(sql: string, args?: BindValue[]): Promise<number[][]>;
  /** How many rows `table` holds now. */
  count(table: string): Promise<number>;
  /** Closes the test's connection and removes what the remote created (its temp dir, the Hrana double, the database). */
  done(): Promise<void>;
}

/** A remote on a SQLite file. */
export interface FileRemote extends Remote {
  engine: FileEngine;
  /** The SQLite file. */
  path: string;
}

/** A remote on a fresh database of a PostgreSQL or MariaDB server. */
export interface ServerRemote extends Remote, Pick<ServerDb, "name" | "url" | "host" | "port" | "user"> {
  engine: ServerEngine;
  dialect: ServerEngine;
  writer: ServerEngine;
}

export interface RemoteOptions {
  /** The test's clean-ups (cleanups.ts): `done()` is pushed onto them. */
  cleanups?: Array<() => unknown>;
  /** Foreign keys on for the SQLite-based engines (PostgreSQL and MariaDB always enforce them). */
  foreignKeys?: boolean;
  /** Integers read back as bigint on a SQLite file (lossless above 2^53). */
  bigints?: boolean;
  /** The SQLite file, where a test's config names it (created if missing; `done()` leaves it). Default: a fresh temp dir. */
  path?: string;
  /** The bearer token the Hrana double requires (libsql-http); the connection carries it as `auth_token`. */
  token?: string;
}

/**
 * A fresh remote on `engine`: a SQLite file in WAL mode (its connection waits up to 10 s for a
 * drain's lock, as does the sqlite writer's), or a fresh database from server-db.ts, whose tests
 * fail at once, naming the server, when it is down.
 */
export async function openRemote(engine: ServerEngine, options?: RemoteOptions): Promise<ServerRemote>;
export async function openRemote(engine: FileEngine, options?: RemoteOptions): Promise<FileRemote>;
export async function openRemote(engine: Engine, options?: RemoteOptions): Promise<Remote>;
export async function openRemote(engine: Engine, options: RemoteOptions = {}): Promise<Remote> {
  const remote = engine === "postgres" || engine === "mysql" ? await serverRemote(engine) : fileRemote(engine, options);
  options.cleanups?.push(() => remote.done());
  return remote;
}

async function serverRemote(engine: ServerEngine): Promise<ServerRemote> {
  const db = await createServerDb(engine);
  // Without arguments the statement goes as text, so one call may carry several.
  const query = (sql: string, args?: BindValue[]) =>
    args === undefined ? db.sql.unsafe(sql) : db.sql.unsafe(sql, args);
  const rows = async (sql: string, args?: BindValue[]) => Array.from((await query(sql, args).values()) as unknown[][]);
  const connection = { url: db.url };
  return {
    engine,
    dialect: engine,
    writer: engine,
    connection,
    name: db.name,
    url: db.url,
    host: db.host,
    port: db.port,
    user: db.user,
    createWriter: (extra) => createWriter(engine, { ...connection, ...extra }),
    exec: async (sql, args) => void (await query(sql, args)),
    rows,
    ints: async (sql, args) => (await rows(sql, args)).map((r) => r.map(Number)),
    count: async (table) => Number((await rows(`SELECT count(*) FROM ${table}`))[0]![0]),
    done: () => db.drop(),
  };
}

function fileRemote(engine: FileEngine, options: RemoteOptions): FileRemote {
  const dir = options.path === undefined ? makeTempDir() : undefined;
  const path = options.path ?? dir!.file("remote.db");
  const db = new Database(path, { create: true, safeIntegers: options.bigints ?? false });
  db.run("PRAGMA journal_mode = WAL");
  db.run("PRAGMA busy_timeout = 10000");
  const writer = engine === "sqlite" ? "sqlite" : "libsql";
  let connection: Record<string, unknown> =
    engine === "sqlite"
      ? { path, busy_timeout: 10_000, foreign_keys: options.foreignKeys ?? false }
      : { url: `file:${path}` };
  let hrana: HranaServer | undefined;
  if (engine === "libsql-http") {
    hrana = startHranaServer({ file: path, foreignKeys: options.foreignKeys, token: options.token });
    connection = { url: hrana.url, ...(options.token === undefined ? {} : { auth_token: options.token }) };
  }
  const rows = async (sql: string, args: BindValue[] = []) => db.query(sql).values(...args) as unknown[][];
  return {
    engine,
    dialect: writer,
    writer,
    connection,
    path,
    createWriter: (extra) => createWriter(writer, { ...connection, ...extra }),
    exec: async (sql, args) => void (args === undefined ? db.run(sql) : db.run(sql, args)),
    rows,
    ints: async (sql, args) => (await rows(sql, args)).map((r) => r.map(Number)),
    count: async (table) => Number((await rows(`SELECT count(*) FROM "${table}"`))[0]![0]),
    done: async () => {
      db.close();
      await hrana?.stop();
      dir?.cleanup();
    },
  };
}

/**
 * A stand-in for a remote transaction id where the engine has none to read in a trigger (SQLite,
 * libSQL, MariaDB): the ledger table, created up front, and a counter `txn.n` that every ledger
 * fence moves — one fence per table and remote transaction, so rows a trigger stamps with `n`
 * share their transaction exactly when they share `n`. `trigger` builds a row trigger in the
 * dialect's syntax (PostgreSQL reads txid_current() instead and does not use this).
 */
export function fenceCounter(dialect: Dialect): {
  ddl: string[];
  trigger: (name: string, event: string, table: string, body: string) => string;
} {
  const each = dialect === "mysql" ? "FOR EACH ROW" : "FOR EACH ROW BEGIN";
  const end = dialect === "mysql" ? "" : "; END";
  const trigger = (name: string, event: string, table: string, body: string) =>
    `CREATE TRIGGER ${name} AFTER ${event} ON ${table} ${each} ${body}${end}`;
  return {
    ddl: [
      ledgerDdl("sqloutbox_ledger", dialect),
      "CREATE TABLE txn (n BIGINT NOT NULL)",
      "INSERT INTO txn (n) VALUES (0)",
      trigger("ledger_inserted", "INSERT", "sqloutbox_ledger", "UPDATE txn SET n = n + 1"),
      trigger("ledger_updated", "UPDATE", "sqloutbox_ledger", "UPDATE txn SET n = n + 1"),
    ],
    trigger,
  };
}
