// What the drain's thread tells the tracing worker, and what the worker answers: plain data, cheap
// to structured-clone. Rows are flattened, ROW_FIELDS values each, so a 500-row batch is one array.
import type { Dialect } from "../../vocabulary.ts";
import type { TraceSettings } from "./settings.ts";

/**
 * Values per row in a flattened row list: seq, grp, createdAt (ISO), attempts (before this one), traceparent,
 * tracestate.
 */
export const ROW_FIELDS = 6;

/** Something that happened to one group (its head row flattened) or to a table, at `at` (epoch ms). */
export type EventRecord =
  | {
      kind: "failed";
      target: string;
      table: string;
      head: unknown[];
      errorClass: string;
      message: string;
      at: number;
      attempt: number;
      retryAt: number;
    }
  | {
      kind: "dead";
      target: string;
      table: string;
      head: unknown[];
      errorClass: string;
      message: string;
      at: number;
      reason: string;
      rows: number;
    }
  | { kind: "held"; target: string; table: string; reason: string; message: string; at: number; until: number | null };

/** One table's part of a batch: its rows with a trace context, and how many of all its rows were applied. */
export interface SliceRecord {
  table: string;
  /** Every row of the slice, traced or not. */
  count: number;
  /** Rows from the head on that the target applied. */
  applied: number;
  /** The rows that carry a traceparent, flattened (ROW_FIELDS each), each with its index in the slice first. */
  traced: unknown[];
}

/** A batch and what became of it. */
export interface BatchRecord {
  app: string;
  target: string;
  engine: string;
  dialect: Dialect;
  statements: number;
  bytes: number;
  attempt: number;
  sentAt: number;
  endAt: number;
  /** null: answered; else why there was no answer. */
  lost: { message: string; errorClass: string } | null;
  slices: SliceRecord[];
  /** Failures, dead letters and holds its answer caused, in order. */
  events: EventRecord[];
}

export type ToWorker =
  | { t: "start"; settings: TraceSettings }
  | { t: "batch"; batch: BatchRecord; spans: number }
  | { t: "event"; event: EventRecord; spans: number }
  | { t: "flush"; id: number; timeoutMs: number }
  | { t: "stop"; id: number; timeoutMs: number };

/** The worker's running counts, cumulative since it started. */
export interface WorkerStats {
  /** Spans of every message it has turned into spans (whether exported or not). */
  processed: number;
  exported: number;
  /** Spans its export queue had no room for. */
  queueFull: number;
  /** Spans not written because the worker's share of a core was spent. */
  overBudget: number;
  /** Spans an export failed to deliver (the collector down or refusing). */
  exportFailed: number;
  /** The last export error, if any since the last success. */
  lastError: string | null;
}

export type FromWorker =
  | { t: "ready" }
  | { t: "stats"; stats: WorkerStats }
  | { t: "busy"; untilMs: number }
  | { t: "done"; id: number; stats: WorkerStats }
  | { t: "error"; message: string };
