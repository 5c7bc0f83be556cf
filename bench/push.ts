// What a trace context costs a push (`bun run bench:push`). One JSON line per case, then ratios:
// {"bench":"push","case":…,"p50_us":…,"p99_us":…,"ops_per_s":…}   SQLMiddleware.push into one
//   queue file (lean layout, WAL, synchronous=NORMAL), medians over ROUNDS alternated rounds:
//   - "none": nothing passed, nothing registered with @opentelemetry/api (the package not loaded);
//   - "given": a traceparent and a tracestate passed, checked at the door and stored;
//   - "key": a lane key passed (issue 26), checked at the door and stored with the row;
//   - "otel-idle": an OpenTelemetry context manager registered, no span active (looked up, none);
//   - "otel-active": pushed inside an active span, whose context is taken and stored.
// {"bench":"push-ratio","case":…,"vs_none":…}   each case's p50 over "none", same run.
// The OpenTelemetry cases run last: registering a context manager cannot be undone for "none".
import { mkdtempSync, rmSync } from "node:fs";
import { context, trace } from "@opentelemetry/api";
import { StackContextManager, TracerProvider } from "@opentelemetry/sdk-trace";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { sized } from "./support/smoke.ts";
import { percentile, timeCalls } from "./support/timing.ts";

const OPS = sized(5_000, 200);
const WARMUP = sized(500, 20);
const ROUNDS = sized(5, 1);
const SQL = "INSERT INTO orders (id, customer, amount, note) VALUES (?, ?, ?, ?)";
const ARGS = [123456, "customer-42", 99.99, "a short note"];
const TRACE = {
  traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
  tracestate: "congo=t61rcWkgMzE",
};

const dir = mkdtempSync("/tmp/sqloutbox-bench-push-");
const round = (x: number) => Math.round(x * 100) / 100;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** One round of `op`: p50, p99 (µs) and ops/s. */
function measure(op: () => void): { p50: number; p99: number; opsPerS: number } {
  const { sortedNs, totalNs } = timeCalls(op, OPS, WARMUP);
  return {
    p50: percentile(sortedNs, 0.5) / 1000,
    p99: percentile(sortedNs, 0.99) / 1000,
    opsPerS: OPS / (totalNs / 1e9),
  };
}

const results = new Map<string, Array<ReturnType<typeof measure>>>();
function run(cases: Record<string, () => void>): void {
  for (let r = 0; r < ROUNDS; r++) {
    for (const [name, op] of Object.entries(cases)) {
      const got = results.get(name) ?? [];
      got.push(measure(op));
      results.set(name, got);
    }
  }
}

try {
  const mw = new SQLMiddleware({ dbDir: dir });
  run({
    none: () => mw.push("orders", SQL, ARGS),
    given: () => mw.push("orders", SQL, ARGS, TRACE),
    key: () => mw.push("orders", SQL, ARGS, { key: "customer-42" }),
  });
  context.setGlobalContextManager(new StackContextManager().enable());
  trace.setGlobalTracerProvider(new TracerProvider());
  const tracer = trace.getTracer("bench");
  const span = tracer.startSpan("request");
  const inSpan = trace.setSpan(context.active(), span);
  run({
    "otel-idle": () => mw.push("orders", SQL, ARGS),
    "otel-active": () => context.with(inSpan, () => mw.push("orders", SQL, ARGS)),
    // The same context.with around a push that passes its context: what the lookup itself adds.
    "otel-with-given": () => context.with(inSpan, () => mw.push("orders", SQL, ARGS, TRACE)),
  });
  span.end();
  const none = median(results.get("none")!.map((m) => m.p50));
  for (const [name, rounds] of results) {
    console.log(
      JSON.stringify({
        bench: "push",
        case: name,
        p50_us: round(median(rounds.map((m) => m.p50))),
        p99_us: round(median(rounds.map((m) => m.p99))),
        ops_per_s: Math.round(median(rounds.map((m) => m.opsPerS))),
      }),
    );
  }
  for (const [name, rounds] of results) {
    if (name !== "none")
      console.log(
        JSON.stringify({ bench: "push-ratio", case: name, vs_none: round(median(rounds.map((m) => m.p50)) / none) }),
      );
  }
} finally {
  closeSharedOutboxes();
  rmSync(dir, { recursive: true, force: true });
}
