// A database per tenant (SPEC §4c), `bun run bench:tenants [sqlite|postgres|memory …] [--quick]`: one
// tenant template target against the same rows into one database. Each backlog is written first,
// untimed, by this process (one push a row, as an application pushes, `{ tenant }` on each; row n
// of a tenant carries n); each drain runs in a process of its own (this script, --drain-child) so
// its descriptors and memory are its own, timed from start() until nothing is pending — or until
// DRAIN_CAP_S, so a slow drain still ends in minutes: it is then stopped (what is in flight lands)
// and `complete` is false. Rates are of what landed, counted in the remote databases. One JSON line each:
// {"bench":"tenants","target":"sqlite","case":"interleaved"|"sorted"|"single","tenants":…,"rows":…,"rows_per_s":…,
//  "complete":…,"exactly_once_in_order":…,"tenant_opens":…,"peak_open_tenants":…,"peak_fds":…,"peak_tenant_fds":…,"peak_rss_mb":…}
//   SQLITE_TENANTS tenants × SQLITE_ROWS rows into SQLite files `remote/{tenant}.db` (each made with
//   the table beforehand), max_open_tenants = MAX_OPEN: `interleaved`, a seeded random tenant per
//   push; `sorted`, every row of one tenant, then the next's. `single`: the same rows (interleaved)
//   into ONE SQLite file, a plain target (its one file counts as a tenant's in peak_tenant_fds).
//   exactly_once_in_order: every tenant's rows in its own database (single: in the one file) are
//   1…k in landing order, once each, nothing else, and k is all of them when complete.
//   tenant_opens: tenant databases the drain opened (again after a close, too); peak_open_tenants:
//   the drain's own count; peak_fds: every descriptor of the drain process, sampled every 10 ms;
//   peak_tenant_fds: those on the tenants' files (a SQLite file open in WAL mode takes three: the
//   database, its WAL and its index); peak_rss_mb: the drain process's.
// {"bench":"tenants-ratio","target":"sqlite"|"postgres","case":…,"tenants_vs_single":…}   the
//   template's rows/s over the single target's (target: ≥ 0.5 on SQLite).
// {"bench":"tenants","target":"postgres","case":"interleaved"|"single",…}   PG_TENANTS databases
//   `sqloutbox_bench_t<N>` × PG_ROWS rows (a seeded random tenant per push), made beforehand and
//   dropped after (and before: what a run killed early left), against the same rows into one
//   database, `sqloutbox_bench_single`.
// {"bench":"tenants-memory","tenants":…,"rows":…,"rows_per_s":…,"complete":…,"exactly_once_in_order":…,
//  "tenant_opens":…,"peak_open_tenants":…,"peak_fds":…,"peak_tenant_fds":…,"peak_rss_mb":…}
//   MEMORY_TENANTS[i] tenants × MEMORY_ROWS rows each on SQLite files (interleaved), max_open_tenants
//   = MAX_OPEN: descriptors and memory must not grow with the tenant count. Then
// {"bench":"tenants-memory-ratio","fds_vs_first":…,"rss_vs_first":…}   the last count's over the first's.
// --quick: a tenth of the sizes (a run of a minute or two that still means something); BENCH_SMOKE=1: tiny.
import { Database } from "bun:sqlite";
import fs from "node:fs";
import path from "node:path";
import { SQL } from "bun";
import { defineConfig } from "../src/config/define.ts";
import { createWriters } from "../src/config/writers.ts";
import { OutboxSyncService } from "../src/drain/service.ts";
import { ledgerDdl } from "../src/sql/ledger.ts";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { PG_BASE_URL } from "../test/support/server-db.ts";
import { makeTempDir } from "../test/support/tmp.ts";
import { benchLogger, sized } from "./support/smoke.ts";

const QUICK = process.argv.includes("--quick");
/** A size: `full`, a tenth of it with --quick, `smoke` in smoke mode. */
const size = (full: number, smoke: number) => sized(QUICK ? Math.max(smoke, Math.round(full / 10)) : full, smoke);

const MAX_OPEN = 64;
const SQLITE_TENANTS = size(1_000, 100);
const SQLITE_ROWS = sized(100, 3);
const PG_TENANTS = sized(20, 3);
const PG_ROWS = size(5_000, 50);
const MEMORY_TENANTS = [size(1_000, 100), size(10_000, 200)];
const MEMORY_ROWS = sized(10, 1);
/** A drain still busy after this long is stopped and measured on what landed. */
const DRAIN_CAP_S = sized(QUICK ? 30 : 120, 20);

