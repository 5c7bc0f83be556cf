// What the table count costs a drain tuned for low latency (`bun run bench:tables [N …]`, default
// 10 and 1000 tables): flush_interval 5 ms, table_flush_threshold 1, table_max_wait 0, the ledger
// on, a writer that accepts everything at once (so what is measured is the drain's own reaction).
// The drain runs in a child process of its own (its CPU, descriptors and memory are its own); this
// process is the producer, with every table's queue open (as an application keeps them). Lines:
// {"bench":"tables","tables":N,"idle_cpu_pct":…,"push_p50_ms":…,"push_p99_ms":…,"fds_per_table":…,"rss_kb_per_table":…}
//   idle_cpu_pct: the drain's CPU (user + system) over IDLE_MS of idleness after startup, as a
//   percentage of one core. push_*: one event pushed into a random table every 3-10 ms, from
//   enqueue here to the writer holding it there (both read the same system clock).
//   fds_per_table / rss_kb_per_table: the descriptors and resident memory the started drain
//   added, over the table count.
// {"bench":"ratio","case":"tables","tables":N,"push_p50_vs_first":…,"idle_cpu_vs_first":…}   each
//   later table count over the first one, same run.
import fs from "node:fs";
import { defineConfig } from "../src/config/define.ts";
import { OutboxSyncService } from "../src/drain/service.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import type { OutboxWriter, Statement, WriteResult } from "../src/writers/writer.ts";
import { makeTempDir } from "../test/support/tmp.ts";
import { benchLogger, sized } from "./support/smoke.ts";

const IDLE_MS = sized(5_000, 200);
const SETTLE_MS = sized(1_000, 100);
const PUSHES = sized(300, 20);
const WARMUP_PUSHES = sized(30, 3);
const DEFAULT_COUNTS = sized([10, 1000], [3, 30]);
const TAG = "INSERT INTO t (id, note) VALUES (?, ?)";

interface Result {
  tables: number;
  idle_cpu_pct: number;
  push_p50_ms: number;
  push_p99_ms: number;
  fds_per_table: number;
  rss_kb_per_table: number;
}

/** Wall-clock time in ms with sub-millisecond precision, comparable between processes. */
const clock = () => performance.timeOrigin + performance.now();
const round = (x: number, digits = 2) => Math.round(x * 10 ** digits) / 10 ** digits;
const openFds = () => fs.readdirSync("/proc/self/fd").length;

/**
 * Accepts everything at once and says on stdout when each statement arrived: `<table>:<seq> <ms>`.
 * Reads (the ledger's settlement and fleet reads) find no rows, as on an empty ledger.
 */
class ArrivalWriter implements OutboxWriter {
  readonly dialect = "postgres" as const;
  async writeBatch(stmts: Statement[]): Promise<WriteResult[]> {
    const at = clock();
    const lines = stmts.filter((s) => s.seq > 0).map((s) => `${s.namespace}:${s.seq} ${at}\n`);
    if (lines.length > 0) process.stdout.write(lines.join(""));
    return stmts.map((s) =>
      s.sql.startsWith("SELECT")
        ? { ok: true as const, rowsAffected: 0, rows: [] }
        : { ok: true as const, rowsAffected: 1 },
    );
  }
}

/** The drain: starts, settles, measures itself idle, prints `ready {…}`, then reports arrivals until stdin closes. */
async function drainChild(count: number, dbDir: string): Promise<void> {
  const tables = Array.from({ length: count }, (_, i) => `t${i}`);
  const config = defineConfig({
    app: {
      bench: {
        dbDir,
        flushInterval: 0.005,
        tableFlushThreshold: 1,
        tableMaxWait: 0,
        db: { remote: { writer: "postgres", connection: { url: "postgres://unused@127.0.0.1/x" }, tables } },
      },
    },
  });
  Bun.gc(true);
  const fdsBefore = openFds();
  const rssBefore = process.memoryUsage().rss;
  const svc = new OutboxSyncService(config, { "bench.remote": new ArrivalWriter() }, { logger: benchLogger });
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
  process.stdout.write(
    `ready ${JSON.stringify({ idle_cpu_pct: round(idleCpuPct), fds_per_table: round(fdsPerTable), rss_kb_per_table: round(rssKbPerTable, 0) })}\n`,
  );
  for await (const _ of Bun.stdin.stream()); // the producer closes stdin when done
  await svc.stop();
}

