// What the table count costs a drain tuned for low latency (`bun run bench:tables [N …]`, default
// 10 and 1000 tables): flush_interval 5 ms, table_flush_threshold 1, table_max_wait 0, the ledger
// on, a writer that accepts everything at once (so what is measured is the drain's own reaction).
// Each table count runs in its own process (its CPU, descriptors and memory are its own). Lines:
// {"bench":"tables","tables":N,"idle_cpu_pct":…,"push_p50_ms":…,"push_p99_ms":…,"fds_per_table":…,"rss_kb_per_table":…}
//   idle_cpu_pct: the drain's CPU (user + system) over IDLE_MS of idleness after startup, as a
//   percentage of one core. push_*: one event pushed into a random table every 3-10 ms, enqueue →
//   the writer holding it (same process, same clock). fds_per_table / rss_kb_per_table: open
//   descriptors and resident memory the started drain added, over the table count.
// {"bench":"ratio","case":"tables","tables":N,"push_p50_vs_first":…,"idle_cpu_vs_first":…}   each
//   later table count over the first one, same run.
import fs from "node:fs";
import { defineConfig } from "../src/config/define.ts";
import { OutboxSyncService } from "../src/drain/service.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import type { OutboxWriter, Statement, WriteResult } from "../src/writers/writer.ts";
import { makeTempDir } from "../test/support/tmp.ts";

const IDLE_MS = 5_000;
const SETTLE_MS = 1_000;
const PUSHES = 300;
const WARMUP_PUSHES = 20;
const TAG = "INSERT INTO t (id, note) VALUES (?, ?)";

interface Result {
  tables: number;
  idle_cpu_pct: number;
  push_p50_ms: number;
  push_p99_ms: number;
  fds_per_table: number;
  rss_kb_per_table: number;
}

/** Accepts everything at once and notes when each seq arrived. */
class ArrivalWriter implements OutboxWriter {
  readonly dialect = "postgres" as const;
  readonly arrived = new Map<string, number>();
  async writeBatch(stmts: Statement[]): Promise<WriteResult[]> {
    const now = performance.now();
    for (const s of stmts) if (s.seq > 0) this.arrived.set(`${s.namespace}:${s.seq}`, now);
    return stmts.map(() => ({ ok: true as const, rowsAffected: 1 }));
  }
}

const openFds = () => fs.readdirSync("/proc/self/fd").length;
const round = (x: number, digits = 2) => Math.round(x * 10 ** digits) / 10 ** digits;

async function child(count: number, dbDir: string): Promise<Result> {
  const tables = Array.from({ length: count }, (_, i) => `t${i}`);
  const config = defineConfig({
    app: { bench: { dbDir, flushInterval: 0.005, tableFlushThreshold: 1, tableMaxWait: 0, db: { remote: { writer: "postgres", connection: { url: "postgres://unused@127.0.0.1/x" }, tables } } } },
  });
  const writer = new ArrivalWriter();
  Bun.gc(true);
  const fdsBefore = openFds();
  const rssBefore = process.memoryUsage().rss;
  const svc = new OutboxSyncService(config, { "bench.remote": writer });
  await svc.start();
  await Bun.sleep(SETTLE_MS);
  Bun.gc(true);
  const fdsPerTable = (openFds() - fdsBefore) / count;
  const rssKbPerTable = (process.memoryUsage().rss - rssBefore) / 1024 / count;

  const cpu0 = process.cpuUsage();
  const wall0 = performance.now();
  await Bun.sleep(IDLE_MS);
  const cpu = process.cpuUsage(cpu0);
  const idleCpuPct = ((cpu.user + cpu.system) / 1000 / (performance.now() - wall0)) * 100;

  const producers = new Map<string, Outbox>();
  const samples: number[] = [];
  for (let i = 0; i < PUSHES + WARMUP_PUSHES; i++) {
    const table = tables[Math.floor(Math.random() * count)]!;
    let q = producers.get(table);
    if (!q) producers.set(table, (q = new Outbox(`${dbDir}/${table}.db`, table)));
    const t0 = performance.now();
    const key = `${table}:${q.enqueue(TAG, JSON.stringify([i, "a note"]))}`;
    while (!writer.arrived.has(key)) await Bun.sleep(0.1);
    if (i >= WARMUP_PUSHES) samples.push(writer.arrived.get(key)! - t0);
    await Bun.sleep(3 + Math.random() * 7); // one event at a time, not bursts
  }
  for (const q of producers.values()) q.close();
  await svc.stop();
  samples.sort((a, b) => a - b);
  const pct = (p: number) => round(samples[Math.min(samples.length - 1, Math.floor(samples.length * p))]!);
  return { tables: count, idle_cpu_pct: round(idleCpuPct), push_p50_ms: pct(0.5), push_p99_ms: pct(0.99), fds_per_table: round(fdsPerTable), rss_kb_per_table: round(rssKbPerTable, 0) };
}

async function run(count: number): Promise<Result> {
  const dir = makeTempDir("sqloutbox-bench-");
  try {
    const dbDir = `${dir.path}/outbox`;
    fs.mkdirSync(dbDir);
    for (let i = 0; i < count; i++) new Outbox(`${dbDir}/t${i}.db`, `t${i}`).close();
    const proc = Bun.spawn(["bun", import.meta.path, "--child", String(count), dbDir], { stdout: "pipe", stderr: "inherit" });
    const out = await new Response(proc.stdout).text();
    if ((await proc.exited) !== 0) throw new Error(`bench child for ${count} tables failed`);
    return JSON.parse(out.trim().split("\n").at(-1)!) as Result;
  } finally {
    dir.cleanup();
  }
}

if (process.argv[2] === "--child") {
  console.log(JSON.stringify(await child(Number(process.argv[3]), process.argv[4]!)));
} else {
  const counts = process.argv.slice(2).map(Number);
  const results: Result[] = [];
  for (const count of counts.length > 0 ? counts : [10, 1000]) {
    const r = await run(count);
    results.push(r);
    console.log(JSON.stringify({ bench: "tables", ...r }));
  }
  const first = results[0]!;
  for (const r of results.slice(1)) {
    console.log(JSON.stringify({ bench: "ratio", case: "tables", tables: r.tables, push_p50_vs_first: round(r.push_p50_ms / first.push_p50_ms), idle_cpu_vs_first: round(r.idle_cpu_pct / Math.max(first.idle_cpu_pct, 0.01)) }));
  }
}
