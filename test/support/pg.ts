import { SQL } from "bun";

/** Where the test PostgreSQL server lives (trust auth); override with SQLOUTBOX_TEST_PG. */
export const PG_BASE_URL = process.env.SQLOUTBOX_TEST_PG ?? "postgres://postgres@127.0.0.1:5432";

/** A fresh PostgreSQL database for one test or suite. */
export interface PgTestDb {
  name: string;
  /** Connection URL of the fresh database (no password: trust auth). */
  url: string;
  /** Host/port/user/database of the fresh database, for host-style connection tables. */
  host: string;
  port: number;
  user: string;
  /** A small independent client on the fresh database for setup and assertions. */
  sql: SQL;
  /** Closes `sql` and drops the database (forcing other sessions out). */
  drop(): Promise<void>;
}

/** Creates a database with a random name via the `postgres` maintenance db; `drop()` it after. */
export async function createPgDb(prefix = "sqloutbox_t"): Promise<PgTestDb> {
  const name = `${prefix}_${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
  const admin = new SQL(`${PG_BASE_URL}/postgres`, { max: 1 });
  try {
    await admin.unsafe(`CREATE DATABASE "${name}"`);
  } finally {
    await admin.close();
  }
  const base = new URL(PG_BASE_URL);
  const url = `${PG_BASE_URL}/${name}`;
  const sql = new SQL(url, { max: 2 });
  return {
    name,
    url,
    host: base.hostname,
    port: Number(base.port || 5432),
    user: decodeURIComponent(base.username || "postgres"),
    sql,
    async drop() {
      await sql.close();
      const admin = new SQL(`${PG_BASE_URL}/postgres`, { max: 1 });
      try {
        await admin.unsafe(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      } finally {
        await admin.close();
      }
    },
  };
}
