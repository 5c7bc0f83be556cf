// A throwaway database on the PostgreSQL or MariaDB server of this machine (DEVELOPERS.md), one per
// test or suite: created under a random name, dropped after.
import { SQL } from "bun";
import { maskUrl } from "../../src/masking.ts";
import { withTimeout } from "../../src/timeout.ts";

/** Where the test PostgreSQL server lives (trust auth); override with SQLOUTBOX_TEST_PG. */
export const PG_BASE_URL = process.env.SQLOUTBOX_TEST_PG ?? "postgres://postgres@127.0.0.1:5432";
/** Where the test MariaDB server lives (root, empty password); override with SQLOUTBOX_TEST_MYSQL. */
export const MYSQL_BASE_URL = process.env.SQLOUTBOX_TEST_MYSQL ?? "mysql://root@127.0.0.1:3306";

/** The two server engines the tests run against, by their writer names, in the order messages name them. */
export const SERVER_ENGINES = ["postgres", "mysql"] as const;
export type ServerEngine = (typeof SERVER_ENGINES)[number];

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

interface Server {
  /** What messages call it. */
  title: string;
  base: string;
  /** The variable that moves it elsewhere. */
  override: string;
  /** How to start it on this machine (what .ci/run does). */
  start: string;
  adminDb: string;
  port: number;
  user: string;
  quote(name: string): string;
  force: string;
}

const SERVERS: Record<ServerEngine, Server> = {
  postgres: {
    title: "PostgreSQL",
    base: PG_BASE_URL,
    override: "SQLOUTBOX_TEST_PG",
    start: "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start",
    adminDb: "postgres",
    port: 5432,
    user: "postgres",
    quote: (n) => `"${n}"`,
    force: " WITH (FORCE)",
  },
  mysql: {
    title: "MariaDB",
    base: MYSQL_BASE_URL,
    override: "SQLOUTBOX_TEST_MYSQL",
    start: "start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd",
    adminDb: "mysql",
    port: 3306,
    user: "root",
    quote: (n) => `\`${n}\``,
    force: "",
  },
};

/** A server that answers does so in milliseconds; one that hangs is called down after this long. */
const PROBE_TIMEOUT_MS = 3_000;
const probes = new Map<ServerEngine, Promise<string | null>>();

/**
 * Why the test server of `engine` cannot be used — one line naming it, where it was looked for and
 * how to start it — or null when it answers. Asked once per run (test/support/preload.ts asks for
 * both at the start); later calls return the same answer.
 */
export function serverProblem(engine: ServerEngine): Promise<string | null> {
  let probe = probes.get(engine);
  if (probe === undefined) probes.set(engine, (probe = probeServer(engine)));
  return probe;
}

async function probeServer(engine: ServerEngine): Promise<string | null> {
  const server = SERVERS[engine];
  const sql = new SQL(`${server.base}/${server.adminDb}`, { max: 1 });
  try {
    await withTimeout(sql.unsafe("SELECT 1"), PROBE_TIMEOUT_MS, () => {
      throw new Error(`no answer within ${PROBE_TIMEOUT_MS} ms`);
    });
    return null;
  } catch (error) {
    const why = (error as Error)?.message ?? String(error);
    return `${server.title} is down at ${maskUrl(server.base)} (${why}): start it with \`${server.start}\` (or point ${server.override} at one); every test that needs it fails until it is up, and CI requires it`;
  } finally {
    void sql.close().catch(() => {});
  }
}

/** Fails the calling test at once, with the probe's line, when the server of `engine` is down (rather than timing out later). */
export async function requireServer(engine: ServerEngine): Promise<void> {
  const problem = await serverProblem(engine);
  if (problem !== null) throw new Error(problem);
}

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

const dropStatement = (engine: ServerEngine, name: string) =>
  `DROP DATABASE IF EXISTS ${SERVERS[engine].quote(name)}${SERVERS[engine].force}`;

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

/** Creates a database named `<prefix>_<random>` through the server's maintenance database; `drop()` it after. Throws the probe's line when the server is down (`requireServer`). */
export async function createServerDb(engine: ServerEngine, prefix = DEFAULT_PREFIX): Promise<ServerDb> {
  await requireServer(engine);
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
      const done = dropped.catch((error: Error) =>
        console.error(`test database ${name} was not dropped: ${error.message}`),
      );
      dropping.add(done);
      void done.finally(() => dropping.delete(done));
    },
  };
}

/** A fresh PostgreSQL database (`createServerDb("postgres", prefix)`). */
export const createPgDb = (prefix?: string): Promise<ServerDb> => createServerDb("postgres", prefix);
/** A fresh MariaDB database (`createServerDb("mysql", prefix)`). */
export const createMysqlDb = (prefix?: string): Promise<ServerDb> => createServerDb("mysql", prefix);
