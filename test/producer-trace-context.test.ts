// The trace context a producer's events carry: given with push/pushMany/transaction, or taken from
// the span active in OpenTelemetry's context; checked at the door, where a bad header is dropped
// (with a warning) and the event kept.
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { trace } from "@opentelemetry/api";
import { SQLMiddleware } from "../src/index.ts";
import { checkTraceContext, isStoredTraceparent, parseTraceparent, tracestateProblem } from "../src/trace-context.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { registerOtelForTests } from "./support/otel.ts";

const cleanups = cleanupsAfterEach();

const TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TP2 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";

function tracesOf(file: string): Array<{ seq: number; traceparent: string | null; tracestate: string | null }> {
  const db = new Database(file, { readonly: true });
  try {
    return db
      .query<{ seq: number; traceparent: string | null; tracestate: string | null }, []>(
        "SELECT seq, traceparent, tracestate FROM outbox_queue ORDER BY seq",
      )
      .all();
  } finally {
    db.close();
  }
}

/** Warnings process.emitWarning raised while `fn` ran. */
async function warningsDuring(fn: () => void): Promise<Error[]> {
  const seen: Error[] = [];
  const listen = (w: Error) => seen.push(w);
  process.on("warning", listen);
  try {
    fn();
    await Bun.sleep(5); // warnings are emitted on the next tick
  } finally {
    process.off("warning", listen);
  }
  return seen;
}

describe("reading the W3C headers", () => {
  test.each([
    [TP, true],
    ["01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future", true], // a later version: its first four fields
    ["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", false], // version 00 has exactly four
    ["ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false],
    ["00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false], // uppercase
    ["00-00000000000000000000000000000000-00f067aa0ba902b7-01", false],
    ["00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false],
    ["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", false],
    ["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'*/ DROP TABLE t; --", false],
    ["", false],
  ])("parseTraceparent(%j) is %p", (text, ok) => {
    expect(parseTraceparent(text) !== null).toBe(ok);
  });

  test("the drain only ever puts a stored-form traceparent into SQL", () => {
    expect(isStoredTraceparent(TP)).toBe(true);
    expect(isStoredTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x")).toBe(false);
    expect(isStoredTraceparent(`${TP.slice(0, 54)}'`)).toBe(false);
    expect(isStoredTraceparent(null)).toBe(false);
  });

  test.each([
    ["congo=t61rcWkgMzE", null],
    ["rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", null],
    ["tenant@vendor=x, b=y", null],
    ["", null],
    ["Upper=x", "is not key=value"],
    ["a=x,a=y", "twice"],
    ["a=x=y", "is not key=value"],
    [Array.from({ length: 33 }, (_, i) => `k${i}=v`).join(","), "33 members"],
  ])("tracestateProblem(%j)", (text, problem) => {
    const got = tracestateProblem(text);
    if (problem === null) expect(got).toBeNull();
    else expect(got).toContain(problem);
  });

  test("a bad traceparent drops both headers; a bad tracestate alone drops only itself", () => {
    expect(checkTraceContext({ traceparent: "nope", tracestate: "a=b" })).toEqual({
      trace: { traceparent: null, tracestate: null },
      problem: expect.stringContaining("not a W3C traceparent"),
    });
    expect(checkTraceContext({ traceparent: TP, tracestate: "A=b" })).toEqual({
      trace: { traceparent: TP, tracestate: null },
      problem: expect.stringContaining("tracestate was dropped"),
    });
    expect(checkTraceContext({ tracestate: "a=b" }).problem).toContain("without a traceparent");
    expect(checkTraceContext({ traceparent: TP, tracestate: "a=b" })).toEqual({
      trace: { traceparent: TP, tracestate: "a=b" },
      problem: null,
    });
    // A later version is stored as the version-00 header of its first four fields.
    expect(
      checkTraceContext({ traceparent: "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x" }).trace.traceparent,
    ).toBe(TP);
  });
});

describe("push, pushMany and transaction store the trace context", () => {
  test("a context given with push, pushMany and transaction is stored on each of their rows", () => {
    const dir = tempDirCleanedBy(cleanups);
    const mw = new SQLMiddleware({ dbDir: dir.path });
    const sql = "INSERT INTO t (id) VALUES (?)";
    mw.push("t", sql, [1]);
    mw.push("t", sql, [2], { traceparent: TP, tracestate: "congo=t61rcWkgMzE" });
    mw.pushMany(
      "t",
      [
        [sql, [3]],
        [sql, [4]],
      ],
      { traceparent: TP2 },
    );
    mw.transaction(
      () => {
        mw.push("t", sql, [5]); // the transaction's
        mw.push("t", sql, [6], { traceparent: TP2 }); // its own
      },
      { traceparent: TP },
    );
    expect(tracesOf(dir.file("t.db")).map((r) => [r.traceparent, r.tracestate])).toEqual([
      [null, null],
      [TP, "congo=t61rcWkgMzE"],
      [TP2, null],
      [TP2, null],
      [TP, null],
      [TP2, null],
    ]);
  });

  test("a header that is not W3C is dropped with one warning, and the event is stored", async () => {
    const dir = tempDirCleanedBy(cleanups);
    const mw = new SQLMiddleware({ dbDir: dir.path });
    let seq = 0;
    const warnings = await warningsDuring(() => {
      seq = mw.push("t", "INSERT INTO t (id) VALUES (?)", [1], { traceparent: "00-xyz" });
      mw.push("t", "INSERT INTO t (id) VALUES (?)", [2], { traceparent: "bad again" }); // within the minute: counted, not said
    });
    expect(tracesOf(dir.file("t.db"))).toEqual([
      { seq, traceparent: null, tracestate: null },
      { seq: seq + 1, traceparent: null, tracestate: null },
    ]);
    expect(warnings.map((w) => [w.name, (w as Error & { code?: string }).code])).toEqual([
      ["SqloutboxTraceContextWarning", "SQLOUTBOX_TRACE_CONTEXT"],
    ]);
    expect(warnings[0]!.message).toContain('push to "t": "00-xyz" is not a W3C traceparent');
  });
});

describe("the span active in OpenTelemetry's context", () => {
  registerOtelForTests();

  test("a push inside an active span stores that span's context; outside it none; a given one wins", () => {
    const dir = tempDirCleanedBy(cleanups);
    const mw = new SQLMiddleware({ dbDir: dir.path });
    const sql = "INSERT INTO t (id) VALUES (?)";
    const tracer = trace.getTracer("test");
    let active = "";
    tracer.startActiveSpan("request", (span) => {
      const sc = span.spanContext();
      active = `00-${sc.traceId}-${sc.spanId}-01`;
      mw.push("t", sql, [1]);
      mw.pushMany("t", [[sql, [2]]]);
      mw.transaction(() => mw.push("t", sql, [3]));
      mw.push("t", sql, [4], { traceparent: TP });
      mw.push("t", sql, [5], { traceparent: null }); // explicitly none
      span.end();
    });
    mw.push("t", sql, [6]);
    expect(tracesOf(dir.file("t.db")).map((r) => r.traceparent)).toEqual([active, active, active, TP, null, null]);
  });
});
