// Drain throughput and end-to-end latency (`bun run bench:drain`). Prints one JSON line per case:
// {"bench":"drain","target":…,"rows":…,"rows_per_s":…,"peak_rss_mb":…}   100 000-row backlog,
//   4 tables, batch_size 500, inject_outbox_seq on; each target drained in its own process so
//   peak RSS is the drain's own (the backlog is written by this parent process first).
// {"bench":"latency","target":…,"p50_ms":…,"p99_ms":…}   single events, flush_interval 5 ms,
//   threshold 1: enqueue → the remote transaction committed (the writer's promise resolved).
// The "null" target accepts everything instantly: its rate is the drain's own ceiling.
// Needs PostgreSQL on 127.0.0.1:5432 and MariaDB on 127.0.0.1:3306 (see README "Try it").
import { Database } from "bun:sqlite";
import fs from "node:fs";
import { defineConfig } from "../src/config/index.ts";
import { OutboxSyncService } from "../src/drain/service.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { encodeArgs } from "../src/outbox/payload.ts";
import { createWriter } from "../src/writers/registry.ts";
import type { OutboxWriter, Statement, WriteResult } from "../src/writers/writer.ts";
import { createMysqlDb } from "../test/support/mysql.ts";
import { createPgDb } from "../test/support/pg.ts";
import { makeTempDir } from "../test/support/tmp.ts";

const TABLES = ["bench_a", "bench_b", "bench_c", "bench_d"];
const ROWS = 100_000;
const LATENCY_EVENTS = 300;
type Target = "sqlite" | "postgres" | "mysql" | "null";

/** Accepts everything instantly: what is left is the drain's own cost (fetch, decode, rewrite, confirm). */
const nullWriter: OutboxWriter = {
  dialect: "postgres",
  writeBatch: async (stmts) => stmts.map(() => ({ ok: true as const, rowsAffected: 1 })),
};

function configFor(dbDir: string, writer: Target, connection: Record<string, unknown>, tuning: Record<string, unknown>) {
  const target = writer === "null" ? { writer: "postgres" as const, connection: { url: "postgres://unused@127.0.0.1/x" } } : { writer, connection };
  return defineConfig({ app: { bench: { dbDir, ...tuning, db: { remote: { ...target, tables: TABLES } } } } });
}

/** Creates the remote tables (without outbox_seq: auto_schema adds it) and returns the writer connection. */
async function remoteFor(target: Target, dir: string) {
  if (target === "null") return { connection: {}, drop: async () => {} };
  const ddl = (t: string) => `CREATE TABLE ${t} (id BIGINT NOT NULL, name VARCHAR(64), amount DOUBLE PRECISION, note TEXT)`;
  if (target === "sqlite") {
    const path = `${dir}/remote.db`;
    const db = new Database(path, { create: true });
    db.run("PRAGMA journal_mode = WAL");
    for (const t of TABLES) db.run(ddl(t));
    db.close();
    return { connection: { path }, drop: async () => {} };
  }
  const db = target === "postgres" ? await createPgDb("sqloutbox_bench") : await createMysqlDb("sqloutbox_bench");
  for (const t of TABLES) await db.sql.unsafe(target === "mysql" ? ddl(t).replace("DOUBLE PRECISION", "DOUBLE") : ddl(t));
  return { connection: { url: db.url }, drop: () => db.drop() };
}

function fillBacklog(dbDir: string): void {
  fs.mkdirSync(dbDir, { recursive: true });
  const perTable = ROWS / TABLES.length;
  for (const table of TABLES) {
    const q = new Outbox(`${dbDir}/${table}.db`, table);
    const tag = `INSERT INTO ${table} (id, name, amount, note) VALUES (?, ?, ?, ?)`;
    for (let i = 0; i < perTable; i += 1000) {
      const items = Array.from({ length: Math.min(1000, perTable - i) }, (_, k) => ({
        tag,
        payload: encodeArgs([i + k, `name-${i + k}`, (i + k) * 1.25, "a short note about this row"]),
      }));
      q.enqueueBatch(items);
    }
    q.close();
  }
}

