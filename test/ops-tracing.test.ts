// Delivery spans over OTLP/HTTP, decoded by a local receiver (test/support/otlp-receiver.ts): a
// push inside an active span is delivered in that span's trace, batch spans link their rows,
// failures and dead letters are span events, and an exporter that is down costs delivery nothing
// but counted drops.
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { trace } from "@opentelemetry/api";
import { parseConfigToml } from "../src/config/parse.ts";
import { ConfigError, ConfigIssuesError } from "../src/errors.ts";
import { OutboxSyncService } from "../src/drain/service.ts";
import { SQLMiddleware } from "../src/outbox/middleware.ts";
import { createDrainMetrics } from "../src/ops/metrics.ts";
import { traceSettings } from "../src/ops/tracing/settings.ts";
import { createTracing, TraceObserver, type Tracing } from "../src/ops/tracing/tracing.ts";
import type { ObservedBatch } from "../src/drain/observer.ts";
import { createWriter } from "../src/writers/registry.ts";
import type { OutboxWriter } from "../src/writers/writer.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { registerOtelForTests } from "./support/otel.ts";
import { FaultyWriter, oneApp } from "./support/drain-harness.ts";
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from "./support/otlp-receiver.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();
const TP = (n: number) => `00-${n.toString(16).padStart(32, "a")}-${n.toString(16).padStart(16, "b")}-01`;
const NO_TRACING = oneApp("/unused", {
  x: { writer: "sqlite", connection: { path: "/unused" }, tables: ["t"] },
}).tracing;

function receiver(): OtlpReceiver {
  const r = startOtlpReceiver();
  cleanups.push(() => r.stop());
  return r;
}

function tracingTo(url: string, extra: Partial<Parameters<typeof traceSettings>[0]> = {}): Tracing {
  const settings = traceSettings({ ...NO_TRACING, endpoint: url, protocol: "http/json", ...extra }, {})!;
  const tracing = createTracing(settings);
  cleanups.push(() => tracing.shutdown(1000));
  return tracing;
}

/** A drain of table "t" (and "u") in `dir` into a SQLite file, observed by `tracing`. */
function drain(
  dir: string,
  writer: OutboxWriter,
  tracing: Tracing,
  tuning: Record<string, unknown> = {},
): OutboxSyncService {
  const config = oneApp(
    `${dir}/outbox`,
    { local: { writer: "sqlite", connection: { path: `${dir}/remote.db` }, tables: ["t", "u"] } },
    tuning,
  );
  const svc = new OutboxSyncService(config, { "app.local": writer }, { observer: tracing.observer });
  cleanups.push(() => svc.stop(2000));
  return svc;
}

function remote(dir: string): void {
  const db = new Database(`${dir}/remote.db`, { create: true });
  db.run("PRAGMA journal_mode = WAL");
  db.run("CREATE TABLE t (id INTEGER PRIMARY KEY)");
  db.run("CREATE TABLE u (id INTEGER PRIMARY KEY)");
  db.close();
}

const named = (spans: ReceivedSpan[], name: string) => spans.filter((s) => s.name === name);

/** A temp dir with the remote SQLite file, a receiver, tracing to it and a producer of `{dir}/outbox`. */
function traced(settings: Partial<Parameters<typeof traceSettings>[0]> = {}) {
  const dir = tempDirCleanedBy(cleanups).path;
  remote(dir);
  const rx = receiver();
  const tracing = tracingTo(rx.url, settings);
  const producer = new SQLMiddleware({ dbDir: `${dir}/outbox` });
  return { dir, rx, tracing, producer };
}

