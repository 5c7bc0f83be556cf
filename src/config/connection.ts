import { isAbsolute, resolve } from "node:path";
import { builtinWriter } from "../writers/registry.ts";
import { missingKeys } from "../writers/writer-spec.ts";
import { maskSecrets } from "../masking.ts";
import { hasTenantPlaceholder, TENANT_PLACEHOLDER, withTenant } from "../tenant.ts";
import { isTable, join, typeName, type Reader, type Table } from "./reader.ts";
import { connectionSecrets, variableSecrets } from "./secret-values.ts";
import { didYouMean } from "./suggest.ts";

/** The tenant a template's connection is checked for (see checkBuiltinConnection). */
const SAMPLE_TENANT = "sample-tenant";

/**
 * Reads a target's `[connection]` table: `${VAR}` interpolated at any depth (what the values used
 * hold of credentials is secret: see variableSecrets), local paths made absolute, and checked
 * against a built-in writer's declared keys.
 */
export function readConnection(
  r: Reader,
  raw: Table,
  path: string,
  writer: string | null,
  baseDir: string,
): Record<string, unknown> {
  const at = join(path, "connection");
  const value = r.raw(raw, "connection");
  if (value === undefined) {
    checkBuiltinConnection(r, writer, {}, at);
    return {};
  }
  if (!isTable(value)) return r.fail(at, `expected a table ([${at}]), got ${typeName(value)}`) ?? {};
  // A key whose `${VAR}` is missing is reported once, as missing; validating the raw
  // "${VAR}" text as a URL or number would only add a second, misleading problem.
  const unresolved = new Set<string>();
  const connection = Object.fromEntries(
    Object.entries(value).map(([k, v]) => {
      const before = r.issues.length;
      const out = interpolateDeep(r, v, join(at, k), k, writer);
      if (r.issues.length > before) unresolved.add(k);
      return [k, out];
    }),
  );
  resolveLocalPaths(writer, connection, baseDir);
  checkBuiltinConnection(r, writer, connection, at, unresolved);
  return connection;
}

/** Interpolates `${VAR}` in every string inside the connection table, at any depth; `key` is the innermost key. */
function interpolateDeep(r: Reader, value: unknown, path: string, key: string, writer: string | null): unknown {
  if (typeof value === "string")
    return r.text(value, path, (name, used) => variableSecrets(writer, key, name, used)) ?? value;
  if (Array.isArray(value)) return value.map((v, i) => interpolateDeep(r, v, `${path}[${i}]`, key, writer));
  if (isTable(value))
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [k, interpolateDeep(r, v, join(path, k), k, writer)]),
    );
  return value;
}

/** A relative sqlite `path` (or libsql `file:` URL) means relative to the config file, not the cwd. */
function resolveLocalPaths(writer: string | null, connection: Record<string, unknown>, baseDir: string): void {
  const path = connection.path;
  if (
    writer === "sqlite" &&
    typeof path === "string" &&
    path !== "" &&
    path !== ":memory:" &&
    !path.startsWith("file:") &&
    !isAbsolute(path)
  ) {
    connection.path = resolve(baseDir, path);
  }
  for (const key of ["url", "db_url"]) {
    const url = connection[key];
    if (writer === "libsql" && typeof url === "string" && url.startsWith("file:") && !url.startsWith("file:/")) {
      connection[key] = `file:${resolve(baseDir, url.slice("file:".length))}`;
    }
  }
}

/**
 * Checks a built-in writer's `[connection]` against its declared keys (unknown, missing, invalid).
 * A tenant template is checked as one tenant's connection would be — a check that parses a URL or
 * a number sees a value a tenant's could hold — and its problems quote `{tenant}` where the sample stood.
 */
function checkBuiltinConnection(
  r: Reader,
  writer: string | null,
  template: Record<string, unknown>,
  path: string,
  unresolved: ReadonlySet<string> = new Set(),
): void {
  const spec = builtinWriter(writer);
  if (!spec) return; // unknown writer already reported; an unregistered one is checked when created
  const isTemplate = hasTenantPlaceholder(template);
  const connection = isTemplate ? withTenant(template, SAMPLE_TENANT) : template;
  const shown = (message: string) => (isTemplate ? message.split(SAMPLE_TENANT).join(TENANT_PLACEHOLDER) : message);
  const known = spec.keys.map((k) => k.name);
  for (const key of Object.keys(connection)) {
    if (!known.includes(key))
      r.fail(
        join(path, key),
        `unknown connection key "${key}" for writer "${writer}"${didYouMean(key, known)}; known keys: ${known.join(", ")}`,
      );
  }
  for (const key of missingKeys(spec, connection))
    r.fail(join(path, key.name), `required by writer "${writer}": ${key.description}`);
  // A writer's message may quote a value: never let a credential into a config error.
  const secrets = [...connectionSecrets(writer, connection), ...r.secretValues];
  for (const problem of spec.validate?.(connection) ?? []) {
    if (unresolved.has(problem.key)) continue;
    r.fail(join(path, problem.key), shown(maskSecrets(problem.message, secrets)));
  }
}
