import { expect, test } from "bun:test";
import client from "prom-client";
import fs from "node:fs";
import path from "node:path";
import { OutboxSyncService } from "../src/drain/service.ts";
import { createDrainMetrics } from "../src/ops/metrics.ts";
import { createWriter } from "../src/writers/registry.ts";
import { oneApp } from "./support/drain-harness.ts";
import { makeTempDir } from "./support/tmp.ts";

test("the process metrics the dashboard uses are served; the per-heap-space gauges, which Bun computes by walking the heap, are not", async () => {
  const text = await createDrainMetrics(() => null).text();
  for (const name of [
    "process_resident_memory_bytes",
    "process_cpu_seconds_total",
    "process_open_fds",
    "process_max_fds",
    "process_start_time_seconds",
  ]) {
    expect(text).toContain(`\n${name} `);
  }
  // prom-client's names, written out (not the list the code removes): a default registry serves
  // them, so their absence below is the drain's doing, not a rename.
  const defaults = new client.Registry();
  client.collectDefaultMetrics({ register: defaults });
  const all = await defaults.metrics();
  for (const kind of ["total", "used", "available"])
    expect(all).toMatch(new RegExp(`^nodejs_heap_space_size_${kind}_bytes\\{space="old"\\} `, "m"));
  // The drain serves none of them (no sample, no HELP/TYPE), though it keeps the whole-heap gauges.
  expect(text).not.toMatch(/^nodejs_heap_space_size_/m);
  expect(text).not.toContain("nodejs_heap_space_");
  expect(text).toMatch(/^nodejs_heap_size_used_bytes /m);
});

test('head_attempts and table_held say what docs/operations.md says: 1 attempt is normal in flight; a table not held reports reason "none" at 0', async () => {
  const dir = makeTempDir();
  const config = oneApp(dir.file("q"), {
    r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["t"] },
  });
  const svc = new OutboxSyncService(config, { "app.r": createWriter("sqlite", { path: dir.file("remote.db") }) });
  try {
    await svc.runOnce();
    const text = await createDrainMetrics(() => svc).text();
    const help = (name: string) => new RegExp(`^# HELP ${name} (.*)$`, "m").exec(text)?.[1];
    const ops = fs.readFileSync(path.join(import.meta.dir, "..", "docs", "operations.md"), "utf8");
    expect(help("sqloutbox_head_attempts")).toContain("0, or 1 while its batch is in flight");
    expect(ops).toContain(
      "| `sqloutbox_head_attempts` | app, target, table | Attempts charged to the head: 0, or 1 while its batch is in flight",
    );
    expect(text).toContain('\nsqloutbox_table_held{app="app",target="app.r",table="t",reason="none"} 0\n');
    expect(help("sqloutbox_table_held")).toContain('0 with reason "none" while it does not');
    expect(ops).toContain('A table not held has one series, `reason="none"`, at 0');
  } finally {
    await svc.stop();
    dir.cleanup();
  }
});
