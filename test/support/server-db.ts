// A throwaway database on the PostgreSQL or MariaDB server of this machine (DEVELOPERS.md), one per
// test or suite: created under a random name, dropped after.
import { SQL } from "bun";

/** Where the test PostgreSQL server lives (trust auth); override with SQLOUTBOX_TEST_PG. */
export const PG_BASE_URL = process.env.SQLOUTBOX_TEST_PG ?? "postgres://postgres@127.0.0.1:5432";
/** Where the test MariaDB server lives (root, empty password); override with SQLOUTBOX_TEST_MYSQL. */
export const MYSQL_BASE_URL = process.env.SQLOUTBOX_TEST_MYSQL ?? "mysql://root@127.0.0.1:3306";

/** The two server engines the tests run against, by their writer names. */
export type ServerEngine = "postgres" | "mysql";

/** A fresh database on a server. */
export interface ServerDb {
  name: string;
  /** Connection URL of the fresh database (no password). */
  url: string;
  /** Host/port/user of the server, for host-style connection tables. */
  host: string;
  port: number;
  user: string;
  /** A small independent client on the fresh database for setup and assertions. */
  sql: SQL;
  /** Closes `sql` and drops the database (PostgreSQL forces other sessions out). */
  drop(): Promise<void>;
}

const SERVERS: Record<ServerEngine, { base: string; adminDb: string; port: number; user: string; quote(name: string): string; force: string }> = {
  postgres: { base: PG_BASE_URL, adminDb: "postgres", port: 5432, user: "postgres", quote: (n) => `"${n}"`, force: " WITH (FORCE)" },
  mysql: { base: MYSQL_BASE_URL, adminDb: "mysql", port: 3306, user: "root", quote: (n) => `\`${n}\``, force: "" },
};

/** Creates a database named `<prefix>_<random>` through the server's maintenance database; `drop()` it after. */
export async function createServerDb(engine: ServerEngine, prefix = "sqloutbox_t"): Promise<ServerDb> {
  const server = SERVERS[engine];
  const name = `${prefix}_${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
  const admin = async (statement: string) => {
    const sql = new SQL(`${server.base}/${server.adminDb}`, { max: 1 });
    try {
      await sql.unsafe(statement);
    } finally {
      await sql.close();
    }
  };
  await admin(`CREATE DATABASE ${server.quote(name)}`);
  const base = new URL(server.base);
  const url = `${server.base}/${name}`;
  const sql = new SQL(url, { max: 2 });
  return {
    name,
    url,
    host: base.hostname,
    port: Number(base.port || server.port),
    user: decodeURIComponent(base.username || server.user),
    sql,
    async drop() {
      await sql.close();
      await admin(`DROP DATABASE IF EXISTS ${server.quote(name)}${server.force}`);
    },
  };
}

/** A fresh PostgreSQL database (`createServerDb("postgres", prefix)`). */
export const createPgDb = (prefix?: string): Promise<ServerDb> => createServerDb("postgres", prefix);
/** A fresh MariaDB database (`createServerDb("mysql", prefix)`). */
export const createMysqlDb = (prefix?: string): Promise<ServerDb> => createServerDb("mysql", prefix);
