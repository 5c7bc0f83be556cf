// Drain throughput against the engine's own ingest limit, end-to-end latency, a fleet and large
// rows (`bun run bench:drain [null|sqlite|postgres|mysql|fleet|large|latency …]`). One JSON line each:
// {"bench":"drain","target":…,"mode":"ledger","rows":…,"rows_per_s":…,"peak_rss_mb":…}   100 000-row
//   backlog, 4 tables, batch_size 500, delivered through the ledger (the default); each drain runs
//   in its own process so peak RSS is the drain's own (the backlog is written by this parent first).
// {"bench":"limit","target":…,"form":…,"rows_per_s":…}   the same rows straight into the same
//   engine from one connection, 500 rows per transaction: multi-row VALUES and, for PostgreSQL,
//   INSERT … SELECT FROM unnest(arrays). Measured right after the drain, in the same run.
// {"bench":"ratio","target":…,"drain_vs_limit":…}   the drain over the best limit form.
// {"bench":"fleet","target":"postgres","drains":4,"rows":…,"rows_per_s":…}   four drain processes,
//   each with its own queue file (its own origin), into ONE PostgreSQL table; checked afterwards.
// {"bench":"large","target":"postgres","rows":…,"row_kb":64,"rows_per_s":…,"peak_rss_mb":…}   two
//   backlogs (128 MB and 384 MB of rows): the peak must not grow with the backlog.
// {"bench":"metrics","target":"postgres","off_rows_per_s":…,"on_rows_per_s":…,"on_vs_off":…}   the
//   same drain with the Prometheus metrics on and scraped every 100 ms, against off, alternated.
// {"bench":"tracing","target":…,"off_rows_per_s":…,"on_rows_per_s":…,"on_vs_off":…,"spans_exported":…,"spans_dropped":…}
//   the same drain with tracing on — every row pushed with its own sampled traceparent, spans
//   exported over OTLP/HTTP (protobuf) to a receiver in this parent process — against off (the same
//   traced backlog), alternated three times each: the medians; the span counts of the last run.
//   400 000 rows (100 000 drain in half a second, too short beside the SDK's one-time JIT cost);
//   each drain process first delivers 40 000 rows untimed, so both are warm: a drain runs for days.
// {"bench":"latency","target":…,"p50_ms":…,"p99_ms":…}   single events, flush_interval 5 ms,
//   threshold 1: enqueue → the remote transaction committed (the writer's promise resolved).
// The "null" target accepts everything instantly: its rate is the drain's own ceiling.
// {"bench":"floor","target":"null","rows_per_s":…}   the least any on-disk design must do for the
//   same backlog: each 500-row slice read with the drain's SELECT and deleted by range in one
//   commit, nothing else (no delivery log) — the most a drain could do on this machine; then
//   {"bench":"ratio","target":"null","drain_vs_floor":…}.
// {"bench":"drain"|"limit"|"ratio","target":"postgres"|"mysql","pinned":true,…}   `pinned`: the
//   same drain and limit lines against a private PostgreSQL cluster and a private MariaDB, each
//   started for the run in a temp directory on a free port and pinned to CPU 1 (taskset), with
//   this process, the drain and the limit's client pinned to CPU 0: the remote's work overlaps
//   the drain's as on a server whose database runs elsewhere. The servers are removed on exit.
// {"bench":"wan","target":"postgres"|"mysql","rtt_ms":…,"connections":1|2|4|8,"rows":…,"rows_per_s":…,"round_trips_per_batch":…,"vs_connections_1":…,
//  "steady_rows_per_s":…,"steady_round_trips_per_batch":…,"steady_vs_connections_1":…}
//   the same backlog drained through a TCP proxy in this process that delays every chunk by half
//   of rtt_ms each way (127.0.0.1 only; BENCH_RTT_MS, default 20, then 2): a remote across a long
//   link, the target's `connections` 1, 2, 4 and 8. round_trips_per_batch: the turns the proxy
//   counted (a client sending again after an answer) between the drain's first and last
//   writeBatch, over the batches. steady_*: the same from the moment the first fifth of the rows
//   was delivered (each new connection's first batches prepare their statements over the link).
//   batch_size: the drain's (500); then one connection with batch_size 2 000 (more rows per round
//   trip), its vs_batch_500 and steady_vs_batch_500 against the first line; then "lanes":8, from 1
//   and 2 connections: tables of 8 lanes, their rows over 64 keys, vs_connections_1 against the
//   first of the two.
// {"bench":"wan-limit","target":…,"rtt_ms":…,"connections":1|8,"form":"pipelined","rows_per_s":…,"round_trips_per_batch":…}
//   the engine through the same proxy from 1 and from 8 connections, the best the client allows:
//   transactions of the drain's batch (a multi-row INSERT of batch_size rows per table), BEGIN, the
//   INSERTs and COMMIT sent at once — right whatever the outcome only because these rows cannot
//   fail — each connection sending its share one after another. PostgreSQL: with the no-ops that
//   make Bun send past its pipeline window (as the writer does).
// {"bench":"wan-ratio","target":…,"rtt_ms":…,"connections":1|8,"drain_vs_limit":…,"steady_vs_limit":…}
//   the drain with that many connections (whole run, steady) over the engine from as many.
// {"bench":"latency","target":"postgres"|"mysql","rtt_ms":…,"p50_ms":…,"p99_ms":…,"p50_round_trips":…}
//   last in the wan mode: the latency line through the proxy (BENCH_RTT_MS), p50 over rtt_ms.
// Arguments pick lines: null sqlite postgres mysql fleet large metrics tracing latency pinned wan (none: all).
// Needs PostgreSQL on 127.0.0.1:5432 and MariaDB on 127.0.0.1:3306 (see README); `pinned` needs
// two CPUs, taskset, and the PostgreSQL (/usr/lib/postgresql/*/bin) and MariaDB server binaries.
import { Database } from "bun:sqlite";
import { SQL } from "bun";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { defineConfig } from "../src/config/define.ts";
import { OutboxSyncService } from "../src/drain/service.ts";
import { createDrainMetrics } from "../src/ops/metrics.ts";
import { traceSettings } from "../src/ops/tracing/settings.ts";
import { createTracing } from "../src/ops/tracing/tracing.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { QUEUE_ROW_COLUMNS } from "../src/outbox/rows.ts";
import { ledgerDdl } from "../src/sql/ledger.ts";
import { encodeArgs } from "../src/outbox/payload.ts";
import { createWriter } from "../src/writers/registry.ts";
import type { OutboxWriter, Statement, WriteOptions, WriteResult } from "../src/writers/writer.ts";
import { createMysqlDb, createPgDb } from "../test/support/server-db.ts";
import { startTcpProxy, throughProxy } from "../test/support/tcp-proxy.ts";
import { makeTempDir } from "../test/support/tmp.ts";
import { startMariadb, startPostgres, type PrivateServer } from "./private-servers.ts";
import { benchLogger, sized } from "./support/smoke.ts";

