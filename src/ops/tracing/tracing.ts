import type { DeliveryObserver, ObservedBatch, ObservedRow, RowEvent } from "../../drain/observer.ts";
import { silentLogger, type Logger } from "../../logger.ts";
import type { BatchRecord, EventRecord, FromWorker, SliceRecord, ToWorker, WorkerStats } from "./messages.ts";
import type { TraceSettings } from "./settings.ts";

/** What the tracing export has done since it started, for /metrics. */
export interface TraceCounts {
  exported: number;
  /** Spans dropped because the queue to the exporter was full: the collector is slower than the drain, or down. */
  droppedQueueFull: number;
  /**
   * Spans not made because the drain delivered faster than max_spans_per_second (or the tracing worker's
   * share of a core): whole batches without spans.
   */
  droppedBusy: number;
  /** Spans an export failed to deliver: the collector is down or refused them. */
  droppedExportFailed: number;
}

/** The drain's tracing: the observer to pass to the drain, its counts, and its end. */
export interface Tracing {
  /** Pass as `observer` in the drain's options (runService, OutboxSyncService). */
  readonly observer: DeliveryObserver;
  readonly settings: TraceSettings;
  counts(): TraceCounts;
  /** Resolves once the worker has loaded the SDK (a second or less); spans observed before wait for it. */
  ready(): Promise<void>;
  /** Exports what is queued, waiting at most `timeoutMs`. */
  flush(timeoutMs?: number): Promise<void>;
  /** Exports what is queued (at most `timeoutMs`) and stops the worker. Idempotent. */
  shutdown(timeoutMs?: number): Promise<void>;
}

/** Options of `createTracing`. */
export interface TracingOptions {
  /** Where drops and export errors are said (once a minute at most); silent by default. */
  logger?: Logger;
  /** Applied to every error message before it leaves the process (credentials a driver error may quote). */
  mask?: (text: string) => string;
}

/** How often a run of dropped spans is reported in the log, at most (ms). */
const DROP_LOG_INTERVAL_MS = 60_000;

/**
 * Starts the drain's tracing: a worker thread running the OpenTelemetry SDK, which turns what the
 * drain observes into spans and exports them over OTLP/HTTP to `settings.url`. The drain's side
 * costs one structured clone per batch; nothing waits on the collector. Spans beyond
 * `settings.maxQueueSpans` waiting for export are dropped and counted (`counts()`), as are the
 * spans of an export that fails. An application that compiles sqloutbox into its own executable
 * must list `src/ops/tracing/worker.ts` as an entry point, with sqloutbox's `src` as the build's
 * root (see workerUrl; build.ts does both for `sqloutbox`).
 */
