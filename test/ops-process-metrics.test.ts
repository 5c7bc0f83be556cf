import { expect, test } from "bun:test";
import client from "prom-client";
import { createDrainMetrics } from "../src/ops/metrics.ts";

test("the process metrics the dashboard uses are served; the per-heap-space gauges, which Bun computes by walking the heap, are not", async () => {
  const text = await createDrainMetrics(() => null).text();
  for (const name of ["process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds", "process_max_fds", "process_start_time_seconds"]) {
    expect(text).toContain(`\n${name} `);
  }
  // prom-client's names, written out (not the list the code removes): a default registry serves
  // them, so their absence below is the drain's doing, not a rename.
  const defaults = new client.Registry();
  client.collectDefaultMetrics({ register: defaults });
  const all = await defaults.metrics();
  for (const kind of ["total", "used", "available"]) expect(all).toMatch(new RegExp(`^nodejs_heap_space_size_${kind}_bytes\\{space="old"\\} `, "m"));
  // The drain serves none of them (no sample, no HELP/TYPE), though it keeps the whole-heap gauges.
  expect(text).not.toMatch(/^nodejs_heap_space_size_/m);
  expect(text).not.toContain("nodejs_heap_space_");
  expect(text).toMatch(/^nodejs_heap_size_used_bytes /m);
});
