import {
  createTraceState,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Link,
  type Span,
  type SpanContext,
  type Tracer,
} from "@opentelemetry/api";
import { millisToHrTime } from "@opentelemetry/core";
import {
  ATTR_DB_OPERATION_BATCH_SIZE,
  ATTR_DB_OPERATION_NAME,
  ATTR_DB_SYSTEM_NAME,
  ATTR_ERROR_TYPE,
  ATTR_EXCEPTION_MESSAGE,
  ATTR_EXCEPTION_TYPE,
  DB_SYSTEM_NAME_VALUE_MYSQL,
  DB_SYSTEM_NAME_VALUE_POSTGRESQL,
} from "@opentelemetry/semantic-conventions";
import { parseTraceparent } from "../../trace-context.ts";
import type { Dialect } from "../../vocabulary.ts";
import { ROW_FIELDS, type BatchRecord, type EventRecord } from "./messages.ts";

// The messaging conventions are still "development" in the semantic-conventions package, whose
// advice is to copy such names rather than import them from its unstable entry point.
const MESSAGING_SYSTEM = "messaging.system";
const MESSAGING_OPERATION_TYPE = "messaging.operation.type";
const MESSAGING_OPERATION_NAME = "messaging.operation.name";
const MESSAGING_DESTINATION_NAME = "messaging.destination.name";
const MESSAGING_MESSAGE_ID = "messaging.message.id";
const MESSAGING_CONSUMER_GROUP_NAME = "messaging.consumer.group.name";
const MESSAGING_BATCH_MESSAGE_COUNT = "messaging.batch.message_count";

/** db.system.name per dialect: the registered value where there is one (libSQL has none: SQLite's). */
const DB_SYSTEM: Record<Dialect, string> = {
  postgres: DB_SYSTEM_NAME_VALUE_POSTGRESQL,
  mysql: DB_SYSTEM_NAME_VALUE_MYSQL,
  sqlite: "sqlite",
  libsql: "sqlite",
};

const at = (ms: number) => millisToHrTime(ms);

/** A row of a flattened list (see ROW_FIELDS). */
interface Row {
  seq: number;
  grp: number | null;
  createdAt: string;
  attempts: number;
  traceparent: string | null;
  tracestate: string | null;
}

function rowAt(list: unknown[], i: number): Row {
  return {
    seq: list[i] as number,
    grp: list[i + 1] as number | null,
    createdAt: list[i + 2] as string,
    attempts: list[i + 3] as number,
    traceparent: list[i + 4] as string | null,
    tracestate: list[i + 5] as string | null,
  };
}

/** The producer's span a row was pushed in, as a remote parent; null when it carries none (or a bad one). */
function producerContext(row: Row): SpanContext | null {
  if (row.traceparent === null) return null;
  const parsed = parseTraceparent(row.traceparent);
  if (parsed === null) return null;
  return {
    traceId: parsed.traceId,
    spanId: parsed.spanId,
    traceFlags: parsed.flags,
    isRemote: true,
    ...(row.tracestate ? { traceState: createTraceState(row.tracestate) } : {}),
  };
}

/**
 * Turns what the drain reported into spans, following OpenTelemetry's messaging and database
 * conventions:
 * - per batch, a CLIENT span `BATCH {target}` from sending to the answer (db.system.name,
 *   db.operation.name "BATCH", db.operation.batch.size, the target, tables, rows, bytes, attempt,
 *   outcome), linked to each traced row's producer span; failures, dead letters and holds its
 *   answer caused are its events; an outage is its error;
 * - per delivered row or group carrying a trace context, a CONSUMER span `deliver {table}` in the
 *   producer's trace, its child, from the push to the remote commit (its time in the queue and on
 *   the wire), linked to the batch span, with a `sent` event when the batch left;
 * - per failed attempt and per dead-lettering, a `deliver {table}` span in the producer's trace
 *   that ends in error, its events carrying the error class.
 */
export class SpanWriter {
  constructor(private readonly tracer: Tracer) {}