export function createTracing(settings: TraceSettings, options: TracingOptions = {}): Tracing {
  const worker = new Worker(workerUrl());
  worker.unref(); // a drain that forgot shutdown() must still exit
  const logger = options.logger ?? silentLogger;
  const observer = new TraceObserver(
    (message) => worker.postMessage(message),
    settings.maxQueueSpans,
    options.mask ?? ((t) => t),
    settings.maxSpansPerSecond,
  );
  let stats: WorkerStats = { processed: 0, exported: 0, queueFull: 0, overBudget: 0, exportFailed: 0, lastError: null };
  const waiting = new Map<number, () => void>();
  let nextId = 1;
  const ready = Promise.withResolvers<void>();
  let logged = { at: -Infinity, dropped: 0 };
  const counts = (): TraceCounts => ({
    exported: stats.exported,
    droppedQueueFull: observer.dropped + stats.queueFull,
    droppedBusy: observer.droppedBusy + stats.overBudget,
    droppedExportFailed: stats.exportFailed,
  });
  const reportDrops = () => {
    const { droppedQueueFull, droppedBusy, droppedExportFailed } = counts();
    const dropped = droppedQueueFull + droppedBusy + droppedExportFailed;
    const now = Date.now();
    if (dropped === logged.dropped || now - logged.at < DROP_LOG_INTERVAL_MS) return;
    logger.warn(
      `tracing: ${dropped - logged.dropped} spans dropped (in all: ${droppedQueueFull} queue full, ${droppedBusy} over the worker's CPU share, ${droppedExportFailed} failed exports) exporting to ${settings.url}${stats.lastError ? `: ${stats.lastError}` : ""}; delivery goes on`,
    );
    logged = { at: now, dropped };
  };
  worker.onmessage = (event: MessageEvent<FromWorker>) => {
    const message = event.data;
    if (message.t === "ready") {
      ready.resolve();
      return;
    }
    if (message.t === "error") {
      logger.warn(`tracing: a span could not be written: ${message.message}`);
      return;
    }
    if (message.t === "busy") {
      observer.busyUntil = message.untilMs;
      return;
    }
    stats = message.stats;
    observer.processed = stats.processed;
    if (message.t === "done") waiting.get(message.id)?.();
    reportDrops();
  };
  worker.onerror = (event) =>
    logger.error(`tracing: the worker failed: ${(event as ErrorEvent).message}; spans are no longer exported`);
  worker.postMessage({ t: "start", settings } satisfies ToWorker);
  const ask = (t: "flush" | "stop", timeoutMs: number) =>
    new Promise<void>((resolve) => {
      const id = nextId++;
      const timer = setTimeout(finish, timeoutMs + 1000); // a worker that never answers must not hang the drain's stop
      function finish() {
        clearTimeout(timer);
        waiting.delete(id);
        resolve();
      }
      waiting.set(id, finish);
      worker.postMessage({ t, id, timeoutMs } satisfies ToWorker);
    });
  let stopped: Promise<void> | null = null;
  return {
    observer,
    settings,
    counts,
    ready: () => ready.promise,
    flush: (timeoutMs = 5_000) => ask("flush", timeoutMs),
    shutdown: (timeoutMs = 5_000) => {
      stopped ??= ask("stop", timeoutMs).then(() => worker.terminate());
      return stopped;
    },
  };
}

/**
 * Where the worker's code is. In an executable `bun build --compile` made (the module's URL is in
 * Bun's embedded file system), every module shares the entry point's URL and the worker is a
 * second entry point at its path under the build's root: build.ts compiles with `root: "src"`, so
 * it is `ops/tracing/worker.js` there. Otherwise it is the file beside this one.
 */
function workerUrl(): string {
  const compiled = import.meta.url.includes("/$bunfs/") || import.meta.url.includes("/~BUN/");
  return compiled
    ? new URL("./ops/tracing/worker.js", import.meta.url).href
    : new URL("./worker.ts", import.meta.url).href;
}

/**
 * The drain's side of tracing: collects each target's batch and the events its answer caused,
 * and posts them to the worker when the batch is answered. Rows are read into a flat list at that
 * moment (the drain's objects are not kept). When the worker already holds `maxQueueSpans` spans it
 * has not turned into spans yet, a batch's spans are dropped here, and counted.
 */
export class TraceObserver implements DeliveryObserver {
  /** Spans this side dropped for a full queue. */
  dropped = 0;
  /** Spans this side dropped while the worker said it was out of its share of a core. */
  droppedBusy = 0;
  /** The worker is out of its share of a core until then (epoch ms). */
  busyUntil = 0;
  /** Spans the worker reports it has processed (cumulative). */
  processed = 0;
  #posted = 0;
  /** Per target: the batch in flight and the events its answer caused so far. */
  readonly #open = new Map<string, { batch: ObservedBatch; events: EventRecord[] }>();

  /** Spans this side may still hand over: refilled at maxSpansPerSecond, up to a second's worth. */
  #tokens: number;
  #refilledAt = performance.now();

  constructor(
    private readonly post: (message: ToWorker) => void,
    private readonly maxQueueSpans: number,
    private readonly mask: (text: string) => string,
    private readonly maxSpansPerSecond = Number.POSITIVE_INFINITY,
  ) {
    this.#tokens = maxSpansPerSecond;
  }

