// The tracing worker: the OpenTelemetry SDK and the OTLP exporter run here, off the drain's thread.
// Building and encoding a span costs more than the drain spends delivering a row, so on the drain's
// thread it would halve throughput; here it costs the drain a structured clone per batch.
// Started by tracing.ts; build.ts compiles it into the binary as a second entry point.
import { OTLPTraceExporter as JsonExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { OTLPTraceExporter as ProtoExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { TracerProvider } from "@opentelemetry/sdk-trace";
import { VERSION } from "../../version.ts";
import type { FromWorker, ToWorker, WorkerStats } from "./messages.ts";
import { BoundedSpanProcessor } from "./processor.ts";
import type { TraceSettings } from "./settings.ts";
import { SpanWriter } from "./spans.ts";

declare const self: {
  onmessage: ((event: MessageEvent<ToWorker>) => void) | null;
  postMessage(message: FromWorker): void;
};

/** How often the worker tells the drain its counts while spans flow (ms). */
const STATS_INTERVAL_MS = 200;

/**
 * A backstop on the worker's share of a core: at most BUDGET_MS of span building and encoding per
 * WINDOW_MS, whatever spans cost on this machine (the drain's side already hands over at most
 * max_spans_per_second). On a machine whose cores the drain, its database server and the collector
 * share, a worker running flat out took a whole core and the drain lost half its throughput; a
 * batch arriving when the window's budget is spent is dropped, and counted.
 */
const WINDOW_MS = 100;
const BUDGET_MS = 25;
let windowStart = 0;
let spent = 0;
let overBudget = 0;

let toldBusy = false;

/**
 * Whether this window has budget left. The first refusal of a window tells the drain until when:
 * it then drops batches itself, without copying them over only to be dropped here.
 */
function admit(): boolean {
  const now = performance.now();
  if (now - windowStart >= WINDOW_MS) {
    windowStart = now;
    spent = 0;
    toldBusy = false;
  }
  if (spent < BUDGET_MS) return true;
  if (!toldBusy) {
    toldBusy = true;
    self.postMessage({ t: "busy", untilMs: Date.now() + (windowStart + WINDOW_MS - now) });
  }
  return false;
}

/** Charges `ms` of work to the window. */
function charge(ms: number): void {
  spent += ms;
}

let provider: TracerProvider | null = null;
let processor: BoundedSpanProcessor | null = null;
let writer: SpanWriter | null = null;
let processed = 0;
// biome-ignore lint/correctness/noUnusedVariables: read by `??=` in statsSoon (one timer at a time)
let statsTimer: ReturnType<typeof setTimeout> | null = null;

function stats(): WorkerStats {
  return {
    processed,
    exported: processor?.exported ?? 0,
    queueFull: processor?.queueFull ?? 0,
    overBudget,
    exportFailed: processor?.exportFailed ?? 0,
    lastError: processor?.lastError ?? null,
  };
}

/** Tells the drain the counts soon (one message per interval, however many batches arrive). */
function statsSoon(): void {
  statsTimer ??= setTimeout(() => {
    statsTimer = null;
    self.postMessage({ t: "stats", stats: stats() });
    // Exports finish after the spans were written: say so too, so /metrics catches up without new batches.
    if (
      processor !== null &&
      processor.exported + processor.exportFailed + processor.queueFull + overBudget < processed
    )
      statsSoon();
  }, STATS_INTERVAL_MS);
}

function start(settings: TraceSettings): void {
  // The processor exports one batch at a time; the exporter forgets a finished export only after
  // its result callback returned, so a limit of 1 would refuse the export that callback starts.
  const exporterOptions = {
    url: settings.url,
    headers: settings.headers,
    timeoutMillis: settings.exportTimeoutMs,
    concurrencyLimit: 2,
  };
  const exporter =
    settings.protocol === "http/json" ? new JsonExporter(exporterOptions) : new ProtoExporter(exporterOptions);
  processor = new BoundedSpanProcessor(exporter, { maxQueueSpans: settings.maxQueueSpans, charge });
  provider = new TracerProvider({
    resource: resourceFromAttributes(settings.resource),
    spanProcessors: [processor],
    // A batch span links every traced row it carried: up to batch_size (500 by default), not the SDK's 128.
    spanLimits: { linkCountLimit: 100_000, attributeValueLengthLimit: 4096 },
  });
  writer = new SpanWriter(provider.getTracer("sqloutbox", VERSION));
}

self.onmessage = (event: MessageEvent<ToWorker>) => {
  const message = event.data;
  try {
    switch (message.t) {
      case "start":
        start(message.settings);
        self.postMessage({ t: "ready" });
        return;
      case "batch":
      case "event": {
        processed += message.spans;
        statsSoon();
        if (!admit()) {
          overBudget += message.spans;
          return;
        }
        const started = performance.now();
        if (message.t === "batch") writer?.batch(message.batch);
        else writer?.event(message.event);
        charge(performance.now() - started);
        return;
      }
      case "flush":
      case "stop": {
        const { id, timeoutMs } = message;
        const done = message.t === "stop" ? processor?.shutdown(timeoutMs) : processor?.forceFlush(timeoutMs);
        void Promise.resolve(done).finally(() => self.postMessage({ t: "done", id, stats: stats() }));
        return;
      }
    }
  } catch (error) {
    // A span that cannot be written is lost, never the worker.
    self.postMessage({ t: "error", message: (error as Error).message });
  }
};
