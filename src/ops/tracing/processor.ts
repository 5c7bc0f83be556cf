import type { Context } from "@opentelemetry/api";
import { ExportResultCode } from "@opentelemetry/core";
import type { ReadableSpan, Span, SpanExporter, SpanProcessor } from "@opentelemetry/sdk-trace";

/** How the processor batches: queue bound, export batch size, longest wait before an export (ms). */
export interface BoundedProcessorOptions {
  maxQueueSpans: number;
  maxExportSpans?: number;
  delayMs?: number;
  /** Told how long (ms) each export's synchronous part (encoding) took: the worker's CPU budget. */
  charge?: (ms: number) => void;
}

/**
 * The SDK's BatchSpanProcessor, reduced to what the drain needs and counting what it loses: ended
 * spans wait in a bounded queue (a span that finds it full is dropped: `queueFull`); one export at
 * a time takes up to `maxExportSpans` of them; an export that fails loses its spans (`exportFailed`,
 * the collector being down or refusing) rather than retrying them behind newer ones. Written here
 * because the SDK's keeps its drop count private and reports export failures only to its global
 * error handler; the drain must count both in /metrics.
 */
export class BoundedSpanProcessor implements SpanProcessor {
  readonly #exporter: SpanExporter;
  readonly #max: number;
  readonly #batch: number;
  readonly #delayMs: number;
  readonly #charge: (ms: number) => void;
  #queue: ReadableSpan[] = [];
  #exporting: Promise<void> | null = null;
  #timer: ReturnType<typeof setTimeout> | null = null;
  #stopped = false;
  exported = 0;
  queueFull = 0;
  exportFailed = 0;
  lastError: string | null = null;

  constructor(exporter: SpanExporter, options: BoundedProcessorOptions) {
    this.#exporter = exporter;
    this.#max = options.maxQueueSpans;
    this.#batch = Math.min(options.maxExportSpans ?? 512, options.maxQueueSpans);
    this.#delayMs = options.delayMs ?? 500;
    this.#charge = options.charge ?? (() => {});
  }

  onStart(_span: Span, _context: Context): void {}

  onEnd(span: ReadableSpan): void {
    if (this.#stopped || (span.spanContext().traceFlags & 1) === 0) return; // an unsampled span is not exported
    if (this.#queue.length >= this.#max) {
      this.queueFull += 1;
      return;
    }
    this.#queue.push(span);
    if (this.#queue.length >= this.#batch) this.#kick();
    else this.#timer ??= setTimeout(() => this.#kick(), this.#delayMs);
  }

  /** Exports until the queue is empty, or `timeoutMs` passed (what is left stays queued). */
  async forceFlush(timeoutMs = 5_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while ((this.#queue.length > 0 || this.#exporting !== null) && Date.now() < deadline) {
      this.#kick();
      await Promise.race([this.#exporting, Bun.sleep(Math.max(0, deadline - Date.now()))]);
    }
  }

  async shutdown(timeoutMs = 5_000): Promise<void> {
    await this.forceFlush(timeoutMs);
    this.#stopped = true;
    if (this.#timer !== null) clearTimeout(this.#timer);
    await this.#exporter.shutdown().catch(() => {});
  }

  /** Starts an export of the head of the queue unless one is running. */
  #kick(): void {
    if (this.#timer !== null) {
      clearTimeout(this.#timer);
      this.#timer = null;
    }
    if (this.#exporting !== null || this.#queue.length === 0) return;
    const spans = this.#queue.splice(0, this.#batch);
    const started = performance.now();
    this.#exporting = new Promise<void>((resolve) => {
      try {
        this.#exporter.export(spans, (result) => {
          if (result.code === ExportResultCode.SUCCESS) {
            this.exported += spans.length;
            this.lastError = null;
          } else {
            this.exportFailed += spans.length;
            this.lastError = result.error?.message ?? "export failed";
          }
          resolve();
        });
      } catch (error) {
        this.exportFailed += spans.length;
        this.lastError = (error as Error).message;
        resolve();
      }
      this.#charge(performance.now() - started); // the exporter encodes before it returns
    }).then(() => {
      this.#exporting = null;
      if (this.#queue.length >= this.#batch) this.#kick();
      else if (this.#queue.length > 0) this.#timer ??= setTimeout(() => this.#kick(), this.#delayMs);
    });
  }
}