async function run(count: number): Promise<Result> {
  const dir = makeTempDir("sqloutbox-bench-");
  const producers: Outbox[] = [];
  try {
    const dbDir = `${dir.path}/outbox`;
    fs.mkdirSync(dbDir);
    for (let i = 0; i < count; i++) producers.push(new Outbox(`${dbDir}/t${i}.db`, `t${i}`));
    const child = Bun.spawn(["bun", import.meta.path, "--drain-child", String(count), dbDir], {
      stdin: "pipe",
      stdout: "pipe",
      stderr: "inherit",
    });
    const arrived = new Map<string, number>();
    let ready = null as Omit<Result, "tables" | "push_p50_ms" | "push_p99_ms"> | null;
    const reading = (async () => {
      let buffer = "";
      for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) {
        buffer += chunk;
        const lines = buffer.split("\n");
        buffer = lines.pop()!;
        for (const line of lines) {
          if (line.startsWith("ready ")) ready = JSON.parse(line.slice(6));
          else {
            const [key, at] = line.split(" ");
            arrived.set(key!, Number(at));
          }
        }
      }
    })();
    while (ready === null) {
      if (child.exitCode !== null) throw new Error(`the drain child for ${count} tables exited ${child.exitCode}`);
      await Bun.sleep(50);
    }
    const samples: number[] = [];
    for (let i = 0; i < PUSHES + WARMUP_PUSHES; i++) {
      const n = Math.floor(Math.random() * count);
      const t0 = clock();
      const key = `t${n}:${producers[n]!.enqueue(TAG, JSON.stringify([i, "a note"]))}`;
      while (!arrived.has(key)) await Bun.sleep(0.1);
      if (i >= WARMUP_PUSHES) samples.push(arrived.get(key)! - t0);
      await Bun.sleep(3 + Math.random() * 7); // one event at a time, not bursts
    }
    child.stdin.end();
    await reading;
    if ((await child.exited) !== 0) throw new Error(`the drain child for ${count} tables failed`);
    samples.sort((a, b) => a - b);
    const pct = (p: number) => round(samples[Math.min(samples.length - 1, Math.floor(samples.length * p))]!);
    const idle = ready!;
    return {
      tables: count,
      idle_cpu_pct: idle.idle_cpu_pct,
      push_p50_ms: pct(0.5),
      push_p99_ms: pct(0.99),
      fds_per_table: idle.fds_per_table,
      rss_kb_per_table: idle.rss_kb_per_table,
    };
  } finally {
    for (const q of producers) q.close();
    dir.cleanup();
  }
}

if (process.argv[2] === "--drain-child") {
  await drainChild(Number(process.argv[3]), process.argv[4]!);
} else {
  const counts = process.argv.slice(2).map(Number);
  const results: Result[] = [];
  for (const count of counts.length > 0 ? counts : DEFAULT_COUNTS) {
    const r = await run(count);
    results.push(r);
    console.log(JSON.stringify({ bench: "tables", ...r }));
  }
  const first = results[0]!;
  for (const r of results.slice(1)) {
    console.log(
      JSON.stringify({
        bench: "ratio",
        case: "tables",
        tables: r.tables,
        push_p50_vs_first: round(r.push_p50_ms / first.push_p50_ms),
        idle_cpu_vs_first: round(r.idle_cpu_pct / Math.max(first.idle_cpu_pct, 0.01)),
      }),
    );
  }
}