  /** Writes a batch's spans; returns how many. */
  batch(b: BatchRecord): number {
    const links: Link[] = [];
    let traced = 0;
    let applied = 0;
    let rows = 0;
    for (const slice of b.slices) {
      applied += slice.applied;
      rows += slice.count;
      for (let i = 0; i < slice.traced.length; i += ROW_FIELDS + 1) {
        const row = rowAt(slice.traced, i + 1);
        const context = producerContext(row);
        // The seq only: a batch links up to batch_size rows, and each attribute is encoded per link.
        if (context !== null) links.push({ context, attributes: { [MESSAGING_MESSAGE_ID]: String(row.seq) } });
      }
    }
    const failed = b.events.some((e) => e.kind !== "held") || b.lost !== null;
    const outcome =
      b.lost !== null
        ? "lost"
        : applied === rows
          ? "applied"
          : applied > 0
            ? "partial"
            : failed
              ? "failed"
              : "not_applied";
    const span = this.tracer.startSpan(
      `BATCH ${b.target}`,
      {
        kind: SpanKind.CLIENT,
        startTime: at(b.sentAt),
        links,
        attributes: {
          [ATTR_DB_SYSTEM_NAME]: DB_SYSTEM[b.dialect],
          [ATTR_DB_OPERATION_NAME]: "BATCH",
          [ATTR_DB_OPERATION_BATCH_SIZE]: b.statements,
          "sqloutbox.app": b.app,
          "sqloutbox.target": b.target,
          "sqloutbox.engine": b.engine,
          "sqloutbox.tables": b.slices.map((s) => s.table),
          "sqloutbox.rows": rows,
          "sqloutbox.rows.applied": applied,
          "sqloutbox.bytes": b.bytes,
          "sqloutbox.attempt": b.attempt,
          "sqloutbox.outcome": outcome,
        },
      },
      ROOT_CONTEXT,
    );
    const batchContext = span.spanContext();
    for (const event of b.events) span.addEvent(eventName(event), eventAttributes(event), at(event.at));
    if (b.lost !== null) {
      span.setAttribute(ATTR_ERROR_TYPE, b.lost.errorClass);
      span.addEvent(
        "exception",
        { [ATTR_EXCEPTION_TYPE]: b.lost.errorClass, [ATTR_EXCEPTION_MESSAGE]: b.lost.message },
        at(b.endAt),
      );
      span.setStatus({ code: SpanStatusCode.ERROR, message: b.lost.message });
    } else if (failed) {
      span.setStatus({ code: SpanStatusCode.ERROR, message: `${rows - applied} of ${rows} rows not applied` });
    }
    span.end(at(b.endAt));
    traced += 1;
    if (b.lost !== null) return traced;
    const base: Attributes = {
      [MESSAGING_SYSTEM]: "sqloutbox",
      [MESSAGING_OPERATION_TYPE]: "process",
      [MESSAGING_OPERATION_NAME]: "deliver",
      [MESSAGING_CONSUMER_GROUP_NAME]: b.target,
      [ATTR_DB_SYSTEM_NAME]: DB_SYSTEM[b.dialect],
      "sqloutbox.app": b.app,
      "sqloutbox.target": b.target,
    };
    const failedHeads = new Set(b.events.flatMap((e) => (e.kind === "held" ? [] : [`${e.table}\0${e.head[0]}`])));
    for (const slice of b.slices) {
      // One span per delivered group (its head's context) or row; a failed group's spans come from its events.
      let open: { grp: number; span: Span; count: number } | null = null;
      const close = () => {
        if (open === null) return;
        if (open.count > 1) open.span.setAttribute(MESSAGING_BATCH_MESSAGE_COUNT, open.count);
        open.span.end(at(b.endAt));
        open = null;
      };
      for (let i = 0; i < slice.traced.length; i += ROW_FIELDS + 1) {
        const index = slice.traced[i] as number;
        const row = rowAt(slice.traced, i + 1);
        if (index >= slice.applied) break;
        if (open !== null && row.grp !== null && row.grp === open.grp) {
          open.count += 1;
          continue;
        }
        close();
        const parent = producerContext(row);
        if (parent === null || failedHeads.has(`${slice.table}\0${row.seq}`)) continue;
        const rowSpan = this.tracer.startSpan(
          `deliver ${slice.table}`,
          {
            kind: SpanKind.CONSUMER,
            startTime: at(Date.parse(row.createdAt)),
            links: [{ context: batchContext }],
            attributes: {
              ...base,
              [MESSAGING_DESTINATION_NAME]: slice.table,
              [MESSAGING_MESSAGE_ID]: String(row.seq),
              "sqloutbox.attempt": row.attempts + 1,
            },
          },
          trace.setSpanContext(ROOT_CONTEXT, parent),
        );
        rowSpan.addEvent("sent", { "sqloutbox.attempt": row.attempts + 1 }, at(b.sentAt));
        traced += 1;
        if (row.grp !== null) open = { grp: row.grp, span: rowSpan, count: 1 };
        else rowSpan.end(at(b.endAt));
      }
      close();
    }
    // Failed and dead-lettered groups: a span each in the producer's trace, ended in error.
    const spans = new Map<string, Span>();
    for (const event of b.events) traced += this.#rowEvent(event, b, spans, batchContext);
    for (const span of spans.values()) span.end(at(b.endAt));
    return traced;
  }

