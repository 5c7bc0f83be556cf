import { expect, test } from "bun:test";
import { createDrainMetrics, HEAP_SPACE_METRICS } from "../src/ops/metrics.ts";

test("the process metrics the dashboard uses are served; the per-heap-space gauges, which Bun computes by walking the heap, are not", async () => {
  const text = await createDrainMetrics(() => null).text();
  for (const name of ["process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds", "process_max_fds", "process_start_time_seconds"]) {
    expect(text).toContain(`\n${name} `);
  }
  for (const name of HEAP_SPACE_METRICS) expect(text).not.toContain(name);
});
