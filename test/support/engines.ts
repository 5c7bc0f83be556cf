// A real remote engine for a drain test: a fresh database on each built-in writer's engine (a
// SQLite file, the libSQL client on it, the Hrana double in front of it, PostgreSQL, MariaDB),
// the target config that reaches it, and an independent connection to check what landed.
import { Database } from "bun:sqlite";
import { ledgerDdl } from "../../src/sql/ledger.ts";
import type { Dialect } from "../../src/vocabulary.ts";
import type { BuiltinWriterName } from "../../src/writers/registry.ts";
import { startHranaServer } from "./hrana-server.ts";
import { createMysqlDb, createPgDb } from "./server-db.ts";
import type { TempDir } from "./tmp.ts";

/** A built-in writer on its engine, or "libsql-http": the libsql writer over HTTP to the Hrana double. */
export type Engine = BuiltinWriterName | "libsql-http";

/** Every engine the drain is tested against. */
export const ENGINES: readonly Engine[] = ["sqlite", "libsql", "libsql-http", "postgres", "mysql"];

/** An auto-numbered first column per engine: the order the remote inserted rows in. */
export const AUTO_POS: Record<Dialect, string> = {
  sqlite: "pos INTEGER PRIMARY KEY",
  libsql: "pos INTEGER PRIMARY KEY",
  postgres: "pos BIGSERIAL PRIMARY KEY",
  mysql: "pos BIGINT AUTO_INCREMENT PRIMARY KEY",
};

/** A fresh remote database and how to reach and read it. */
export interface EngineRemote {
  engine: Engine;
  writer: BuiltinWriterName;
  dialect: Dialect;
  /** The `[connection]` table of a target on it. */
  connection: Record<string, unknown>;
  exec(sql: string): Promise<void>;
  rows(sql: string): Promise<unknown[][]>;
  /** Rows as plain numbers. */
  ints(sql: string): Promise<number[][]>;
}

/** A fresh remote on `engine`; `foreignKeys` turns them on for the SQLite-based engines (PostgreSQL and MariaDB always enforce them). */
export async function engineRemote(
  engine: Engine,
  dir: TempDir,
  cleanups: Array<() => unknown>,
  options: { foreignKeys?: boolean } = {},
): Promise<EngineRemote> {
  if (engine === "postgres" || engine === "mysql") {
    const db = engine === "postgres" ? await createPgDb() : await createMysqlDb();
    cleanups.push(() => db.drop());
    const rows = async (sql: string) => Array.from((await db.sql.unsafe(sql).values()) as unknown[][]);
    return {
      engine,
      writer: engine,
      dialect: engine,
      connection: { url: db.url },
      exec: async (sql) => void (await db.sql.unsafe(sql)),
      rows,
      ints: async (sql) => (await rows(sql)).map((r) => r.map(Number)),
    };
  }
  const path = dir.file("remote.db");
  const db = new Database(path, { create: true });
  db.run("PRAGMA journal_mode = WAL");
  db.run("PRAGMA busy_timeout = 10000");
  cleanups.push(() => db.close());
  let connection: Record<string, unknown> =
    engine === "sqlite"
      ? { path, busy_timeout: 10_000, foreign_keys: options.foreignKeys ?? false }
      : { url: `file:${path}` };
  if (engine === "libsql-http") {
    const server = startHranaServer({ file: path, foreignKeys: options.foreignKeys });
    cleanups.push(() => server.stop());
    connection = { url: server.url };
  }
  const rows = async (sql: string) => db.query(sql).values() as unknown[][];
  return {
    engine,
    writer: engine === "sqlite" ? "sqlite" : "libsql",
    dialect: engine === "sqlite" ? "sqlite" : "libsql",
    connection,
    exec: async (sql) => void db.run(sql),
    rows,
    ints: async (sql) => (await rows(sql)).map((r) => r.map(Number)),
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