const TABLES = ["bench_a", "bench_b", "bench_c", "bench_d"];
/** The backlog of a throughput run: a multiple of the tables and of FLEET_DRAINS. */
const ROWS = sized(100_000, 400);
/** Rows per drain batch (batch_size) and per transaction of the limit runs. */
const CHUNK = sized(500, 50);
const LATENCY_EVENTS = sized(300, 30);
/** The first latency events, not counted: the JIT, the connections. */
const LATENCY_WARMUP = sized(20, 5);
/** The tracing runs' backlog: 100 000 rows drain in half a second, too short beside the SDK's one-time JIT cost (measured). */
const TRACE_ROWS = sized(400_000, 400);
/** Alternated off/on runs of the metrics and tracing costs, each figure their median. */
const COST_ROUNDS = sized(3, 1);
const FLEET_DRAINS = 4;
/** Two backlogs of large rows: peak RSS that does not grow with the backlog is bounded by batch_max_bytes. */
const LARGE_BACKLOGS = sized([2_000, 6_000], [8, 16]);
const LARGE_ROW_BYTES = 64 * 1024;
type Target = "sqlite" | "postgres" | "mysql" | "null";
type Row = [number, string, number, string];

/** Accepts everything instantly: what is left is the drain's own cost (read, decode, rewrite, settle). */
const nullWriter: OutboxWriter = {
  dialect: "postgres",
  writeBatch: async (stmts) => stmts.map(() => ({ ok: true as const, rowsAffected: 1 })),
};

const rowOf = (i: number, note = "a short note about this row"): Row => [i, `name-${i}`, i * 1.25, note];

function configFor(
  dbDir: string,
  writer: Target,
  connection: Record<string, unknown>,
  tables: Array<string | { name: string; lanes: number }>,
  tuning: Record<string, unknown>,
  connections = 1,
) {
  const target =
    writer === "null"
      ? { writer: "postgres" as const, connection: { url: "postgres://unused@127.0.0.1/x" } }
      : { writer, connection };
  return defineConfig({ app: { bench: { dbDir, ...tuning, db: { remote: { ...target, tables, connections } } } } });
}

const ddl = (t: string, target: Target) =>
  `CREATE TABLE ${t} (id BIGINT NOT NULL, name VARCHAR(64), amount ${target === "mysql" ? "DOUBLE" : "DOUBLE PRECISION"}, note ${target === "mysql" ? "LONGTEXT" : "TEXT"})`;

/** Creates the remote tables and returns the writer connection plus a client for the limit runs. */
async function remoteFor(target: Target, dir: string, tables = TABLES) {
  if (target === "null") return { connection: {}, sql: null, path: null, drop: async () => {} };
  if (target === "sqlite") {
    const path = `${dir}/remote.db`;
    const db = new Database(path, { create: true });
    db.run("PRAGMA journal_mode = WAL");
    for (const t of tables) db.run(ddl(t, target));
    db.close();
    return { connection: { path }, sql: null, path, drop: async () => {} };
  }
  const db = target === "postgres" ? await createPgDb("sqloutbox_bench") : await createMysqlDb("sqloutbox_bench");
  for (const t of tables) await db.sql.unsafe(ddl(t, target));
  return { connection: { url: db.url }, sql: db.sql, path: null, drop: () => db.drop() };
}

function fillBacklog(dbDir: string, tables: string[], rows: number, row = rowOf, traced = false, keys = 0): void {
  fs.mkdirSync(dbDir, { recursive: true });
  const perTable = rows / tables.length;
  for (const table of tables) {
    const q = new Outbox(`${dbDir}/${table}.db`, table);
    const tag = `INSERT INTO ${table} (id, name, amount, note) VALUES (?, ?, ?, ?)`;
    if (traced) {
      // Every row pushed alone, in a trace of its own (the worst case: one delivery span per row).
      const hex = (n: number, width: number) => n.toString(16).padStart(width, "0");
      for (let i = 0; i < perTable; i++) {
        const id = tables.indexOf(table) * perTable + i + 1;
        q.enqueue(tag, encodeArgs(row(i)), "", {
          traceparent: `00-${hex(id, 32)}-${hex(id, 16)}-01`,
          tracestate: null,
        });
      }
      q.close();
      continue;
    }
    // With `keys`: runs of KEY_RUN rows, each run of one key, the keys in turn.
    const run = keys > 0 ? KEY_RUN : 1000;
    for (let i = 0; i < perTable; i += run) {
      const key = keys > 0 ? `key-${(i / run) % keys}` : null;
      q.enqueueBatch(
        Array.from({ length: Math.min(run, perTable - i) }, (_, k) => ({ tag, payload: encodeArgs(row(i + k)) })),
        "",
        { grouped: false, trace: { traceparent: null, tracestate: null, key } },
      );
    }
    q.close();
  }
}