/** Child mode: drain the backlog in `dbDir` into the target, print the JSON line. */
async function drainChild(target: Target, dbDir: string, connection: Record<string, unknown>): Promise<void> {
  const config = configFor(dbDir, target, connection, { batchSize: 500, flushInterval: 0.005, tableFlushThreshold: 1, tableMaxWait: 0 });
  const svc = new OutboxSyncService(config, { "bench.remote": target === "null" ? nullWriter : createWriter(target, connection) });
  let peak = process.memoryUsage().rss;
  const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 10);
  const total = svc.totalPending();
  const start = performance.now();
  await svc.start();
  while (svc.totalPending() > 0) await Bun.sleep(5);
  const seconds = (performance.now() - start) / 1000;
  clearInterval(sampler);
  peak = Math.max(peak, process.memoryUsage().rss);
  await svc.stop();
  console.log(JSON.stringify({ bench: "drain", target, rows: total, rows_per_s: Math.round(total / seconds), peak_rss_mb: Math.round(peak / 1048576) }));
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

async function latency(target: Target): Promise<void> {
  const dir = makeTempDir("sqloutbox-bench-");
  const remote = await remoteFor(target, dir.path);
  const dbDir = `${dir.path}/outbox`;
  const config = configFor(dbDir, target, remote.connection, { flushInterval: 0.005, tableFlushThreshold: 1, tableMaxWait: 0 });
  const writer = new TimingWriter(createWriter(target, remote.connection));
  const svc = new OutboxSyncService(config, { "bench.remote": writer });
  await svc.start();
  fs.mkdirSync(dbDir, { recursive: true });
  const q = new Outbox(`${dbDir}/${TABLES[0]}.db`, TABLES[0]!);
  const tag = `INSERT INTO ${TABLES[0]} (id, name, amount, note) VALUES (?, ?, ?, ?)`;
  const samples: number[] = [];
  for (let i = 0; i < LATENCY_EVENTS; i++) {
    const t0 = performance.now();
    const seq = q.enqueue(tag, encodeArgs([i, "x", 1.5, "latency"]));
    while (!writer.committedAt.has(seq)) await Bun.sleep(0.5);
    if (i >= 20) samples.push(writer.committedAt.get(seq)! - t0); // skip warm-up (JIT, connections)
    await Bun.sleep(3 + Math.random() * 7); // events arrive one at a time, not in bursts
  }
  q.close();
  await svc.stop();
  await remote.drop();
  dir.cleanup();
  samples.sort((a, b) => a - b);
  const pct = (p: number) => Math.round(samples[Math.min(samples.length - 1, Math.floor(samples.length * p))]! * 100) / 100;
  console.log(JSON.stringify({ bench: "latency", target, p50_ms: pct(0.5), p99_ms: pct(0.99) }));
}

if (process.argv[2] === "--drain-child") {
  await drainChild(process.argv[3] as Target, process.argv[4]!, JSON.parse(process.argv[5]!));
} else {
  const only = process.argv.slice(2);
  for (const target of ["null", "sqlite", "postgres", "mysql"] as const) {
    if (only.length > 0 && !only.includes(target)) continue;
    const dir = makeTempDir("sqloutbox-bench-");
    const remote = await remoteFor(target, dir.path);
    fillBacklog(`${dir.path}/outbox`);
    const child = Bun.spawn(["bun", import.meta.path, "--drain-child", target, `${dir.path}/outbox`, JSON.stringify(remote.connection)], { stdout: "inherit", stderr: "inherit" });
    await child.exited;
    await remote.drop();
    dir.cleanup();
  }
  for (const target of ["sqlite", "postgres"] as const) {
    if (only.length > 0 && !only.includes(target)) continue;
    await latency(target);
  }
}
