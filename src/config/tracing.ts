import { isTable, join, typeName, type Reader, type Table } from "./reader.ts";
import { DEFAULTS, TRACE_PROTOCOLS, type TraceProtocol, type TracingConfig } from "./types.ts";

/** The keys of the `[tracing]` table. */
export const TRACING_KEYS = ["enabled", "endpoint", "protocol", "headers", "service_name", "max_queue_spans", "max_spans_per_second", "export_timeout"] as const;

/**
 * Reads `[tracing]` (the OTLP export of delivery spans): what it sets, each key null where it is
 * absent, so the standard OTEL_* variables fill in the rest when `runservice` starts (see
 * src/ops/tracing/settings.ts). `headers` values are secrets (an API key, usually): masked in output.
 */
export function readTracing(r: Reader, doc: Table): TracingConfig {
  const raw = r.raw(doc, "tracing");
  const path = "tracing";
  const none: TracingConfig = { enabled: null, endpoint: null, protocol: null, headers: {}, serviceName: null, maxQueueSpans: DEFAULTS.maxQueueSpans, maxSpansPerSecond: DEFAULTS.maxSpansPerSecond, exportTimeoutMs: DEFAULTS.exportTimeout * 1000 };
  if (raw === undefined) return none;
  if (!isTable(raw)) return r.fail(path, `expected a table ([tracing]), got ${typeName(raw)}`) ?? none;
  r.checkKeys(raw, TRACING_KEYS, path);
  const endpoint = r.string(raw, "endpoint", path) ?? null;
  if (endpoint !== null && !isHttpUrl(endpoint)) r.fail(join(path, r.key("endpoint")), `expected an http:// or https:// URL (the collector's OTLP/HTTP base, e.g. "http://127.0.0.1:4318"), got ${JSON.stringify(endpoint)}`);
  return {
    enabled: r.boolean(raw, "enabled", path) ?? null,
    endpoint,
    protocol: readProtocol(r, raw, path),
    headers: readHeaders(r, raw, path),
    serviceName: r.string(raw, "service_name", path) ?? null,
    maxQueueSpans: r.number(raw, "max_queue_spans", path, { integer: true, min: 1 }) ?? DEFAULTS.maxQueueSpans,
    maxSpansPerSecond: r.number(raw, "max_spans_per_second", path, { min: 1 }) ?? DEFAULTS.maxSpansPerSecond,
    exportTimeoutMs: (r.number(raw, "export_timeout", path, { above: 0 }) ?? DEFAULTS.exportTimeout) * 1000,
  };
}

function readProtocol(r: Reader, raw: Table, path: string): TraceProtocol | null {
  const value = r.string(raw, "protocol", path);
  if (value === undefined) return null;
  if (value === "grpc") return r.fail(join(path, r.key("protocol")), `OTLP over gRPC is not supported: use "http/protobuf" (the collector's port 4318) or "http/json"`) ?? null;
  return r.oneOf(raw, "protocol", path, TRACE_PROTOCOLS) ?? null;
}

/** `headers`: a table of strings sent with every export (`${VAR}` interpolated; the values used are secrets). */
function readHeaders(r: Reader, raw: Table, path: string): Record<string, string> {
  const value = r.raw(raw, "headers");
  const at = join(path, r.key("headers"));
  if (value === undefined) return {};
  if (!isTable(value)) return r.fail(at, `expected a table of strings ({ "x-api-key" = "\${KEY}" }), got ${typeName(value)}`) ?? {};
  const headers: Record<string, string> = {};
  for (const [name, v] of Object.entries(value)) {
    const here = join(at, name);
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) r.fail(here, `${JSON.stringify(name)} is not an HTTP header name`);
    else if (typeof v !== "string") r.fail(here, `expected a string, got ${typeName(v)}`);
    else {
      const text = r.text(v, here, true);
      if (text !== undefined) headers[name] = text;
    }
  }
  return headers;
}

/** True for an absolute http(s) URL. */
export function isHttpUrl(text: string): boolean {
  try {
    const url = new URL(text);
    return url.protocol === "http:" || url.protocol === "https:";
  } catch {
    return false;
  }
}