interface ChildJob {
  target: Target;
  dbDir: string;
  connection: Record<string, unknown>;
  tables: string[];
  /** Serve the drain's metrics and scrape them every 100 ms (ten times what Prometheus usually does). */
  metrics?: boolean;
  /** Export delivery spans to this OTLP/HTTP base URL. */
  tracing?: string;
  /** A backlog drained first, untimed, by the same process (its JIT warm, the tracing worker's too). */
  warmupDbDir?: string;
  /** Count the writer's batches and when the first began and the last ended (epoch ms). */
  countBatches?: boolean;
  /** The target's `connections` (default 1). */
  connections?: number;
  /** Also measure from the moment this many rows were delivered to the end (`steady`): each new connection's first batches prepare their statements. */
  steadyAfterRows?: number;
  /** The drain's batch_size (default CHUNK). */
  batchSize?: number;
  /** Each table's `lanes` (default 1). */
  lanes?: number;
}

/** Counts a writer's batches and the span they took, in epoch milliseconds (comparable with the parent's). */
class CountingWriter implements OutboxWriter {
  batches = 0;
  firstAt = 0;
  lastAt = 0;
  /** When each batch began (epoch ms). */
  readonly startedAt: number[] = [];
  constructor(readonly inner: OutboxWriter) {}
  get dialect() {
    return this.inner.dialect;
  }
  get concurrent() {
    return this.inner.concurrent;
  }
  get pipelined() {
    return this.inner.pipelined;
  }
  async writeBatch(stmts: Statement[], options?: WriteOptions): Promise<WriteResult[]> {
    const now = () => performance.timeOrigin + performance.now();
    if (this.batches++ === 0) this.firstAt = now();
    this.startedAt.push(now());
    try {
      return await this.inner.writeBatch(stmts, options);
    } finally {
      this.lastAt = now();
    }
  }
  close() {
    return this.inner.close?.();
  }
}

/** Child mode: drain the backlog in `dbDir` into the target, print one JSON result on stdout. */
async function drainChild(job: ChildJob): Promise<void> {
  const config = configFor(
    job.dbDir,
    job.target,
    job.connection,
    job.lanes ? job.tables.map((name) => ({ name, lanes: job.lanes! })) : job.tables,
    { batchSize: job.batchSize ?? CHUNK, flushInterval: 0.005, tableFlushThreshold: 1, tableMaxWait: 0 },
    job.connections,
  );
  let svc: OutboxSyncService | null = null;
  const metrics = job.metrics ? createDrainMetrics(() => svc) : null;
  // SQLOUTBOX_BENCH_SPANS_PER_S: another max_spans_per_second, to see what the rate costs.
  const rate = Number(process.env.SQLOUTBOX_BENCH_SPANS_PER_S ?? config.tracing.maxSpansPerSecond);
  const tracing = job.tracing
    ? createTracing(traceSettings({ ...config.tracing, endpoint: job.tracing, maxSpansPerSecond: rate }, {})!)
    : null; // silent: the spans it drops are a figure of the line (spans_dropped), not a fault
  await tracing?.ready(); // loading the SDK is a start-up cost, not a delivery cost
  // As createWriters would make it: a pool of one connection per batch in flight.
  const pool = { ...job.connection, max_connections: job.connections ?? 1 };
  const writerFor = () => (job.target === "null" ? nullWriter : createWriter(job.target, pool));
  if (job.warmupDbDir) {
    const warm = new OutboxSyncService(
      configFor(job.warmupDbDir, job.target, job.connection, job.tables, {
        batchSize: CHUNK,
        flushInterval: 0.005,
        tableFlushThreshold: 1,
        tableMaxWait: 0,
      }),
      { "bench.remote": writerFor() },
      { logger: benchLogger, ...(tracing ? { observer: tracing.observer } : {}) },
    );
    await warm.start();
    while (warm.totalPending() > 0) await Bun.sleep(5);
    await warm.stop();
    await tracing?.flush(10_000);
  }
  const before = tracing?.counts();
  const counting = job.countBatches ? new CountingWriter(writerFor()) : null;
  svc = new OutboxSyncService(
    config,
    { "bench.remote": counting ?? writerFor() },
    {
      logger: benchLogger,
      ...(metrics ? { onBatch: metrics.observeBatch } : {}),
      ...(tracing ? { observer: tracing.observer } : {}),
    },
  );
  const scraper = metrics ? setInterval(() => void metrics.text(), 100) : undefined;
  let peak = process.memoryUsage().rss;
  const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 10);
  const total = svc.totalPending();
  const start = performance.now();
  await svc.start();
  const delivered = () => svc!.views().reduce((n, v) => n + v.totals.delivered, 0);
  let steadyFrom: { at: number; epoch: number; rows: number } | null = null;
  while (svc.totalPending() > 0) {
    await Bun.sleep(5);
    if (steadyFrom === null && job.steadyAfterRows !== undefined && delivered() >= job.steadyAfterRows)
      steadyFrom = { at: performance.now(), epoch: performance.timeOrigin + performance.now(), rows: delivered() };
  }
  const end = performance.now();
  const seconds = (end - start) / 1000;
  clearInterval(sampler);
  clearInterval(scraper);
  peak = Math.max(peak, process.memoryUsage().rss);
  await svc.stop();
  await tracing?.shutdown(10_000);
  const after = tracing?.counts();
  const spans =
    after && before
      ? Object.fromEntries(Object.entries(after).map(([k, v]) => [k, v - before[k as keyof typeof before]]))
      : null;
  const batches = counting
    ? {
        batches: counting.batches,
        first_batch_at: counting.firstAt,
        last_batch_at: counting.lastAt,
      }
    : {};
  const steady =
    steadyFrom === null
      ? {}
      : {
          steady: {
            rows: total - steadyFrom.rows,
            seconds: (end - steadyFrom.at) / 1000,
            from: steadyFrom.epoch,
            batches: counting ? counting.startedAt.filter((t) => t >= steadyFrom!.epoch).length : 0,
          },
        };
  console.log(
    JSON.stringify({
      rows: total,
      seconds,
      peak_rss_mb: Math.round(peak / 1048576),
      ...(spans ? { spans } : {}),
      ...batches,
      ...steady,
    }),
  );
}

