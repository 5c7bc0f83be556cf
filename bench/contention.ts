import { defineConfig } from "../src/config/define.ts";
import { OutboxSyncService } from "../src/drain/service.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import type { OutboxWriter } from "../src/writers/writer.ts";
import { makeTempDir } from "../test/support/tmp.ts";
import { benchLogger, sized } from "./support/smoke.ts";

const SECONDS = sized(5, 0.5);
const TABLE = "events";
const TAG = `INSERT INTO ${TABLE} (id, note) VALUES (?, ?)`;

/** Child: push flat out for SECONDS, print every push's latency summary. */
function producer(dbDir: string, id: number): void {
  const q = new Outbox(`${dbDir}/${TABLE}.db`, TABLE);
  const lat: number[] = [];
  const end = performance.now() + SECONDS * 1000;
  while (performance.now() < end) {
    const t = performance.now();
    q.enqueue(TAG, JSON.stringify([id, "a short note"]));
    lat.push(performance.now() - t);
  }
  q.close();
  console.log(JSON.stringify(lat));
}

/** Child: drain until told to stop (stdin closes), print how many rows it delivered and over how long after `go`. */
async function drain(dbDir: string): Promise<void> {
  let delivered = 0;
  const writer: OutboxWriter = {
    dialect: "postgres",
    writeBatch: async (stmts) => {
      delivered += stmts.filter((s) => s.seq > 0).length;
      return stmts.map(() => ({ ok: true as const, rowsAffected: 1 }));
    },
  };
  const config = defineConfig({
    app: {
      bench: {
        dbDir,
        flushInterval: 0.005,
        tableFlushThreshold: 1,
        tableMaxWait: 0,
        db: { remote: { writer: "postgres", connection: { url: "postgres://unused@127.0.0.1/x" }, tables: [TABLE] } },
      },
    },
  });
  const svc = new OutboxSyncService(config, { "bench.remote": writer }, { logger: benchLogger });
  await svc.start();
  process.stdout.write("ready\n");
  const start = performance.now();
  for await (const _ of Bun.stdin.stream());
  const seconds = (performance.now() - start) / 1000;
  await svc.stop();
  console.log(JSON.stringify({ delivered, seconds }));
}

async function main(producers: number): Promise<void> {
  const dir = makeTempDir("sqloutbox-bench-");
  try {
    new Outbox(`${dir.path}/${TABLE}.db`, TABLE).close();
    const drainer = Bun.spawn(["bun", import.meta.path, "--drain", dir.path], {
      stdin: "pipe",
      stdout: "pipe",
      stderr: "inherit",
    });
    const out = drainer.stdout.pipeThrough(new TextDecoderStream()).getReader();
    let text = "";
    while (!text.includes("ready\n")) text += (await out.read()).value ?? "";
    const procs = Array.from({ length: producers }, (_, i) =>
      Bun.spawn(["bun", import.meta.path, "--producer", dir.path, String(i)], { stdout: "pipe", stderr: "inherit" }),
    );
    const lat = (await Promise.all(procs.map((p) => new Response(p.stdout).text()))).flatMap(
      (o) => JSON.parse(o) as number[],
    );
    drainer.stdin.end();
    for (let chunk = await out.read(); !chunk.done; chunk = await out.read()) text += chunk.value;
    const drained = JSON.parse(text.trim().split("\n").at(-1)!) as { delivered: number; seconds: number };
    lat.sort((a, b) => a - b);
    const pct = (p: number) => Math.round(lat[Math.min(lat.length - 1, Math.floor(lat.length * p))]! * 1000) / 1000;
    console.log(
      JSON.stringify({
        bench: "contention",
        producers,
        seconds: SECONDS,
        pushes_per_s: Math.round(lat.length / SECONDS),
        push_p50_ms: pct(0.5),
        push_p99_ms: pct(0.99),
        push_p999_ms: pct(0.999),
        push_max_ms: Math.round(lat.at(-1)!),
        pushes_over_100ms: lat.filter((x) => x > 100).length,
        drain_rows_per_s: Math.round(drained.delivered / drained.seconds),
      }),
    );
  } finally {
    dir.cleanup();
  }
}

if (process.argv[2] === "--producer") producer(process.argv[3]!, Number(process.argv[4]));
else if (process.argv[2] === "--drain") await drain(process.argv[3]!);
else await main(Number(process.argv[2] ?? sized(4, 2)));
