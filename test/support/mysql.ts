import { SQL } from "bun";

/** Where the test MariaDB server lives (root, empty password); override with SQLOUTBOX_TEST_MYSQL. */
export const MYSQL_BASE_URL = process.env.SQLOUTBOX_TEST_MYSQL ?? "mysql://root@127.0.0.1:3306";

/** A fresh MariaDB/MySQL database for one test or suite. */
export interface MysqlTestDb {
  name: string;
  /** Connection URL of the fresh database (empty password). */
  url: string;
  host: string;
  port: number;
  user: string;
  /** A small independent client on the fresh database for setup and assertions. */
  sql: SQL;
  /** Closes `sql` and drops the database. */
  drop(): Promise<void>;
}

/** Creates a database with a random name (via the server's default connection); `drop()` it after. */
export async function createMysqlDb(prefix = "sqloutbox_t"): Promise<MysqlTestDb> {
  const name = `${prefix}_${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
  const admin = new SQL(`${MYSQL_BASE_URL}/mysql`, { max: 1 });
  try {
    await admin.unsafe(`CREATE DATABASE \`${name}\``);
  } finally {
    await admin.close();
  }
  const base = new URL(MYSQL_BASE_URL);
  const url = `${MYSQL_BASE_URL}/${name}`;
  const sql = new SQL(url, { max: 2 });
  return {
    name,
    url,
    host: base.hostname,
    port: Number(base.port || 3306),
    user: decodeURIComponent(base.username || "root"),
    sql,
    async drop() {
      await sql.close();
      const admin = new SQL(`${MYSQL_BASE_URL}/mysql`, { max: 1 });
      try {
        await admin.unsafe(`DROP DATABASE IF EXISTS \`${name}\``);
      } finally {
        await admin.close();
      }
    },
  };
}