async function runChild(job: ChildJob): Promise<{
  rows: number;
  seconds: number;
  peak_rss_mb: number;
  spans?: { exported: number; droppedQueueFull: number; droppedBusy: number; droppedExportFailed: number };
  batches?: number;
  first_batch_at?: number;
  last_batch_at?: number;
  steady?: { rows: number; seconds: number; from: number; batches: number };
}> {
  const child = Bun.spawn(["bun", import.meta.path, "--drain-child", JSON.stringify(job)], {
    stdout: "pipe",
    stderr: "inherit",
  });
  const out = await new Response(child.stdout).text();
  if ((await child.exited) !== 0) throw new Error(`drain child for ${job.target} failed`);
  return JSON.parse(out.trim().split("\n").at(-1)!);
}

/** The engine's own ingest rate for the bench rows: one connection, CHUNK rows per transaction. */
async function limits(
  target: Exclude<Target, "null">,
  remote: Awaited<ReturnType<typeof remoteFor>>,
): Promise<Array<{ form: string; rowsPerS: number }>> {
  const rows = Array.from({ length: ROWS }, (_, i) => rowOf(i));
  const table = "bench_limit";
  const time = async (fn: (chunk: Row[]) => Promise<void> | void) => {
    const start = performance.now();
    for (let i = 0; i < rows.length; i += CHUNK) await fn(rows.slice(i, i + CHUNK));
    return Math.round(rows.length / ((performance.now() - start) / 1000));
  };
  const values = (n: number, ph: (k: number) => string) =>
    Array.from({ length: n }, (_, r) => `(${[1, 2, 3, 4].map((c) => ph(r * 4 + c)).join(", ")})`).join(", ");
  if (target === "sqlite") {
    const db = new Database(remote.path!);
    db.run("PRAGMA journal_mode = WAL");
    db.run(ddl(table, target));
    const insert = db.prepare(`INSERT INTO ${table} (id, name, amount, note) VALUES ${values(CHUNK, () => "?")}`);
    const rate = await time((chunk) => void db.transaction(() => insert.run(...(chunk.flat() as never[])))());
    db.close();
    return [{ form: "multi-row VALUES", rowsPerS: rate }];
  }
  const sql = new SQL(remote.connection.url as string, { max: 1 });
  try {
    await sql.unsafe(ddl(table, target));
    const ph = target === "postgres" ? (k: number) => `$${k}` : () => "?";
    const text = `INSERT INTO ${table} (id, name, amount, note) VALUES ${values(CHUNK, ph)}`;
    const out = [
      {
        form: "multi-row VALUES",
        rowsPerS: await time((chunk) => sql.begin((tx) => tx.unsafe(text, chunk.flat())).then(() => {})),
      },
    ];
    if (target === "postgres") {
      const unnest = `INSERT INTO ${table} (id, name, amount, note) SELECT * FROM unnest($1::bigint[], $2::text[], $3::float8[], $4::text[])`;
      const columns = (chunk: Row[]) => [0, 1, 2, 3].map((c) => chunk.map((r) => r[c]));
      out.push({
        form: "unnest",
        rowsPerS: await time((chunk) => sql.begin((tx) => tx.unsafe(unnest, columns(chunk))).then(() => {})),
      });
    }
    return out;
  } finally {
    await sql.close();
  }
}

/** The drain and then the engine's limit on the same rows; `pinned`: the lines say so, and the ratio is over multi-row VALUES. */
async function throughput(target: Target, pinned = false): Promise<void> {
  const dir = makeTempDir("sqloutbox-bench-");
  const remote = await remoteFor(target, dir.path).catch((error) => {
    dir.cleanup();
    throw error;
  });
  const tag = pinned ? { pinned: true } : {};
  try {
    fillBacklog(`${dir.path}/outbox`, TABLES, ROWS);
    const drained = await runChild({
      target,
      dbDir: `${dir.path}/outbox`,
      connection: remote.connection,
      tables: TABLES,
    });
    const rowsPerS = Math.round(drained.rows / drained.seconds);
    console.log(
      JSON.stringify({
        bench: "drain",
        target,
        ...tag,
        mode: "ledger",
        rows: drained.rows,
        rows_per_s: rowsPerS,
        peak_rss_mb: drained.peak_rss_mb,
      }),
    );
    if (target === "null") {
      const floorRate = await floor();
      console.log(JSON.stringify({ bench: "floor", target, rows: ROWS, rows_per_s: floorRate }));
      console.log(
        JSON.stringify({ bench: "ratio", target, drain_vs_floor: Math.round((rowsPerS / floorRate) * 100) / 100 }),
      );
      return;
    }
    const forms = await limits(target, remote);
    for (const f of forms)
      console.log(JSON.stringify({ bench: "limit", target, ...tag, form: f.form, rows_per_s: f.rowsPerS }));
    const best = pinned
      ? forms.find((f) => f.form === "multi-row VALUES")!.rowsPerS
      : Math.max(...forms.map((f) => f.rowsPerS));
    console.log(
      JSON.stringify({ bench: "ratio", target, ...tag, drain_vs_limit: Math.round((rowsPerS / best) * 100) / 100 }),
    );
  } finally {
    await remote.drop();
    dir.cleanup();
  }
}

