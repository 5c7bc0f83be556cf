// A producer for bench/housekeeping.ts: single pushes into namespace `ns` of `file` (argv JSON
// { file, ns, stopFile, perSecond }) at `perSecond` until `stopFile` exists; prints one JSON line
// with its push count and latency percentiles (microseconds) and the worst push.
import fs from "node:fs";
import { Outbox } from "../../src/outbox/outbox.ts";

const spec = JSON.parse(process.argv[2]!) as { file: string; ns: string; stopFile: string; perSecond: number };
const q = new Outbox(spec.file, spec.ns);
const samples: number[] = [];
const started = performance.now();
while (!fs.existsSync(spec.stopFile)) {
  const due = Math.floor(((performance.now() - started) / 1000) * spec.perSecond);
  while (samples.length < due) {
    const t = Bun.nanoseconds();
    q.enqueue("INSERT INTO t (id) VALUES (?)", `[${samples.length}]`);
    samples.push((Bun.nanoseconds() - t) / 1000);
  }
  await Bun.sleep(2);
}
q.close();
samples.sort((a, b) => a - b);
const at = (p: number) => Math.round(samples[Math.min(samples.length - 1, Math.floor(samples.length * p))]!);
process.stdout.write(
  `${JSON.stringify({ pushes: samples.length, p50_us: at(0.5), p99_us: at(0.99), max_us: Math.round(samples.at(-1)!) })}\n`,
);
