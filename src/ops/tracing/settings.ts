import { isHttpUrl, TRACE_PROTOCOLS, type TraceProtocol } from "../../config/keys.ts";
import type { TracingConfig } from "../../config/types.ts";
import { ConfigError } from "../../errors.ts";
import { VERSION } from "../../version.ts";

/** How the drain exports its spans: everything resolved, nothing left to look up. */
export interface TraceSettings {
  /** The full URL spans are POSTed to (`…/v1/traces`). */
  url: string;
  protocol: TraceProtocol;
  /** Sent with every export; secrets. */
  headers: Record<string, string>;
  /** The resource's attributes: service.name, service.version and OTEL_RESOURCE_ATTRIBUTES'. */
  resource: Record<string, string>;
  maxQueueSpans: number;
  maxSpansPerSecond: number;
  exportTimeoutMs: number;
}

/** The OTLP/HTTP port of a collector on this machine: where `enabled = true` without an endpoint exports. */
const DEFAULT_ENDPOINT = "http://localhost:4318";

/**
 * Resolves the export from `[tracing]` (`config`) and the standard variables in `env`: each
 * `[tracing]` key that is set wins over its variable (the file is the deliberate choice; the
 * environment the ambient one). Tracing is on when `enabled = true`, or an endpoint is known
 * (`endpoint`, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT), unless
 * `enabled = false`, OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. Returns null when off.
 * A variable that cannot be used throws ConfigError naming it.
 */
export function traceSettings(config: TracingConfig, env: Record<string, string | undefined>): TraceSettings | null {
  if (config.enabled === false) return null;
  if (
    config.enabled === null &&
    (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === "true" ||
      env.OTEL_TRACES_EXPORTER?.trim().toLowerCase() === "none")
  )
    return null;
  const url = traceUrl(config, env);
  if (url === null) return null;
  const resource = parsePairs(env.OTEL_RESOURCE_ATTRIBUTES ?? "", "OTEL_RESOURCE_ATTRIBUTES");
  resource["service.name"] =
    config.serviceName ?? nonEmpty(env.OTEL_SERVICE_NAME) ?? resource["service.name"] ?? "sqloutbox";
  resource["service.version"] ??= VERSION;
  const headers = {
    ...parsePairs(env.OTEL_EXPORTER_OTLP_HEADERS ?? "", "OTEL_EXPORTER_OTLP_HEADERS"),
    ...parsePairs(env.OTEL_EXPORTER_OTLP_TRACES_HEADERS ?? "", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"),
    ...config.headers,
  };
  return {
    url,
    protocol: config.protocol ?? protocolFrom(env),
    headers,
    resource,
    maxQueueSpans: config.maxQueueSpans,
    maxSpansPerSecond: config.maxSpansPerSecond,
    exportTimeoutMs: config.exportTimeoutMs,
  };
}

/**
 * The traces URL: `[tracing] endpoint` + /v1/traces, else the signal's own variable as is, else the base
 * variable + /v1/traces.
 */
function traceUrl(config: TracingConfig, env: Record<string, string | undefined>): string | null {
  if (config.endpoint !== null) return withPath(config.endpoint);
  const own = nonEmpty(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
  if (own !== undefined) return checkedUrl(own, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  const base = nonEmpty(env.OTEL_EXPORTER_OTLP_ENDPOINT);
  if (base !== undefined) return withPath(checkedUrl(base, "OTEL_EXPORTER_OTLP_ENDPOINT"));
  return config.enabled === true ? withPath(DEFAULT_ENDPOINT) : null;
}

function withPath(base: string): string {
  return `${base.replace(/\/+$/, "")}/v1/traces`;
}

function checkedUrl(text: string, variable: string): string {
  if (!isHttpUrl(text))
    throw new ConfigError(
      `${variable}=${JSON.stringify(text)} is not an http:// or https:// URL (the collector's OTLP/HTTP endpoint, e.g. http://127.0.0.1:4318)`,
      { keyPath: variable },
    );
  return text;
}

function protocolFrom(env: Record<string, string | undefined>): TraceProtocol {
  for (const variable of ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"]) {
    const value = nonEmpty(env[variable]);
    if (value === undefined) continue;
    if ((TRACE_PROTOCOLS as readonly string[]).includes(value)) return value as TraceProtocol;
    throw new ConfigError(
      `${variable}=${JSON.stringify(value)}: the drain exports over OTLP/HTTP, as "http/protobuf" (the default) or "http/json"${value === "grpc" ? "; gRPC is not supported" : ""}`,
      { keyPath: variable },
    );
  }
  return "http/protobuf";
}

/**
 * `key1=value1,key2=value2`, each part percent-decoded (the format of OTEL_EXPORTER_OTLP_HEADERS and
 * OTEL_RESOURCE_ATTRIBUTES).
 */
export function parsePairs(text: string, variable: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of text.split(",")) {
    if (part.trim() === "") continue;
    const eq = part.indexOf("=");
    if (eq <= 0)
      throw new ConfigError(
        `${variable}: ${JSON.stringify(part.trim())} is not key=value (the format is key1=value1,key2=value2)`,
        { keyPath: variable },
      );
    try {
      out[decodeURIComponent(part.slice(0, eq).trim())] = decodeURIComponent(part.slice(eq + 1).trim());
    } catch {
      throw new ConfigError(
        `${variable}: ${JSON.stringify(part.slice(0, eq).trim())} has a malformed percent-encoding`,
        { keyPath: variable },
      );
    }
  }
  return out;
}

function nonEmpty(value: string | undefined): string | undefined {
  const v = value?.trim();
  return v === undefined || v === "" ? undefined : v;
}