/** The least any on-disk design must do (read each CHUNK-row slice, delete it by range in one commit), same backlog and pragmas as the drain. */
async function floor(): Promise<number> {
  const dir = makeTempDir("sqloutbox-bench-");
  try {
    fillBacklog(dir.path, TABLES, ROWS);
    const files = TABLES.map((table) => {
      const db = new Database(`${dir.path}/${table}.db`);
      db.run("PRAGMA synchronous = NORMAL");
      return {
        db,
        table,
        read: db.query<{ seq: number }, [string, number]>(
          `SELECT ${QUEUE_ROW_COLUMNS} FROM outbox_queue WHERE namespace = ? AND synced = 0 AND seq > ? ORDER BY seq LIMIT ${CHUNK}`,
        ),
        remove: db.query("DELETE FROM outbox_queue WHERE namespace = ? AND synced = 0 AND seq <= ?"),
      };
    });
    const start = performance.now();
    for (let more = true; more; ) {
      more = false;
      for (const f of files) {
        const rows = f.read.all(f.table, 0);
        if (rows.length === 0) continue;
        more = true;
        const last = rows[rows.length - 1]!.seq;
        f.db.transaction(() => void f.remove.run(f.table, last)).immediate();
      }
    }
    const seconds = (performance.now() - start) / 1000;
    for (const f of files) f.db.close();
    return Math.round(ROWS / seconds);
  } finally {
    dir.cleanup();
  }
}

/** Four drains, each with its own queue (its own origin), into one PostgreSQL table at once. */
async function fleet(): Promise<void> {
  const dir = makeTempDir("sqloutbox-bench-");
  const remote = await remoteFor("postgres", dir.path, ["bench_fleet"]);
  try {
    const perDrain = ROWS / FLEET_DRAINS;
    const jobs = Array.from({ length: FLEET_DRAINS }, (_, d) => {
      const dbDir = `${dir.path}/host${d}`;
      fillBacklog(dbDir, ["bench_fleet"], perDrain, (i) => rowOf(d * perDrain + i));
      return { target: "postgres" as const, dbDir, connection: remote.connection, tables: ["bench_fleet"] };
    });
    const start = performance.now();
    await Promise.all(jobs.map(runChild));
    const seconds = (performance.now() - start) / 1000;
    const [[count, distinct]] = (await remote
      .sql!.unsafe("SELECT count(*), count(DISTINCT id) FROM bench_fleet")
      .values()) as [[string, string]];
    if (Number(count) !== ROWS || Number(distinct) !== ROWS)
      throw new Error(`fleet: ${count} rows (${distinct} distinct) landed, expected ${ROWS}`);
    console.log(
      JSON.stringify({
        bench: "fleet",
        target: "postgres",
        drains: FLEET_DRAINS,
        rows: ROWS,
        rows_per_s: Math.round(ROWS / seconds),
      }),
    );
  } finally {
    await remote.drop();
    dir.cleanup();
  }
}

/** 64 KB rows into PostgreSQL: throughput and the drain's peak RSS (bounded by batch_max_bytes, not the backlog). */
async function large(rows: number): Promise<void> {
  const dir = makeTempDir("sqloutbox-bench-");
  const remote = await remoteFor("postgres", dir.path, ["bench_large"]);
  try {
    const note = "x".repeat(LARGE_ROW_BYTES);
    fillBacklog(`${dir.path}/outbox`, ["bench_large"], rows, (i) => rowOf(i, note));
    const drained = await runChild({
      target: "postgres",
      dbDir: `${dir.path}/outbox`,
      connection: remote.connection,
      tables: ["bench_large"],
    });
    console.log(
      JSON.stringify({
        bench: "large",
        target: "postgres",
        rows: drained.rows,
        row_kb: LARGE_ROW_BYTES / 1024,
        rows_per_s: Math.round(drained.rows / drained.seconds),
        peak_rss_mb: drained.peak_rss_mb,
      }),
    );
  } finally {
    await remote.drop();
    dir.cleanup();
  }
}