describe("[tracing] and the OTEL_* variables", () => {
  const APP = `[app.a]\ndb_dir = "q"\n[app.a.db.r]\nwriter = "sqlite"\ntables = ["t"]\n[app.a.db.r.connection]\npath = "r.db"\n`;
  const tracingOf = (toml: string, env: Record<string, string> = {}) =>
    parseConfigToml(toml + APP, "/x/outbox.toml", env).tracing;

  test("off without an endpoint; on with the standard variable, at its /v1/traces, in protobuf", () => {
    expect(traceSettings(tracingOf(""), {})).toBeNull();
    expect(
      traceSettings(tracingOf(""), {
        OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318/",
        OTEL_SERVICE_NAME: "shop",
        OTEL_EXPORTER_OTLP_HEADERS: "x-api-key=a%20b,tenant=7",
        OTEL_RESOURCE_ATTRIBUTES: "deployment.environment=prod",
      }),
    ).toEqual({
      url: "http://collector:4318/v1/traces",
      protocol: "http/protobuf",
      headers: { "x-api-key": "a b", tenant: "7" },
      resource: { "deployment.environment": "prod", "service.name": "shop", "service.version": expect.any(String) },
      maxQueueSpans: 8192,
      maxSpansPerSecond: 2000,
      exportTimeoutMs: 10_000,
    });
    expect(traceSettings(tracingOf(""), { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://c:4318/custom" })!.url).toBe(
      "http://c:4318/custom",
    );
    expect(
      traceSettings(tracingOf(""), { OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_SDK_DISABLED: "true" }),
    ).toBeNull();
    expect(
      traceSettings(tracingOf(""), { OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_TRACES_EXPORTER: "none" }),
    ).toBeNull();
  });

  test("a [tracing] key wins over its variable; enabled = false turns it off; enabled = true defaults to localhost:4318", () => {
    const toml = `[tracing]\nendpoint = "https://otlp.example.com"\nprotocol = "http/json"\nservice_name = "drain"\nheaders = { "x-api-key" = "\${KEY}" }\nmax_queue_spans = 100\nexport_timeout = 2.5\n`;
    const settings = traceSettings(tracingOf(toml, { KEY: "k1" }), {
      OTEL_EXPORTER_OTLP_ENDPOINT: "http://other:4318",
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf",
      OTEL_SERVICE_NAME: "env",
      OTEL_EXPORTER_OTLP_HEADERS: "x-api-key=env,other=1",
    })!;
    expect(settings).toMatchObject({
      url: "https://otlp.example.com/v1/traces",
      protocol: "http/json",
      headers: { "x-api-key": "k1", other: "1" },
      maxQueueSpans: 100,
      exportTimeoutMs: 2500,
    });
    expect(settings.resource["service.name"]).toBe("drain");
    expect(
      traceSettings(tracingOf("[tracing]\nenabled = false\n"), { OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318" }),
    ).toBeNull();
    expect(traceSettings(tracingOf("[tracing]\nenabled = true\n"), {})!.url).toBe("http://localhost:4318/v1/traces");
  });

  test("what cannot be used is a ConfigError naming the key or the variable", () => {
    const problems = (toml: string) => {
      try {
        tracingOf(toml);
      } catch (e) {
        return (e instanceof ConfigIssuesError ? e.issues : [e as ConfigError]).map((i) => i.where.keyPath);
      }
      return [];
    };
    expect(
      problems(
        `[tracing]\nendpoint = "collector:4318"\nprotocol = "grpc"\nheaders = { "bad name" = "x", n = 1 }\nmax_queue_spans = 0\nsampel = 1\n`,
      ).sort(),
    ).toEqual(
      [
        "tracing.endpoint",
        "tracing.protocol",
        'tracing.headers."bad name"',
        "tracing.headers.n",
        "tracing.max_queue_spans",
        "tracing.sampel",
      ].sort(),
    );
    expect(() => traceSettings(tracingOf(""), { OTEL_EXPORTER_OTLP_ENDPOINT: "collector:4318" })).toThrow(
      /OTEL_EXPORTER_OTLP_ENDPOINT="collector:4318" is not an http/,
    );
    expect(() =>
      traceSettings(tracingOf(""), { OTEL_EXPORTER_OTLP_ENDPOINT: "http://c", OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" }),
    ).toThrow(/gRPC is not supported/);
    expect(() =>
      traceSettings(tracingOf(""), { OTEL_EXPORTER_OTLP_ENDPOINT: "http://c", OTEL_EXPORTER_OTLP_HEADERS: "novalue" }),
    ).toThrow(ConfigError);
  });
});

describe("delivery spans", () => {
  registerOtelForTests();

  test("a push inside an active span is delivered in that span's trace, as its child; the batch span links it", async () => {
    const { dir, rx, tracing, producer } = traced();
    let parent = { traceId: "", spanId: "" };
    let seq = 0;
    trace.getTracer("app").startActiveSpan("POST /orders", (span) => {
      parent = span.spanContext();
      seq = producer.push("t", "INSERT INTO t (id) VALUES (?)", [1]);
      span.end();
    });
    producer.push("t", "INSERT INTO t (id) VALUES (?)", [2]); // no context: no delivery span, but in the batch
    const svc = drain(dir, createWriter("sqlite", { path: `${dir}/remote.db` }), tracing);
    expect((await svc.runOnce()).delivered).toBe(2);
    await tracing.flush();
    await waitFor(
      () => named(rx.spans, "BATCH app.local").length === 1 && named(rx.spans, "deliver t").length === 1,
      "the batch and the delivery span",
    );
    const [delivery] = named(rx.spans, "deliver t");
    const [batch] = named(rx.spans, "BATCH app.local");
    expect(delivery!.traceId).toBe(parent.traceId);
    expect(delivery!.parentSpanId).toBe(parent.spanId);
    expect(delivery!.kind).toBe(5); // CONSUMER (OTLP's enum: the API's + 1)
    expect(delivery!.attributes).toMatchObject({
      "messaging.system": "sqloutbox",
      "messaging.operation.type": "process",
      "messaging.destination.name": "t",
      "messaging.message.id": String(seq),
      "db.system.name": "sqlite",
      "sqloutbox.target": "app.local",
    });
    expect(delivery!.events.map((e) => e.name)).toEqual(["sent"]);
    expect(delivery!.links).toEqual([{ traceId: batch!.traceId, spanId: batch!.spanId, attributes: {} }]);
    expect(delivery!.endMs).toBeGreaterThanOrEqual(delivery!.startMs);
    expect(batch!.kind).toBe(3); // CLIENT
    expect(batch!.attributes).toMatchObject({
      "db.system.name": "sqlite",
      "db.operation.name": "BATCH",
      "db.operation.batch.size": 3, // the fence and two rows
      "sqloutbox.target": "app.local",
      "sqloutbox.engine": "sqlite",
      "sqloutbox.tables": ["t"],
      "sqloutbox.rows": 2,
      "sqloutbox.rows.applied": 2,
      "sqloutbox.attempt": 1,
      "sqloutbox.outcome": "applied",
    });
    expect(batch!.links).toEqual([
      { traceId: parent.traceId, spanId: parent.spanId, attributes: { "messaging.message.id": String(seq) } },
    ]);
    expect(batch!.resource["service.name"]).toBe("sqloutbox");
  });

  test("a batch span links every traced row it carried, and a group is one delivery span", async () => {
    const { dir, rx, tracing, producer } = traced();
    for (let i = 1; i <= 300; i++) producer.push("t", "INSERT INTO t (id) VALUES (?)", [i], { traceparent: TP(i) });
    producer.pushMany(
      "u",
      [
        ["INSERT INTO u (id) VALUES (?)", [1]],
        ["INSERT INTO u (id) VALUES (?)", [2]],
      ],
      { traceparent: TP(999) },
    );
    const svc = drain(dir, createWriter("sqlite", { path: `${dir}/remote.db` }), tracing);
    expect((await svc.runOnce()).delivered).toBe(302);
    await tracing.flush();
    await waitFor(
      () => named(rx.spans, "BATCH app.local").length === 1 && rx.spans.length === 1 + 300 + 1,
      () => `302 spans, got ${rx.spans.length}`,
    );
    const [batch] = named(rx.spans, "BATCH app.local");
    expect(batch!.links).toHaveLength(302);
    expect(new Set(batch!.links.map((l) => l.traceId))).toEqual(
      new Set([...Array.from({ length: 300 }, (_, i) => TP(i + 1).slice(3, 35)), TP(999).slice(3, 35)]),
    );
    const [group] = named(rx.spans, "deliver u");
    expect(group!.traceId).toBe(TP(999).slice(3, 35));
    expect(group!.attributes["messaging.batch.message_count"]).toBe(2);
    expect(
      named(rx.spans, "deliver t")
        .map((s) => s.traceId)
        .sort(),
    ).toEqual(Array.from({ length: 300 }, (_, i) => TP(i + 1).slice(3, 35)).sort());
  });

  test("a failing row shows its failure and its dead-lettering as events with the error class", async () => {
    const { dir, rx, tracing, producer } = traced();
    producer.push("t", "INSERT INTO t (id) VALUES (?)", [1], { traceparent: TP(1) });
    producer.push("t", "INSERT INTO t (id) VALUES (?)", [1], { traceparent: TP(2) }); // a duplicate key: fails every time
    const svc = drain(dir, createWriter("sqlite", { path: `${dir}/remote.db` }), tracing, {
      maxAttempts: 2,
      backoffUnitSeconds: 0.001,
    });
    await waitFor(
      async () => (await svc.runOnce()).deadLettered === 1 || svc.activity()[0]!.deadLettered === 1,
      "the duplicate dead-lettered",
    );
    await tracing.flush();
    await waitFor(
      () => rx.spans.filter((s) => s.traceId === TP(2).slice(3, 35)).length === 2,
      "two spans in the failing row's trace",
    );
    const spans = rx.spans.filter((s) => s.traceId === TP(2).slice(3, 35)).sort((a, b) => a.startMs - b.startMs);
    for (const s of spans) {
      expect(s.name).toBe("deliver t");
      expect(s.parentSpanId).toBe(TP(2).slice(36, 52));
      expect(s.status.code).toBe(2); // ERROR
      expect(s.attributes["error.type"]).toBe("SQLITE_CONSTRAINT_PRIMARYKEY");
    }
    expect(spans.map((s) => s.events.map((e) => e.name))).toEqual([
      ["exception", "sqloutbox.delivery_failed"],
      ["exception", "sqloutbox.delivery_failed", "exception", "sqloutbox.dead_lettered"],
    ]);
    const dead = spans[1]!.events.find((e) => e.name === "sqloutbox.dead_lettered")!;
    expect(dead.attributes).toMatchObject({
      "error.type": "SQLITE_CONSTRAINT_PRIMARYKEY",
      "sqloutbox.reason": "max_attempts",
      "sqloutbox.table": "t",
    });
    expect(spans[0]!.events[1]!.attributes).toMatchObject({
      "sqloutbox.attempt": 1,
      "error.type": "SQLITE_CONSTRAINT_PRIMARYKEY",
    });
    // The batch that carried it says so too.
    const failedBatch = named(rx.spans, "BATCH app.local").find((b) =>
      b.events.some((e) => e.name === "sqloutbox.dead_lettered"),
    )!;
    expect(failedBatch.status.code).toBe(2);
    expect(failedBatch.attributes["sqloutbox.outcome"]).toBe("failed");
  });

  test("a batch that gets no answer is an error span with the exception; its rows get no delivery span yet", async () => {
    const { dir, rx, tracing, producer } = traced();
    producer.push("t", "INSERT INTO t (id) VALUES (?)", [1], { traceparent: TP(1) });
    const writer = new FaultyWriter(createWriter("sqlite", { path: `${dir}/remote.db` }));
    // The ledger's setup goes through; the batch carrying the row does not.
    writer.always = async (stmts, inner) => {
      if (stmts.some((s) => s.seq > 0)) throw new Error("injected: connection refused");
      return inner.writeBatch(stmts);
    };
    const svc = drain(dir, writer, tracing);
    expect((await svc.runOnce()).outages).toEqual(["app.local"]);
    await tracing.flush();
    await waitFor(() => rx.spans.length === 1, "the lost batch's span");
    const [batch] = rx.spans;
    expect(batch!.status).toMatchObject({ code: 2, message: "target app.local: injected: connection refused" });
    expect(batch!.attributes["sqloutbox.outcome"]).toBe("lost");
    expect(batch!.events.map((e) => [e.name, e.attributes["exception.message"]])).toEqual([
      ["exception", "target app.local: injected: connection refused"],
    ]);
  });
});

describe("what tracing may spend", () => {
  test("at most max_spans_per_second are handed over, whole batches, bursts of a second's worth; the rest are counted", () => {
    const posted: unknown[] = [];
    const observer = new TraceObserver(
      (m) => posted.push(m),
      1_000_000,
      (t) => t,
      100,
    );
    const batch = (n: number): ObservedBatch => ({
      app: "a",
      target: "a.r",
      engine: "sqlite",
      dialect: "sqlite",
      statements: n,
      bytes: 0,
      attempt: 1,
      sentAt: Date.now(),
      slices: [
        {
          table: "t",
          rows: Array.from({ length: n }, (_, i) => ({
            seq: i + 1,
            grp: null,
            createdAt: new Date().toISOString(),
            attempts: 0,
            traceparent: TP(i + 1),
            tracestate: null,
          })),
        },
      ],
    });
    for (let i = 0; i < 3; i++) {
      const b = batch(59); // 60 spans with its batch span
      observer.batchSent(b);
      observer.batchAnswered(b, [59], Date.now());
    }
    // 100 allowed: the first batch (100 → 40), the second overdraws (→ −20), the third waits.
    expect(posted).toHaveLength(2);
    expect(observer.droppedBusy).toBe(60);
  });
});

describe("an exporter that is down", () => {
  test("costs delivery nothing: every row is delivered, and the lost spans are counted in /metrics", async () => {
    const { dir, rx, tracing, producer } = traced({ maxQueueSpans: 100, exportTimeoutMs: 500 });
    await rx.stop(); // nothing listens there any more: every export is refused
    for (let i = 1; i <= 2000; i++) producer.push("t", "INSERT INTO t (id) VALUES (?)", [i], { traceparent: TP(i) });
    const svc = drain(dir, createWriter("sqlite", { path: `${dir}/remote.db` }), tracing, { batchSize: 100 });
    let delivered = 0;
    for (let i = 0; i < 40 && delivered < 2000; i++) delivered += (await svc.runOnce()).delivered;
    expect(delivered).toBe(2000);
    // 20 batches of 101 spans each, every one of them counted as lost: a queue of 100 keeps at most
    // 100 while an export is refused, and those are lost with it.
    const lost = () => {
      const c = tracing.counts();
      return c.droppedQueueFull + c.droppedBusy + c.droppedExportFailed;
    };
    await waitFor(
      () => lost() === 2020,
      () => `2020 spans counted as lost, got ${JSON.stringify(tracing.counts())}`,
      10_000,
    );
    const counts = tracing.counts();
    expect(counts.exported).toBe(0);
    expect(counts.droppedExportFailed).toBeGreaterThan(0);
    expect(counts.droppedQueueFull).toBeGreaterThan(0);
    const metrics = createDrainMetrics(() => svc, { tracing });
    const text = await metrics.text();
    expect(text).toMatch(/sqloutbox_trace_spans_dropped_total\{reason="queue_full"\} [1-9]/);
    expect(text).toMatch(/sqloutbox_trace_spans_dropped_total\{reason="busy"\} \d/);
    expect(text).toMatch(/sqloutbox_trace_spans_dropped_total\{reason="export_failed"\} [1-9]/);
    expect(text).toContain("sqloutbox_trace_spans_exported_total 0");
  }, 20_000);

  test("a collector that refuses (HTTP 400) loses those spans, counted; one that answers again gets the next", async () => {
    const { dir, rx, tracing, producer } = traced();
    rx.failWith = 400;
    producer.push("t", "INSERT INTO t (id) VALUES (?)", [1], { traceparent: TP(1) });
    const svc = drain(dir, createWriter("sqlite", { path: `${dir}/remote.db` }), tracing);
    await svc.runOnce();
    await tracing.flush();
    await waitFor(() => tracing.counts().droppedExportFailed === 2, "the refused export counted");
    rx.failWith = null;
    producer.push("t", "INSERT INTO t (id) VALUES (?)", [2], { traceparent: TP(2) });
    await svc.runOnce();
    await tracing.flush();
    await waitFor(() => tracing.counts().exported === 2, "the next export accepted");
    expect(rx.spans.map((s) => s.name).sort()).toEqual(["BATCH app.local", "deliver t"]);
  });
});