  /** An event outside a batch (a group dead-lettered while planning, a hold): the row's span, if it has a context. */
  event(event: EventRecord): number {
    const spans = new Map<string, Span>();
    const n = this.#rowEvent(event, null, spans, null);
    for (const span of spans.values()) span.end(at(event.at));
    return n;
  }

  /**
   * Adds a failure or dead-lettering of a group to its span in the producer's trace (one span per
   * group per batch: a last failed attempt and its dead-lettering are one span); returns 1 for a new span.
   */
  #rowEvent(event: EventRecord, b: BatchRecord | null, spans: Map<string, Span>, batch: SpanContext | null): number {
    if (event.kind === "held") return 0;
    const head = rowAt(event.head, 0);
    const parent = producerContext(head);
    if (parent === null) return 0;
    const key = `${event.table}\0${head.seq}`;
    let span = spans.get(key);
    let made = 0;
    if (span === undefined) {
      const start = b !== null ? b.sentAt : Date.parse(head.createdAt);
      span = this.tracer.startSpan(
        `deliver ${event.table}`,
        {
          kind: SpanKind.CONSUMER,
          startTime: at(start),
          links: batch === null ? [] : [{ context: batch }],
          attributes: {
            [MESSAGING_SYSTEM]: "sqloutbox",
            [MESSAGING_OPERATION_TYPE]: "process",
            [MESSAGING_OPERATION_NAME]: "deliver",
            [MESSAGING_DESTINATION_NAME]: event.table,
            [MESSAGING_MESSAGE_ID]: String(head.seq),
            [MESSAGING_CONSUMER_GROUP_NAME]: event.target,
            "sqloutbox.target": event.target,
            "sqloutbox.attempt": event.kind === "failed" ? event.attempt : head.attempts,
          },
        },
        trace.setSpanContext(ROOT_CONTEXT, parent),
      );
      spans.set(key, span);
      made = 1;
    }
    span.setAttribute(ATTR_ERROR_TYPE, event.errorClass);
    span.addEvent(
      "exception",
      { [ATTR_EXCEPTION_TYPE]: event.errorClass, [ATTR_EXCEPTION_MESSAGE]: event.message },
      at(event.at),
    );
    span.addEvent(eventName(event), eventAttributes(event), at(event.at));
    span.setStatus({ code: SpanStatusCode.ERROR, message: event.message });
    return made;
  }
}

function eventName(event: EventRecord): string {
  return event.kind === "failed"
    ? "sqloutbox.delivery_failed"
    : event.kind === "dead"
      ? "sqloutbox.dead_lettered"
      : "sqloutbox.table_held";
}

function eventAttributes(event: EventRecord): Attributes {
  const where = { "sqloutbox.table": event.table };
  switch (event.kind) {
    case "failed":
      return {
        ...where,
        [MESSAGING_MESSAGE_ID]: String(event.head[0]),
        [ATTR_ERROR_TYPE]: event.errorClass,
        "sqloutbox.attempt": event.attempt,
        "sqloutbox.retry_at": new Date(event.retryAt).toISOString(),
        "sqloutbox.error": event.message,
      };
    case "dead":
      return {
        ...where,
        [MESSAGING_MESSAGE_ID]: String(event.head[0]),
        [ATTR_ERROR_TYPE]: event.errorClass,
        "sqloutbox.reason": event.reason,
        "sqloutbox.rows": event.rows,
        "sqloutbox.error": event.message,
      };
    case "held":
      return {
        ...where,
        [ATTR_ERROR_TYPE]: event.reason,
        "sqloutbox.hold_reason": event.reason,
        "sqloutbox.error": event.message,
        ...(event.until === null ? {} : { "sqloutbox.retry_at": new Date(event.until).toISOString() }),
      };
  }
}