/** The PostgreSQL drain with metrics off and on, alternated COST_ROUNDS times each on fresh backlogs: the medians. */
async function metricsCost(): Promise<void> {
  const rates: Record<"off" | "on", number[]> = { off: [], on: [] };
  for (let round = 0; round < COST_ROUNDS; round++) {
    for (const mode of ["off", "on"] as const) {
      const dir = makeTempDir("sqloutbox-bench-");
      const remote = await remoteFor("postgres", dir.path);
      try {
        fillBacklog(`${dir.path}/outbox`, TABLES, ROWS);
        const drained = await runChild({
          target: "postgres",
          dbDir: `${dir.path}/outbox`,
          connection: remote.connection,
          tables: TABLES,
          metrics: mode === "on",
        });
        rates[mode].push(drained.rows / drained.seconds);
      } finally {
        await remote.drop();
        dir.cleanup();
      }
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const off = median(rates.off);
  const on = median(rates.on);
  console.log(
    JSON.stringify({
      bench: "metrics",
      target: "postgres",
      off_rows_per_s: Math.round(off),
      on_rows_per_s: Math.round(on),
      on_vs_off: Math.round((on / off) * 100) / 100,
    }),
  );
}

/**
 * The drain with tracing off and on, alternated COST_ROUNDS times each on fresh backlogs in which every
 * row carries its own trace context; the spans go to a receiver served by this (idle) parent.
 */
async function tracingCost(target: "null" | "postgres"): Promise<void> {
  let received = 0;
  const receiver = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(req) {
      received += (await req.arrayBuffer()).byteLength;
      return new Response(new Uint8Array(0), { headers: { "content-type": "application/x-protobuf" } });
    },
  });
  const rates: Record<"off" | "on", number[]> = { off: [], on: [] };
  let spans:
    | { exported: number; droppedQueueFull: number; droppedBusy: number; droppedExportFailed: number }
    | undefined;
  try {
    for (let round = 0; round < COST_ROUNDS; round++) {
      for (const mode of ["off", "on"] as const) {
        const dir = makeTempDir("sqloutbox-bench-");
        const remote = await remoteFor(target, dir.path);
        try {
          fillBacklog(`${dir.path}/warmup`, TABLES, TRACE_ROWS / 10, rowOf, true);
          fillBacklog(`${dir.path}/outbox`, TABLES, TRACE_ROWS, rowOf, true);
          const drained = await runChild({
            target,
            dbDir: `${dir.path}/outbox`,
            warmupDbDir: `${dir.path}/warmup`,
            connection: remote.connection,
            tables: TABLES,
            ...(mode === "on" ? { tracing: `http://127.0.0.1:${receiver.port}` } : {}),
          });
          rates[mode].push(drained.rows / drained.seconds);
          if (drained.spans) spans = drained.spans;
        } finally {
          await remote.drop();
          dir.cleanup();
        }
      }
    }
  } finally {
    await receiver.stop(true);
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const off = median(rates.off);
  const on = median(rates.on);
  console.log(
    JSON.stringify({
      bench: "tracing",
      target,
      off_rows_per_s: Math.round(off),
      on_rows_per_s: Math.round(on),
      on_vs_off: Math.round((on / off) * 100) / 100,
      runs_off: rates.off.map(Math.round),
      runs_on: rates.on.map(Math.round),
      spans_exported: spans?.exported,
      spans_dropped: spans ? spans.droppedQueueFull + spans.droppedBusy + spans.droppedExportFailed : undefined,
      received_mb: Math.round(received / 1048576),
    }),
  );
}

/** Wraps a writer to timestamp the moment each seq's remote commit resolved. */
class TimingWriter implements OutboxWriter {
  readonly committedAt = new Map<number, number>();
  constructor(readonly inner: OutboxWriter) {}
  get dialect() {
    return this.inner.dialect;
  }
  async writeBatch(stmts: Statement[]): Promise<WriteResult[]> {
    const results = await this.inner.writeBatch(stmts);
    const now = performance.now();
    for (const s of stmts) if (s.seq > 0) this.committedAt.set(s.seq, now);
    return results;
  }
  close() {
    return this.inner.close?.();
  }
}

/**
 * One event at a time, pushed to committed on the remote, with the latency tuning (flush_interval
 * 5 ms, table_flush_threshold 1, table_max_wait 0). With `rttMs`, through the delaying proxy: the
 * line adds rtt_ms and p50_round_trips.
 */
async function latency(target: Target, rttMs = 0): Promise<void> {
  const dir = makeTempDir("sqloutbox-bench-");
  const remote = await remoteFor(target, dir.path);
  const link = rttMs > 0 ? delayedLink(remote.connection.url as string, rttMs) : null;
  const connection = link ? { url: link.url } : remote.connection;
  const dbDir = `${dir.path}/outbox`;
  const config = configFor(dbDir, target, connection, TABLES, {
    flushInterval: 0.005,
    tableFlushThreshold: 1,
    tableMaxWait: 0,
  });
  const writer = new TimingWriter(createWriter(target, connection));
  const svc = new OutboxSyncService(config, { "bench.remote": writer }, { logger: benchLogger });
  await svc.start();
  fs.mkdirSync(dbDir, { recursive: true });
  const q = new Outbox(`${dbDir}/${TABLES[0]}.db`, TABLES[0]!);
  const tag = `INSERT INTO ${TABLES[0]} (id, name, amount, note) VALUES (?, ?, ?, ?)`;
  const samples: number[] = [];
  for (let i = 0; i < LATENCY_EVENTS; i++) {
    const t0 = performance.now();
    const seq = q.enqueue(tag, encodeArgs([i, "x", 1.5, "latency"]));
    while (!writer.committedAt.has(seq)) await Bun.sleep(0.5);
    if (i >= LATENCY_WARMUP) samples.push(writer.committedAt.get(seq)! - t0); // skip warm-up (JIT, connections)
    await Bun.sleep(3 + Math.random() * 7); // events arrive one at a time, not in bursts
  }
  q.close();
  await svc.stop();
  link?.proxy.close();
  await remote.drop();
  dir.cleanup();
  samples.sort((a, b) => a - b);
  const pct = (p: number) =>
    Math.round(samples[Math.min(samples.length - 1, Math.floor(samples.length * p))]! * 100) / 100;
  const p50 = pct(0.5);
  const across = rttMs > 0 ? { rtt_ms: rttMs } : {};
  const trips = rttMs > 0 ? { p50_round_trips: Math.round((p50 / rttMs) * 100) / 100 } : {};
  console.log(JSON.stringify({ bench: "latency", target, ...across, p50_ms: p50, p99_ms: pct(0.99), ...trips }));
}

/** A delaying proxy `rttMs` long in front of the server of `url`, and the URL through it. */
function delayedLink(url: string, rttMs: number) {
  const db = new URL(url);
  const proxy = startTcpProxy(Number(db.port), db.hostname, { rttMs });
  return { proxy, url: throughProxy(url, proxy.port) };
}

/** The round trips of the wan lines: BENCH_RTT_MS (default 20), then 2 ms. */
const WAN_RTTS_MS = [Number(process.env.BENCH_RTT_MS ?? 20), 2];

/** The drain's `connections` on the wan lines, and the engine's limit's. */
const WAN_CONNECTIONS = [1, 2, 4, 8];
const WAN_LIMIT_CONNECTIONS = [1, 8];
/** The wan lines' steady figures leave out the first rows: each new connection's first batches prepare their statements over the link. */
const WAN_WARM_ROWS = Math.floor(ROWS / 5);
/** The wan line with a larger batch_size: four times the default, rows per round trip. */
const WAN_LARGE_BATCH = CHUNK * 4;
/** The wan lines of tables with lanes: this many each, their rows over WAN_KEYS keys (runs of KEY_RUN rows a key), from 1 and 2 connections. */
const WAN_LANES = 8;
const WAN_KEYS = 64;
const KEY_RUN = 10;

/**
 * The drain with `connections` = 1, 2, 4 and 8, then the engine from 1 and 8 connections, through
 * a proxy `rttMs` long: rows/s and round trips per batch (the turns the proxy counted, over the
 * batches or transactions), and the ratios.
 */
async function wan(target: "postgres" | "mysql", rttMs: number): Promise<void> {
  const dir = makeTempDir("sqloutbox-bench-");
  const remote = await remoteFor(target, dir.path);
  // The ledger as a target that has run a drain before holds it: else the first line alone would
  // pay its creation (two round trips over the link).
  const { ledgerTable } = configFor(dir.path, target, remote.connection, TABLES, {}).apps[0]!.targets[0]!;
  await remote.sql!.unsafe(ledgerDdl(ledgerTable, target));
  const { proxy, url } = delayedLink(remote.connection.url as string, rttMs);
  const round = (x: number) => Math.round(x * 100) / 100;
  try {
    const drainRate = new Map<number, number>();
    const steadyRates = new Map<number, number>();
    /** The drain through the proxy with `connections` and `batchSize` (and `lanes`, keyed rows): its line's figures. */
    const drain = async (connections: number, batchSize: number, lanes = 1) => {
      const dbDir = `${dir.path}/outbox-${connections}-${batchSize}-${lanes}`;
      fillBacklog(dbDir, TABLES, ROWS, rowOf, false, lanes > 1 ? WAN_KEYS : 0);
      const drained = await runChild({
        target,
        dbDir,
        connection: { url },
        tables: TABLES,
        countBatches: true,
        connections,
        batchSize,
        steadyAfterRows: WAN_WARM_ROWS,
        ...(lanes > 1 ? { lanes } : {}),
      });
      const steady = drained.steady!;
      return {
        rows: drained.rows,
        rows_per_s: Math.round(drained.rows / drained.seconds),
        round_trips_per_batch: round(
          proxy.turnsBetween(drained.first_batch_at!, drained.last_batch_at!) / drained.batches!,
        ),
        steady_rows_per_s: Math.round(steady.rows / steady.seconds),
        steady_round_trips_per_batch: round(
          proxy.turnsBetween(steady.from, drained.last_batch_at!) / Math.max(1, steady.batches),
        ),
      };
    };
    /** Prints a drain's line, with its rows/s and steady rows/s over `base`'s as `vs_<name>` and `steady_vs_<name>`. */
    const print = (
      line: Awaited<ReturnType<typeof drain>>,
      connections: number,
      batchSize: number,
      name: string,
      base: { rows_per_s: number; steady_rows_per_s: number },
      lanes = 1,
    ) => {
      const { steady_rows_per_s, steady_round_trips_per_batch, ...overall } = line;
      console.log(
        JSON.stringify({
          bench: "wan",
          target,
          rtt_ms: rttMs,
          connections,
          ...(lanes > 1 ? { lanes } : {}),
          batch_size: batchSize,
          ...overall,
          [`vs_${name}`]: round(line.rows_per_s / base.rows_per_s),
          steady_rows_per_s,
          steady_round_trips_per_batch,
          [`steady_vs_${name}`]: round(steady_rows_per_s / base.steady_rows_per_s),
        }),
      );
    };
    /** The connections = 1 line (WAN_CONNECTIONS begins with it): what the others are compared with. */
    let one: Awaited<ReturnType<typeof drain>> | null = null;
    for (const connections of WAN_CONNECTIONS) {
      const line = await drain(connections, CHUNK);
      one ??= line;
      drainRate.set(connections, line.rows_per_s);
      steadyRates.set(connections, line.steady_rows_per_s);
      print(line, connections, CHUNK, "connections_1", one);
    }
    print(await drain(1, WAN_LARGE_BATCH), 1, WAN_LARGE_BATCH, "batch_500", one!);
    // Tables with lanes, keyed rows: a chain behind itself fenced lane by lane (their connections 1 line the base).
    let lanesOne: Awaited<ReturnType<typeof drain>> | null = null;
    for (const connections of [1, 2]) {
      const line = await drain(connections, CHUNK, WAN_LANES);
      lanesOne ??= line;
      print(line, connections, CHUNK, "connections_1", lanesOne, WAN_LANES);
    }
    for (const connections of WAN_LIMIT_CONNECTIONS) {
      const limit = await wanLimit(target, url, connections, () => proxy.turns);
      const tag = { target, rtt_ms: rttMs, connections };
      console.log(JSON.stringify({ bench: "wan-limit", ...tag, form: "pipelined", ...limit }));
      console.log(
        JSON.stringify({
          bench: "wan-ratio",
          ...tag,
          drain_vs_limit: round(drainRate.get(connections)! / limit.rows_per_s),
          steady_vs_limit: round(steadyRates.get(connections)! / limit.rows_per_s),
        }),
      );
    }
  } finally {
    proxy.close();
    await remote.drop();
    dir.cleanup();
  }
}

/**
 * The engine's limit through the proxy from `connections` connections: the backlog's rows in
 * transactions of one drain batch (a CHUNK-row INSERT per table), BEGIN, the INSERTs and COMMIT
 * sent together, each connection sending its share of the transactions one after another.
 */
async function wanLimit(
  target: "postgres" | "mysql",
  url: string,
  connections: number,
  turns: () => number,
): Promise<{ rows_per_s: number; round_trips_per_batch: number }> {
  const sql = new SQL(url, { max: connections });
  try {
    const tables = TABLES.map((t) => `${t}_limit_${connections}`);
    for (const t of tables) await sql.unsafe(ddl(t, target));
    const ph = target === "postgres" ? (k: number) => `$${k}` : () => "?";
    const values = Array.from({ length: CHUNK }, (_, r) => `(${[1, 2, 3, 4].map((c) => ph(r * 4 + c)).join(", ")})`);
    const texts = tables.map((t) => `INSERT INTO ${t} (id, name, amount, note) VALUES ${values.join(", ")}`);
    const perBatch = CHUNK * tables.length;
    const reserved = await Promise.all(Array.from({ length: connections }, () => sql.reserve()));
    try {
      // Tagged, not unsafe: Bun sends unsafe() without parameters as a simple query, not pipelined.
      // PostgreSQL: a no-op in each of the next two event-loop turns makes Bun write past its
      // 64 KB pipeline window at once instead of waiting for an answer (see resume() in
      // src/writers/postgres.ts); a transaction here is ~150 KB.
      const transaction = async (conn: (typeof reserved)[number], first: number) => {
        const sent = [
          target === "postgres" ? conn`BEGIN` : conn`START TRANSACTION`,
          ...texts.map((text, k) =>
            conn.unsafe(text, Array.from({ length: CHUNK }, (_, r) => rowOf(first + k * CHUNK + r)).flat()),
          ),
          conn`COMMIT`,
        ].map((q) => Promise.resolve(q));
        for (let k = 0; target === "postgres" && k < 2; k++) {
          await new Promise((next) => setImmediate(next));
          sent.push(Promise.resolve(conn`SELECT 1`));
        }
        await Promise.all(sent);
      };
      // Prepares every text on each connection, untimed (ids below 0 never meet the timed ones).
      await Promise.all(reserved.map((conn, c) => transaction(conn, -(c + 1) * perBatch)));
      const batches = Math.max(connections, Math.floor(ROWS / perBatch));
      const before = turns();
      const start = performance.now();
      await Promise.all(
        reserved.map(async (conn, c) => {
          for (let b = c; b < batches; b += connections) await transaction(conn, b * perBatch);
        }),
      );
      const seconds = (performance.now() - start) / 1000;
      return {
        rows_per_s: Math.round((batches * perBatch) / seconds),
        round_trips_per_batch: Math.round(((turns() - before) / batches) * 100) / 100,
      };
    } finally {
      for (const conn of reserved) conn.release();
    }
  } finally {
    await sql.close();
  }
}

/** A child of this script ends when its parent does (a run stopped by a signal): an orphaned drain would retry a dead server forever. */
function exitWithParent(): void {
  const parent = process.ppid;
  setInterval(() => {
    if (process.ppid !== parent) process.exit(1);
  }, 200).unref();
}

/** CPU of the private servers, and of this process, its drains and the limit's client, in `pinned` mode. */
const SERVER_CPU = "1";
const CLIENT_CPU = "0";
const PINNED_TARGETS = ["postgres", "mysql"] as const;

/**
 * `pinned`: starts the private servers on SERVER_CPU, then runs this script's pinned lines in a
 * process pinned to CLIENT_CPU (its drain children inherit it) against them; the servers go
 * whatever happens. A server that cannot be started is reported as skipped.
 */
async function pinned(): Promise<void> {
  const skip = (target: string, why: string) =>
    console.log(JSON.stringify({ bench: "drain", target, pinned: true, skipped: why }));
  if (navigator.hardwareConcurrency < 2 || !Bun.which("taskset")) {
    for (const target of PINNED_TARGETS) skip(target, "needs two CPUs and taskset");
    return;
  }
  const servers: PrivateServer[] = [];
  // The run's temp files go under a directory of ours, removed whatever happens to the run.
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "sqloutbox-bench-pinned-"));
  const removeTmp = () => fs.rmSync(tmp, { recursive: true, force: true });
  process.on("exit", removeTmp);
  try {
    for (const [target, start] of [
      ["postgres", startPostgres],
      ["mysql", startMariadb],
    ] as const) {
      try {
        servers.push(await start(SERVER_CPU));
      } catch (error) {
        skip(target, (error as Error).message.split("\n")[0]!);
      }
    }
    if (servers.length === 0) return;
    const env: Record<string, string | undefined> = { ...process.env, TMPDIR: tmp };
    for (const s of servers) env[s.engine === "postgres" ? "SQLOUTBOX_TEST_PG" : "SQLOUTBOX_TEST_MYSQL"] = s.url;
    const child = Bun.spawn(
      ["taskset", "-c", CLIENT_CPU, "bun", import.meta.path, "--pinned-child", ...servers.map((s) => s.engine)],
      { env, stdout: "inherit", stderr: "inherit" },
    );
    const orphaned = () => child.kill("SIGTERM"); // this process stopped (a signal): the servers are gone, so is the run
    process.on("exit", orphaned);
    const code = await child.exited;
    process.off("exit", orphaned);
    if (code !== 0) throw new Error(`the pinned run failed (exit ${code})`);
  } finally {
    for (const s of servers) s.stop();
    removeTmp();
    process.off("exit", removeTmp);
  }
}