  /**
   * Whether a batch of `spans` spans may be handed over now. A whole batch or none, so its spans
   * link up; one may overdraw the allowance, the next then waits for it to refill.
   */
  #allowed(spans: number): boolean {
    const now = performance.now();
    this.#tokens = Math.min(
      this.maxSpansPerSecond,
      this.#tokens + ((now - this.#refilledAt) * this.maxSpansPerSecond) / 1000,
    );
    this.#refilledAt = now;
    if (this.#tokens <= 0) return false;
    this.#tokens -= spans;
    return true;
  }

  batchSent(batch: ObservedBatch): void {
    this.#open.set(batch.target, { batch, events: [] });
  }

  batchAnswered(batch: ObservedBatch, applied: readonly number[], at: number): void {
    this.#close(batch, applied, null, at);
  }

  batchLost(batch: ObservedBatch, error: { message: string; errorClass: string }, at: number): void {
    this.#close(
      batch,
      batch.slices.map(() => 0),
      { message: this.mask(error.message), errorClass: error.errorClass },
      at,
    );
  }

  failed(event: RowEvent & { attempt: number; retryAt: number }): void {
    this.#event({
      kind: "failed",
      target: event.target,
      table: event.table,
      head: flat(event.head),
      errorClass: event.errorClass,
      message: this.mask(event.message),
      at: event.at,
      attempt: event.attempt,
      retryAt: event.retryAt,
    });
  }

  deadLettered(event: RowEvent & { reason: string; rows: number }): void {
    this.#event({
      kind: "dead",
      target: event.target,
      table: event.table,
      head: flat(event.head),
      errorClass: event.errorClass,
      message: this.mask(event.message),
      at: event.at,
      reason: event.reason,
      rows: event.rows,
    });
  }

  held(event: { target: string; table: string; reason: string; message: string; at: number; until: number }): void {
    this.#event({
      kind: "held",
      target: event.target,
      table: event.table,
      reason: event.reason,
      message: this.mask(event.message),
      at: event.at,
      until: Number.isFinite(event.until) ? event.until : null,
    });
  }

  /** An event joins the batch in flight on its target; without one it is posted on its own. */
  #event(event: EventRecord): void {
    const open = this.#open.get(event.target);
    if (open !== undefined) {
      open.events.push(event);
      return;
    }
    if (event.kind === "held" || event.head[4] === null) return; // nothing to attach it to
    this.#send({ t: "event", event, spans: 1 }, 1);
  }

  #close(batch: ObservedBatch, applied: readonly number[], lost: BatchRecord["lost"], at: number): void {
    const open = this.#open.get(batch.target);
    this.#open.delete(batch.target);
    const events = open?.batch === batch ? open.events : [];
    let traced = 0;
    for (const slice of batch.slices) for (const row of slice.rows) if (row.traceparent !== null) traced += 1;
    if (at < this.busyUntil || !this.#allowed(1 + events.length + traced)) {
      // Counted, not copied: spans beyond what tracing may spend of a core.
      this.droppedBusy += 1 + events.length + traced;
      return;
    }
    let spans = 1 + events.length;
    const slices: SliceRecord[] = batch.slices.map((slice, i) => {
      const traced: unknown[] = [];
      const rows = slice.rows;
      for (let r = 0; r < rows.length; r++) {
        const row = rows[r]!;
        if (row.traceparent === null) continue;
        traced.push(r, row.seq, row.grp, row.createdAt, row.attempts, row.traceparent, row.tracestate);
        spans += 1;
      }
      return { table: slice.table, count: rows.length, applied: applied[i] ?? 0, traced };
    });
    const record: BatchRecord = {
      app: batch.app,
      target: batch.target,
      engine: batch.engine,
      dialect: batch.dialect,
      statements: batch.statements,
      bytes: batch.bytes,
      attempt: batch.attempt,
      sentAt: batch.sentAt,
      endAt: at,
      lost,
      slices,
      events,
    };
    this.#send({ t: "batch", batch: record, spans }, spans);
  }

  #send(message: ToWorker, spans: number): void {
    const waiting = this.#posted - this.processed;
    // An idle worker takes a batch whatever its size (its own queue bounds what it keeps).
    if (waiting > 0 && waiting + spans > this.maxQueueSpans) {
      this.dropped += spans;
      return;
    }
    this.#posted += spans;
    this.post(message);
  }
}

/** A row flattened as the worker reads it (ROW_FIELDS values, in their order). */
function flat(row: ObservedRow): unknown[] {
  return [row.seq, row.grp, row.createdAt, row.attempts, row.traceparent, row.tracestate];
}
