import { readKeys } from "./declaration.ts";
import { TRACING_KEYS } from "./keys.ts";
import { isTable, join, typeName, type Reader, type Table } from "./reader.ts";
import type { TracingConfig } from "./types.ts";

/**
 * Reads `[tracing]` (the OTLP export of delivery spans): what it sets, each key null where it is
 * absent, so the standard OTEL_* variables fill in the rest when `runservice` starts (see
 * src/ops/tracing/settings.ts). `headers` values are secrets (an API key, usually): masked in output.
 */
export function readTracing(r: Reader, doc: Table): TracingConfig {
  const path = "tracing";
  const raw = r.raw(doc, path);
  if (raw !== undefined && !isTable(raw)) r.fail(path, `expected a table ([tracing]), got ${typeName(raw)}`);
  const table: Table = isTable(raw) ? raw : {};
  r.checkKeys(table, Object.keys(TRACING_KEYS), path);
  return { ...readKeys(r, table, path, TRACING_KEYS), headers: readHeaders(r, table, path) };
}

/** `headers`: a table of strings sent with every export (`${VAR}` interpolated; the values used are secrets). */
function readHeaders(r: Reader, raw: Table, path: string): Record<string, string> {
  const value = r.raw(raw, "headers");
  const at = join(path, r.key("headers"));
  if (value === undefined) return {};
  if (!isTable(value))
    return r.fail(at, `expected a table of strings ({ "x-api-key" = "\${KEY}" }), got ${typeName(value)}`) ?? {};
  const headers: Record<string, string> = {};
  for (const [name, v] of Object.entries(value)) {
    const here = join(at, name);
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) r.fail(here, `${JSON.stringify(name)} is not an HTTP header name`);
    else if (typeof v !== "string") r.fail(here, `expected a string, got ${typeName(v)}`);
    else {
      const text = r.text(v, here, (_, used) => [used]);
      if (text !== undefined) headers[name] = text;
    }
  }
  return headers;
}
