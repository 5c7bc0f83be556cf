import { builtinWriter } from "../writers/registry.ts";
import type { OutboxConfig } from "./types.ts";

/** Connection key names that hold credentials whatever the writer: password, token, secret, api_key, auth… */
const SECRET_KEY_NAME = /pass(word|wd)?|pwd|secret|token|auth|credential|(^|_|-)key$|apikey|private/i;

/** Values shorter than this are never masked: masking "1" or "on" would garble every log line. */
const MIN_SECRET_LENGTH = 4;

/**
 * The credential strings inside a config's `[connection]` tables (see `connectionSecrets`). Only
 * the secret is a secret: a URL's password and its secret-named parameters, never the whole URL —
 * so a connection error still says which host, port and database it could not reach.
 */
export function configSecrets(config: OutboxConfig): string[] {
  return filterSecrets(
    config.apps.flatMap((app) => app.targets.flatMap((t) => connectionSecrets(t.writer, t.connection))),
  );
}

/**
 * The credential strings of one `[connection]` table: in a URL, its password and secret-named
 * query parameters (`?authToken=…`); in a `key=value` connection string, its password; any other
 * value of a key the built-in writer marks secret or whose name looks secret, whole.
 */
export function connectionSecrets(writer: string | null, connection: Record<string, unknown>): string[] {
  const spec = builtinWriter(writer);
  const marked = new Set(spec?.keys.filter((k) => k.secret).map((k) => k.name) ?? []);
  const out: string[] = [];
  collect(connection, (key, value) => out.push(...valueSecrets(value, marked.has(key) || SECRET_KEY_NAME.test(key))));
  return filterSecrets(out);
}

/**
 * The secrets a `${VAR}` brought into a `[connection]` value at `key` (see `connectionSecrets`):
 * a variable whose name looks secret (`PG_PASSWORD`, `TURSO_TOKEN`) is a secret whole; any other
 * (`DATABASE_URL`, `DB_HOST`) only for what it holds that is one.
 */
export function variableSecrets(writer: string | null, key: string, name: string, value: string): string[] {
  const spec = builtinWriter(writer);
  const secretKey = SECRET_KEY_NAME.test(key) || spec?.keys.some((k) => k.name === key && k.secret) === true;
  return SECRET_KEY_NAME.test(name) ? [value] : valueSecrets(value, secretKey);
}

/**
 * What of one value is secret: a URL's or connection string's credentials; else the whole value when its key
 * is secret.
 */
function valueSecrets(value: string, secretKey: boolean): string[] {
  const fromUrl = urlSecrets(value);
  if (fromUrl !== null) return fromUrl;
  const fromDsn = dsnSecrets(value);
  if (fromDsn.length > 0) return fromDsn;
  return secretKey ? [value] : [];
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

/**
 * The password of `scheme://user:pass@host` and secret-named query parameters (`?authToken=…`);
 * null when `value` is no URL (or one that does not parse, whose every part may be the secret).
 */
function urlSecrets(value: string): string[] | null {
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(value)) return null;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return null;
  }
  const out: string[] = [];
  if (url.password) out.push(url.password, decodeURIComponent(url.password));
  for (const [k, v] of url.searchParams) if (SECRET_KEY_NAME.test(k) && v) out.push(v, encodeURIComponent(v));
  return out;
}

/**
 * The password of a `key=value` connection string (`host=db password=s3cret`, `Server=db;Pwd=s3cret;`),
 * quoted or not.
 */
function dsnSecrets(value: string): string[] {
  const out: string[] = [];
  for (const m of value.matchAll(/(?:^|[\s;])(?:password|passwd|pwd)\s*=\s*('(?:[^'\\]|\\.)*'|"[^"]*"|[^\s;]+)/gi)) {
    const raw = m[1]!;
    out.push(raw, raw.replace(/^(['"])(.*)\1$/, "$2"));
  }
  return out;
}