const TABLE = "ev";
const INSERT = "INSERT INTO ev (t, n) VALUES (?, ?)";
const SQLITE_SCHEMA = "CREATE TABLE ev (pos INTEGER PRIMARY KEY, t TEXT NOT NULL, n INTEGER NOT NULL)";
const PG_SCHEMA = "CREATE TABLE ev (pos bigserial PRIMARY KEY, t text NOT NULL, n integer NOT NULL)";
const PG_PREFIX = "sqloutbox_bench_";

const round = (x: number, digits = 2) => Math.round(x * 10 ** digits) / 10 ** digits;
const tenantName = (i: number) => `t${i}`;

/** A little PRNG, so every run pushes the same sequence of tenants. */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => (s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32;
}

/** The order rows are pushed in, one tenant index a row, each tenant `rows` times: shuffled (seeded) or by tenant. */
function pushOrder(tenants: number, rows: number, order: "interleaved" | "sorted"): Uint32Array {
  const out = new Uint32Array(tenants * rows);
  for (let i = 0; i < out.length; i++) out[i] = order === "sorted" ? Math.floor(i / rows) : i % tenants;
  if (order === "sorted") return out;
  const next = rng(tenants * 7919 + rows);
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

/** The backlog: one push a row, `{ tenant }` on each (none for a single target), row n of a tenant carrying n. */
function writeBacklog(queueDir: string, tenants: number, order: Uint32Array, tenanted: boolean): void {
  const mw = new SQLMiddleware({ dbDir: queueDir });
  const counts = new Uint32Array(tenants);
  for (const i of order) {
    const t = tenantName(i);
    mw.push(TABLE, INSERT, [t, ++counts[i]!], tenanted ? { tenant: t } : undefined);
  }
  closeSharedOutboxes();
}

// ── the drain, in a process of its own ────────────────────────────────────────────────────────

interface DrainJob {
  queueDir: string;
  writer: "sqlite" | "postgres";
  connection: Record<string, string>;
  /** Where the tenants' files are (their descriptors are counted apart); null on a server. */
  remoteDir: string | null;
  template: boolean;
  /** DRAIN_CAP_S of the parent (--quick is its argument). */
  capSeconds: number;
}

interface Drained {
  seconds: number;
  /** False when the drain was stopped at DRAIN_CAP_S with rows still pending. */
  complete: boolean;
  tenant_opens: number;
  peak_open_tenants: number;
  peak_fds: number;
  peak_tenant_fds: number;
  peak_rss_mb: number;
}

async function drainChild(job: DrainJob): Promise<void> {
  const config = defineConfig({
    app: {
      bench: {
        dbDir: job.queueDir,
        batchSize: 500,
        flushInterval: 0.005,
        tableFlushThreshold: 1,
        tableMaxWait: 0,
        db: {
          remote: {
            writer: job.writer,
            connection: job.connection,
            tables: [TABLE],
            ...(job.template ? { maxOpenTenants: MAX_OPEN } : {}),
          },
        },
      },
    },
  });
  const svc = new OutboxSyncService(config, await createWriters(config), { logger: benchLogger });
  const peak = { fds: 0, tenantFds: 0, open: 0, rss: 0 };
  const sample = () => {
    let fds = 0;
    let tenantFds = 0;
    for (const fd of fs.readdirSync("/proc/self/fd")) {
      fds += 1;
      if (job.remoteDir === null) continue;
      try {
        if (fs.readlinkSync(`/proc/self/fd/${fd}`).startsWith(job.remoteDir)) tenantFds += 1;
      } catch {} // closed meanwhile
    }
    peak.fds = Math.max(peak.fds, fds);
    peak.tenantFds = Math.max(peak.tenantFds, tenantFds);
    peak.open = Math.max(peak.open, svc.views()[0]?.tenants?.open ?? 0);
    peak.rss = Math.max(peak.rss, process.memoryUsage().rss);
  };
  const sampler = setInterval(sample, 10);
  const start = performance.now();
  await svc.start();
  const capAt = start + job.capSeconds * 1000;
  while (svc.totalPending() > 0 && performance.now() < capAt) await Bun.sleep(5);
  const complete = svc.totalPending() === 0;
  sample();
  const opens = svc.views()[0]?.tenants?.opened ?? 0;
  await svc.stop(); // at the cap, the batches in flight land first: they count, so does the time
  const seconds = (performance.now() - start) / 1000;
  clearInterval(sampler);
  const out: Drained = {
    seconds,
    complete,
    tenant_opens: opens,
    peak_open_tenants: peak.open,
    peak_fds: peak.fds,
    peak_tenant_fds: peak.tenantFds,
    peak_rss_mb: Math.round(peak.rss / 1048576),
  };
  console.log(JSON.stringify(out));
}

async function drain(job: Omit<DrainJob, "capSeconds">): Promise<Drained> {
  const given: DrainJob = { ...job, capSeconds: DRAIN_CAP_S };
  const child = Bun.spawn(["bun", import.meta.path, "--drain-child", JSON.stringify(given)], {
    stdout: "pipe",
    stderr: "inherit",
    env: process.env,
  });
  const [out, code] = await Promise.all([new Response(child.stdout).text(), child.exited]);
  if (code !== 0) throw new Error(`the drain process exited ${code}: ${out}`);
  return JSON.parse(out.trim().split("\n").at(-1)!) as Drained;
}

// ── what landed, per tenant ───────────────────────────────────────────────────────────────────

type Landed = Array<[string, number]>;

/** What landed and whether exactly once in order: each tenant's rows 1…k, nothing else, k = `rows` when `complete`. */
function check(tenants: number, rows: number, complete: boolean, landedOf: (tenant: string) => Landed) {
  const problems: string[] = [];
  let landed = 0;
  for (let i = 0; i < tenants; i++) {
    const tenant = tenantName(i);
    const got = landedOf(tenant);
    landed += got.length;
    const wrong = got.findIndex(([t, n], at) => t !== tenant || n !== at + 1);
    if (wrong >= 0) problems.push(`${tenant}: row ${wrong + 1} is [${got[wrong]}]`);
    else if (got.length > rows || (complete && got.length < rows))
      problems.push(`${tenant}: ${got.length} rows landed of ${rows}`);
  }
  if (problems.length > 0)
    console.error(`tenants: ${problems.length} tenant(s) wrong, e.g. ${problems.slice(0, 5).join("; ")}`);
  return { landed, exact: problems.length === 0 };
}

/** Rows `[t, n]` grouped by tenant, landing order kept. */
function byTenant(all: Landed): Map<string, Landed> {
  const out = new Map<string, Landed>();
  for (const row of all) {
    const list = out.get(row[0]) ?? [];
    list.push(row);
    out.set(row[0], list);
  }
  return out;
}

interface Measured extends Drained {
  tenants: number;
  rows: number;
  landed: number;
  exactly_once_in_order: boolean;
}

const rate = (m: Measured) => m.landed / m.seconds;

/** Measures one drain of `tenants` × `rows`, its rows read back by `landedOf` (given the drain's figures). */
async function measure(
  tenants: number,
  rows: number,
  job: Omit<DrainJob, "capSeconds">,
  landedOf: () => Promise<(tenant: string) => Landed>,
): Promise<Measured> {
  const drained = await drain(job);
  const { landed, exact } = check(tenants, rows, drained.complete, await landedOf());
  if (!exact) process.exitCode = 1;
  return { ...drained, tenants, rows: tenants * rows, landed, exactly_once_in_order: exact };
}

function figures(m: Measured) {
  return {
    tenants: m.tenants,
    rows: m.rows,
    rows_per_s: Math.round(rate(m)),
    complete: m.complete,
    exactly_once_in_order: m.exactly_once_in_order,
    tenant_opens: m.tenant_opens,
    peak_open_tenants: m.peak_open_tenants,
    peak_fds: m.peak_fds,
    peak_tenant_fds: m.peak_tenant_fds,
    peak_rss_mb: m.peak_rss_mb,
  };
}

/** The template's rate over the single target's, and over the engine's limit for a template when measured. */
function ratioLine(target: string, c: string, tenants: Measured, single: Measured, limit?: number): void {
  const vsLimit = limit === undefined ? {} : { tenants_vs_limit: round(rate(tenants) / limit, 3) };
  console.log(
    JSON.stringify({
      bench: "tenants-ratio",
      target,
      case: c,
      tenants_vs_single: round(rate(tenants) / rate(single), 3),
      ...vsLimit,
    }),
  );
}

// ── SQLite files ──────────────────────────────────────────────────────────────────────────────

const scratch = makeTempDir("sqloutbox-bench-tenants-");
let fresh = 0;
function freshDir(): string {
  const dir = path.join(scratch.path, `${fresh++}`);
  fs.mkdirSync(dir);
  return dir;
}

/** An empty SQLite file with the table, in WAL mode, copied for every tenant (a copy is faster than making each). */
function schemaFile(): string {
  const file = path.join(scratch.path, "schema.db");
  if (!fs.existsSync(file)) {
    const db = new Database(file, { create: true });
    db.run("PRAGMA journal_mode = WAL");
    db.run(SQLITE_SCHEMA);
    db.close(); // checkpointed: the file alone is the database
  }
  return file;
}

/** Fresh tenant files (or the one file, `all`) in `remoteDir`. */
function remoteFiles(remoteDir: string, names: string[]): void {
  fs.mkdirSync(remoteDir);
  for (const name of names) fs.copyFileSync(schemaFile(), path.join(remoteDir, `${name}.db`));
}

function sqliteRows(file: string): Landed {
  if (!fs.existsSync(file)) return [];
  const db = new Database(file, { readonly: true });
  try {
    return db.query("SELECT t, n FROM ev ORDER BY pos").values() as Landed;
  } finally {
    db.close();
  }
}

type SqliteCase = "interleaved" | "sorted" | "single";

/** `tenants` × `rows` pushed in the case's order, drained into a template over SQLite files (`single`: one file). */
async function sqliteCase(c: SqliteCase, tenants: number, rows: number): Promise<Measured> {
  const dir = freshDir();
  const remoteDir = path.join(dir, "remote");
  const template = c !== "single";
  remoteFiles(remoteDir, template ? Array.from({ length: tenants }, (_, i) => tenantName(i)) : ["all"]);
  const queueDir = path.join(dir, "queue");
  writeBacklog(queueDir, tenants, pushOrder(tenants, rows, c === "sorted" ? "sorted" : "interleaved"), template);
  try {
    return await measure(
      tenants,
      rows,
      {
        queueDir,
        writer: "sqlite",
        connection: { path: path.join(remoteDir, template ? "{tenant}.db" : "all.db") },
        remoteDir: `${remoteDir}/`,
        template,
      },
      async () => {
        if (template) return (t) => sqliteRows(path.join(remoteDir, `${t}.db`));
        const all = byTenant(sqliteRows(path.join(remoteDir, "all.db")));
        return (t) => all.get(t) ?? [];
      },
    );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The most SQLite files take on this machine, with no drain: for a template, each tenant's file
 * opened, its ledger made and its rows written with the ledger's row in ONE transaction (the least
 * a tenant costs: one commit), closed; for one file, 500 rows and the ledger's row a transaction.
 * Rows/s over the same rows.
 */
function sqliteLimit(template: boolean, tenants: number, rows: number): number {
  const dir = freshDir();
  const remoteDir = path.join(dir, "remote");
  const names = template ? Array.from({ length: tenants }, (_, i) => tenantName(i)) : ["all"];
  remoteFiles(remoteDir, names);
  const batches: Array<{ name: string; rows: Landed }> = [];
  if (template)
    for (const name of names) batches.push({ name, rows: Array.from({ length: rows }, (_, n) => [name, n + 1]) });
  else
    for (let at = 0; at < tenants * rows; at += 500)
      batches.push({
        name: "all",
        rows: Array.from({ length: Math.min(500, tenants * rows - at) }, (_, i) => [tenantName((at + i) % tenants), 1]),
      });
  const start = performance.now();
  let db: Database | null = null;
  for (const [b, batch] of batches.entries()) {
    if (db === null) {
      db = new Database(path.join(remoteDir, `${batch.name}.db`));
      db.run("PRAGMA busy_timeout = 5000");
      db.run("PRAGMA journal_mode = WAL");
    }
    db.run("BEGIN IMMEDIATE");
    db.run(ledgerDdl("sqloutbox_ledger", "sqlite"));
    const insert = db.query(INSERT);
    const ledger = db.query(
      "INSERT INTO sqloutbox_ledger (origin, namespace, through, updated_at) VALUES ('o', 'ev', ?, strftime('%Y-%m-%dT%H:%M:%fZ')) ON CONFLICT (origin, namespace) DO UPDATE SET through = excluded.through, updated_at = excluded.updated_at",
    );
    for (const [t, n] of batch.rows) insert.run(t, n);
    ledger.run(b);
    db.run("COMMIT");
    if (template) {
      db.close();
      db = null;
    }
  }
  db?.close();
  const seconds = (performance.now() - start) / 1000;
  fs.rmSync(dir, { recursive: true, force: true });
  return (tenants * rows) / seconds;
}

async function sqlite(): Promise<void> {
  const got = new Map<SqliteCase, Measured>();
  for (const c of ["single", "interleaved", "sorted"] as const) {
    const m = await sqliteCase(c, SQLITE_TENANTS, SQLITE_ROWS);
    got.set(c, m);
    console.log(JSON.stringify({ bench: "tenants", target: "sqlite", case: c, ...figures(m) }));
  }
  const limits = {
    template: sqliteLimit(true, SQLITE_TENANTS, SQLITE_ROWS),
    single: sqliteLimit(false, SQLITE_TENANTS, SQLITE_ROWS),
  };
  for (const [c, limit] of Object.entries(limits))
    console.log(
      JSON.stringify({
        bench: "tenants-limit",
        target: "sqlite",
        case: c,
        rows: SQLITE_TENANTS * SQLITE_ROWS,
        rows_per_s: Math.round(limit),
      }),
    );
  for (const c of ["interleaved", "sorted"] as const)
    ratioLine("sqlite", c, got.get(c)!, got.get("single")!, limits.template);
  console.log(
    JSON.stringify({
      bench: "tenants-limit-ratio",
      target: "sqlite",
      template_vs_single: round(limits.template / limits.single, 3),
    }),
  );
}

// ── PostgreSQL databases ──────────────────────────────────────────────────────────────────────

/** Runs `fn` with a one-connection client on database `name`, closed after. */
async function onPg<T>(name: string, fn: (sql: SQL) => Promise<T>): Promise<T> {
  const sql = new SQL(`${PG_BASE_URL}/${name}`, { max: 1 });
  try {
    return await fn(sql);
  } finally {
    await sql.close();
  }
}

const dropPg = (name: string) => onPg("postgres", (sql) => sql.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));

async function pgCase(c: "interleaved" | "single"): Promise<Measured> {
  const dir = freshDir();
  const template = c !== "single";
  const names = template
    ? Array.from({ length: PG_TENANTS }, (_, i) => PG_PREFIX + tenantName(i))
    : [`${PG_PREFIX}single`];
  try {
    for (const name of names) {
      await dropPg(name); // what a run killed before its end left
      await onPg("postgres", (sql) => sql.unsafe(`CREATE DATABASE ${name}`));
      await onPg(name, (sql) => sql.unsafe(PG_SCHEMA));
    }
    const queueDir = path.join(dir, "queue");
    writeBacklog(queueDir, PG_TENANTS, pushOrder(PG_TENANTS, PG_ROWS, "interleaved"), template);
    const rowsOf = (name: string) =>
      onPg(name, async (sql) =>
        ((await sql.unsafe("SELECT t, n FROM ev ORDER BY pos").values()) as unknown[][]).map(
          ([t, n]) => [String(t), Number(n)] as [string, number],
        ),
      );
    return await measure(
      PG_TENANTS,
      PG_ROWS,
      {
        queueDir,
        writer: "postgres",
        connection: { url: `${PG_BASE_URL}/${PG_PREFIX}${template ? "{tenant}" : "single"}` },
        remoteDir: null,
        template,
      },
      async () => {
        const landed = new Map<string, Landed>();
        if (template) for (let i = 0; i < PG_TENANTS; i++) landed.set(tenantName(i), await rowsOf(names[i]!));
        else for (const [t, list] of byTenant(await rowsOf(names[0]!))) landed.set(t, list);
        return (t) => landed.get(t) ?? [];
      },
    );
  } finally {
    for (const name of names) await dropPg(name);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

async function postgres(): Promise<void> {
  const single = await pgCase("single");
  console.log(JSON.stringify({ bench: "tenants", target: "postgres", case: "single", ...figures(single) }));
  const tenants = await pgCase("interleaved");
  console.log(JSON.stringify({ bench: "tenants", target: "postgres", case: "interleaved", ...figures(tenants) }));
  ratioLine("postgres", "interleaved", tenants, single);
}

// ── descriptors and memory against the tenant count ───────────────────────────────────────────

async function memory(): Promise<void> {
  const got: Measured[] = [];
  for (const tenants of MEMORY_TENANTS) {
    const m = await sqliteCase("interleaved", tenants, MEMORY_ROWS);
    got.push(m);
    console.log(JSON.stringify({ bench: "tenants-memory", ...figures(m) }));
  }
  const [first, last] = [got[0]!, got.at(-1)!];
  console.log(
    JSON.stringify({
      bench: "tenants-memory-ratio",
      fds_vs_first: round(last.peak_fds / first.peak_fds),
      rss_vs_first: round(last.peak_rss_mb / first.peak_rss_mb),
    }),
  );
}

if (process.argv[2] === "--drain-child") {
  await drainChild(JSON.parse(process.argv[3]!) as DrainJob);
} else {
  // Arguments pick lines: sqlite postgres memory (none: all).
  const only = process.argv.slice(2).filter((a) => !a.startsWith("--"));
  const wanted = (name: string) => only.length === 0 || only.includes(name);
  try {
    if (wanted("sqlite")) await sqlite();
    if (wanted("postgres")) await postgres();
    if (wanted("memory")) await memory();
  } finally {
    scratch.cleanup();
  }
}
