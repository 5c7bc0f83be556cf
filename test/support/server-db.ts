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
  /** Closes `sql` and drops the database (PostgreSQL forces other sessions out); after `createDatabasesAhead` the DROP finishes in the background. */
  drop(): Promise<void>;
}

const SERVERS: Record<ServerEngine, { base: string; adminDb: string; port: number; user: string; quote(name: string): string; force: string }> = {
  postgres: { base: PG_BASE_URL, adminDb: "postgres", port: 5432, user: "postgres", quote: (n) => `"${n}"`, force: " WITH (FORCE)" },
  mysql: { base: MYSQL_BASE_URL, adminDb: "mysql", port: 3306, user: "root", quote: (n) => `\`${n}\``, force: "" },
};

const DEFAULT_PREFIX = "sqloutbox_t";

/** Runs one statement on the server's maintenance database, on a connection of its own. */
async function admin(engine: ServerEngine, statement: string): Promise<void> {
  const server = SERVERS[engine];
  const sql = new SQL(`${server.base}/${server.adminDb}`, { max: 1 });
  try {
    await sql.unsafe(statement);
  } finally {
    await sql.close();
  }
}

async function createNamed(engine: ServerEngine, prefix: string): Promise<string> {
  const name = `${prefix}_${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
  await admin(engine, `CREATE DATABASE ${SERVERS[engine].quote(name)}`);
  return name;
}

const dropStatement = (engine: ServerEngine, name: string) => `DROP DATABASE IF EXISTS ${SERVERS[engine].quote(name)}${SERVERS[engine].force}`;

// PostgreSQL takes ~0.15 s to create a database and ~0.1 s to drop it, half of a short test's
// time. After `createDatabasesAhead()` (test/support/preload.ts, for `bun test`) each engine's
// next database is created while the current test runs, and `drop()` leaves the DROP running;
// `settleServerDbs()`, after the last test, waits for those and drops the spares.
let ahead = false;
const spares = new Map<ServerEngine, Promise<string>>();
const dropping = new Set<Promise<void>>();

/** From now on, create each engine's next database (default prefix) ahead of the call that takes it, and drop in the background. */
export function createDatabasesAhead(): void {
  ahead = true;
}

/** Waits for the drops under way and drops the databases created ahead and never taken. */
export async function settleServerDbs(): Promise<void> {
  const left = [...spares.entries()];
  spares.clear();
  for (const [engine, spare] of left) {
    const name = await spare.catch(() => null);
    if (name) await admin(engine, dropStatement(engine, name));
  }
  await Promise.all(dropping);
}

/** A fresh database name: the spare made ahead (a new spare starts at once), or made now. */
function freshName(engine: ServerEngine, prefix: string): Promise<string> {
  if (!ahead || prefix !== DEFAULT_PREFIX) return createNamed(engine, prefix);
  const name = spares.get(engine) ?? createNamed(engine, prefix);
  const next = createNamed(engine, prefix);
  next.catch(() => {}); // a failure shows when the spare is taken
  spares.set(engine, next);
  return name;
}

/** Creates a database named `<prefix>_<random>` through the server's maintenance database; `drop()` it after. */
export async function createServerDb(engine: ServerEngine, prefix = DEFAULT_PREFIX): Promise<ServerDb> {
  const server = SERVERS[engine];
  const name = await freshName(engine, prefix);
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
      const dropped = admin(engine, dropStatement(engine, name));
      if (!ahead) return dropped;
      const done = dropped.catch((error: Error) => console.error(`test database ${name} was not dropped: ${error.message}`));
      dropping.add(done);
      void done.finally(() => dropping.delete(done));
    },
  };
}

/** A fresh PostgreSQL database (`createServerDb("postgres", prefix)`). */
export const createPgDb = (prefix?: string): Promise<ServerDb> => createServerDb("postgres", prefix);
/** A fresh MariaDB database (`createServerDb("mysql", prefix)`). */
export const createMysqlDb = (prefix?: string): Promise<ServerDb> => createServerDb("mysql", prefix);
