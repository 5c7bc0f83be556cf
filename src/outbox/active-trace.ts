import { formatTraceparent, NO_TRACE, type RowTrace } from "../trace-context.ts";

// @opentelemetry/api keeps what an application registers (its tracer provider, its context
// manager) on globalThis under this symbol, whichever copy of the package registered it. Reading
// that one property is the whole cost of a push when nothing is registered: this module does not
// load the package then (prom-client may have, for its own use).
const OTEL_GLOBAL = Symbol.for("opentelemetry.js.api.1");

/** The two calls of @opentelemetry/api this module makes. */
interface OtelApi {
  context: { active(): unknown };
  trace: {
    getSpanContext(
      context: unknown,
    ): { traceId: string; spanId: string; traceFlags: number; traceState?: { serialize(): string } } | undefined;
    isSpanContextValid(sc: unknown): boolean;
  };
}

/** undefined: not looked up yet; null: the package cannot be loaded here. */
let api: OtelApi | null | undefined;

function loadApi(): OtelApi | null {
  if (api !== undefined) return api;
  try {
    // Synchronously, once: a push is synchronous and must not wait for an import.
    api = require("@opentelemetry/api") as OtelApi;
  } catch {
    api = null;
  }
  return api;
}

/**
 * The trace context of the span active in this process (OpenTelemetry's current context), or
 * NO_TRACE when none is: nothing registered with @opentelemetry/api, the package not installed,
 * no span active, or an invalid span context. Never throws.
 */
export function activeTrace(): RowTrace {
  const registered = (globalThis as { [OTEL_GLOBAL]?: { context?: unknown } })[OTEL_GLOBAL];
  if (registered === undefined || registered.context === undefined) return NO_TRACE;
  const otel = loadApi();
  if (otel === null) return NO_TRACE;
  try {
    const sc = otel.trace.getSpanContext(otel.context.active());
    if (sc === undefined || !otel.trace.isSpanContextValid(sc)) return NO_TRACE;
    const tracestate = sc.traceState?.serialize() || null;
    return {
      traceparent: formatTraceparent({ traceId: sc.traceId, spanId: sc.spanId, flags: sc.traceFlags & 0xff }),
      tracestate,
    };
  } catch {
    return NO_TRACE;
  }
}
