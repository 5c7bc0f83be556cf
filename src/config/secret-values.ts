import { builtinWriter } from "../writers/registry.ts";
import type { OutboxConfig } from "./types.ts";

/** Connection key names that hold credentials whatever the writer: password, token, secret, api_key, auth… */
const SECRET_KEY_NAME = /pass(word|wd)?|pwd|secret|token|auth|credential|(^|_|-)key$|apikey|private/i;

/** Values shorter than this are never masked: masking "1" or "on" would garble every log line. */
const MIN_SECRET_LENGTH = 4;

/**
 * The credential strings inside a config's `[connection]` tables: values of keys the built-in writer
 * marks secret or whose name looks secret, URL passwords, and secret-looking URL query parameters.
 */
export function configSecrets(config: OutboxConfig): string[] {
  return filterSecrets(
    config.apps.flatMap((app) => app.targets.flatMap((t) => connectionSecrets(t.writer, t.connection))),
  );
}

/** The credential strings of one `[connection]` table (see `configSecrets`). */
export function connectionSecrets(writer: string | null, connection: Record<string, unknown>): string[] {
  const spec = builtinWriter(writer);
  const marked = new Set(spec?.keys.filter((k) => k.secret).map((k) => k.name) ?? []);
  const out: string[] = [];
  collect(connection, (key, value) => {
    if (marked.has(key) || SECRET_KEY_NAME.test(key)) out.push(value);
    out.push(...urlSecrets(value));
  });
  return filterSecrets(out);
}

/** Drops empty and too-short values and duplicates. */
export function filterSecrets(values: Iterable<string>): string[] {
  return [...new Set(values)].filter((v) => v.length >= MIN_SECRET_LENGTH);
}

function collect(value: unknown, visit: (key: string, value: string) => void, key = ""): void {
  if (typeof value === "string") visit(key, value);
  else if (Array.isArray(value)) for (const v of value) collect(v, visit, key);
  else if (value && typeof value === "object") for (const [k, v] of Object.entries(value)) collect(v, visit, k);
}

/** The password of `scheme://user:pass@host` and secret-named query parameters (`?authToken=…`). */
function urlSecrets(value: string): string[] {
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(value)) return [];
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return [];
  }
  const out: string[] = [];
  if (url.password) out.push(url.password, decodeURIComponent(url.password));
  for (const [k, v] of url.searchParams) if (SECRET_KEY_NAME.test(k) && v) out.push(v, encodeURIComponent(v));
  return out;
}
