// W3C Trace Context (https://www.w3.org/TR/trace-context/) as the outbox keeps it: checked at the
// door, stored with the row, read back by the drain. Pure: no I/O, no OpenTelemetry import, so the
// producer, the queue, the drain and the SQL comments share one reading of the format.

/** The trace context a row is stored with: a `traceparent` header and its `tracestate`, or nulls. */
export interface RowTrace {
  traceparent: string | null;
  tracestate: string | null;
}

/** What a producer may pass with a push: the two W3C headers, as strings (absent or null: none). */
export interface TraceContextInput {
  traceparent?: string | null;
  tracestate?: string | null;
}

/** A row without trace context. */
export const NO_TRACE: RowTrace = Object.freeze({ traceparent: null, tracestate: null });

/** The parts of a version-00 `traceparent`: 32 and 16 lowercase hex digits and the flags byte. */
export interface Traceparent {
  traceId: string;
  spanId: string;
  /** The trace-flags byte; bit 0 is "sampled". */
  flags: number;
}

// version "00": exactly 55 characters. A later version keeps these four fields first and may add
// more after a "-" (the spec's forward compatibility); "ff" is never valid.
const ZERO_TRACE = "0".repeat(32);
const ZERO_SPAN = "0".repeat(16);
/** W3C: at most 32 list members, at most 512 characters a header is expected to carry. */
const MAX_TRACESTATE_MEMBERS = 32;
const MAX_TRACESTATE_CHARS = 512;
// A tracestate member: `key=value`, key a simple or `tenant@system` name, value printable ASCII
// without `,` and `=`, not ending in a space.
const TRACESTATE_MEMBER =
  /^(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]$/;

/**
 * Reads a `traceparent` header, or returns null when it is not one. A later version than 00 is
 * read by its first four fields, as the spec asks; an all-zero trace or span id is invalid.
 */
export function parseTraceparent(text: string): Traceparent | null {
  if (typeof text !== "string" || text.length < 55) return null;
  // A loop over char codes, not a regular expression: this runs on every push that passes a context.
  for (let i = 0; i < 55; i++) {
    const c = text.charCodeAt(i);
    if (i === 2 || i === 35 || i === 52 ? c !== 45 /* - */ : !((c >= 48 && c <= 57) || (c >= 97 && c <= 102)))
      return null;
  }
  const version = text.slice(0, 2);
  if (version === "ff" || (text.length > 55 && (version === "00" || text.charCodeAt(55) !== 45))) return null;
  const traceId = text.slice(3, 35);
  const spanId = text.slice(36, 52);
  if (traceId === ZERO_TRACE || spanId === ZERO_SPAN) return null;
  return { traceId, spanId, flags: Number.parseInt(text.slice(53, 55), 16) };
}

/** The version-00 header of `parts`: what the outbox stores and the drain sends on. */
export function formatTraceparent(parts: Traceparent): string {
  return `00-${parts.traceId}-${parts.spanId}-${parts.flags.toString(16).padStart(2, "0")}`;
}

/**
 * Whether `text` is a `traceparent` exactly as the outbox stores it (version 00, 55 characters of
 * lowercase hex and dashes): what the drain checks before it puts one into an SQL comment, so a
 * row written by something else than `push` can never put a quote or a `*​/` into a statement.
 */
export function isStoredTraceparent(text: string | null): text is string {
  return (
    typeof text === "string" &&
    text.length === 55 &&
    text.charCodeAt(0) === 48 &&
    text.charCodeAt(1) === 48 &&
    parseTraceparent(text) !== null
  );
}

/** Why a `tracestate` header is not one, or null when it is (empty members are allowed, as the spec says). */
export function tracestateProblem(text: string): string | null {
  if (text.length > MAX_TRACESTATE_CHARS)
    return `tracestate is ${text.length} characters, over ${MAX_TRACESTATE_CHARS}`;
  // The common header is one member: checked without splitting.
  if (text.indexOf(",") < 0) {
    const member = text.trim();
    return member === "" || TRACESTATE_MEMBER.test(member)
      ? null
      : `tracestate member ${JSON.stringify(member.slice(0, 64))} is not key=value`;
  }
  const members = text
    .split(",")
    .map((m) => m.trim())
    .filter((m) => m !== "");
  if (members.length > MAX_TRACESTATE_MEMBERS)
    return `tracestate has ${members.length} members, over ${MAX_TRACESTATE_MEMBERS}`;
  const keys = new Set<string>();
  for (const member of members) {
    if (!TRACESTATE_MEMBER.test(member))
      return `tracestate member ${JSON.stringify(member.slice(0, 64))} is not key=value`;
    const key = member.slice(0, member.indexOf("="));
    if (keys.has(key)) return `tracestate names ${JSON.stringify(key)} twice`;
    keys.add(key);
  }
  return null;
}

/** A trace context checked at the door: what to store, and what was wrong with what was given (null: nothing). */
export interface CheckedTrace {
  trace: RowTrace;
  problem: string | null;
}

/**
 * Checks what a producer passed. A `traceparent` that is not one is dropped with its `tracestate`
 * (a tracestate means nothing without it); a bad `tracestate` alone is dropped and the traceparent
 * kept, as the W3C spec asks of a receiver. Never throws: the event is stored either way — an
 * observability header must never cost the business event — and `problem` says what was dropped.
 */
export function checkTraceContext(input: TraceContextInput): CheckedTrace {
  if (typeof input !== "object" || input === null)
    return { trace: NO_TRACE, problem: `the trace context must be { traceparent, tracestate }, got ${typeof input}` };
  const { traceparent, tracestate } = input;
  if (traceparent === undefined || traceparent === null) {
    const problem =
      tracestate === undefined || tracestate === null ? null : "a tracestate without a traceparent was dropped";
    return { trace: NO_TRACE, problem };
  }
  if (typeof traceparent !== "string")
    return { trace: NO_TRACE, problem: `traceparent must be a string, got ${typeof traceparent}` };
  const parsed = parseTraceparent(traceparent);
  if (parsed === null)
    return {
      trace: NO_TRACE,
      problem: `${JSON.stringify(traceparent.slice(0, 80))} is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>, lowercase, ids not all zero)`,
    };
  const stored = traceparent.length === 55 && traceparent.startsWith("00-") ? traceparent : formatTraceparent(parsed);
  if (tracestate === undefined || tracestate === null || tracestate === "")
    return { trace: { traceparent: stored, tracestate: null }, problem: null };
  const problem =
    typeof tracestate === "string"
      ? tracestateProblem(tracestate)
      : `tracestate must be a string, got ${typeof tracestate}`;
  if (problem !== null)
    return {
      trace: { traceparent: stored, tracestate: null },
      problem: `${problem}; the tracestate was dropped, the traceparent kept`,
    };
  return { trace: { traceparent: stored, tracestate }, problem: null };
}