if (process.argv[2] === "--drain-child") {
  exitWithParent();
  await drainChild(JSON.parse(process.argv[3]!) as ChildJob);
} else if (process.argv[2] === "--pinned-child") {
  exitWithParent();
  for (const target of process.argv.slice(3) as Target[]) await throughput(target, true);
} else {
  const only = process.argv.slice(2);
  const wanted = (name: string) => only.length === 0 || only.includes(name);
  for (const target of ["null", "sqlite", "postgres", "mysql"] as const) if (wanted(target)) await throughput(target);
  if (wanted("fleet")) await fleet();
  if (wanted("large")) for (const rows of LARGE_BACKLOGS) await large(rows);
  if (wanted("metrics")) await metricsCost();
  if (wanted("tracing"))
    for (const target of ["null", "postgres"] as const)
      if (wanted(target) || !only.some((a) => a === "null" || a === "postgres")) await tracingCost(target);
  for (const target of ["sqlite", "postgres"] as const)
    if (wanted("latency") || (only.length > 0 && only.includes(target) && !only.includes("tracing")))
      await latency(target);
  if (wanted("pinned")) await pinned();
  if (wanted("wan")) {
    for (const rtt of WAN_RTTS_MS) for (const target of ["postgres", "mysql"] as const) await wan(target, rtt);
    for (const target of ["postgres", "mysql"] as const) await latency(target, WAN_RTTS_MS[0]);
  }
}
