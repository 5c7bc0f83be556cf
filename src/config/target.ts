import { isAbsolute, resolve } from "node:path";
import { builtinWriters, type BuiltinWriterName } from "../writers/registry.ts";
import type { Dialect } from "../writers/writer.ts";
import { isTable, join, typeName, type Reader, type Table } from "./reader.ts";
import { didYouMean } from "./suggest.ts";
import { DEFAULTS, type TableConfig, type TargetConfig } from "./types.ts";

/** The names `writer = "…"` accepts. */
export const BUILTIN_WRITER_NAMES: readonly BuiltinWriterName[] = ["sqlite", "libsql", "postgres", "mysql"];
const DIALECTS: readonly Dialect[] = ["sqlite", "libsql", "postgres", "mysql"];

/** The keys of an `[app.NAME.db.DB]` table. */
export const TARGET_KEYS = ["writer", "writer_class", "tables", "inject_outbox_seq", "retain_log_days", "dialect", "compat", "connection"] as const;
/** The keys of an inline `tables` entry. */
export const TABLE_KEYS = ["name", "inject_outbox_seq", "retain_log_days"] as const;
const NAME = /^[A-Za-z0-9_-]+$/;

/** What `buildTarget` needs from the enclosing app. */
export interface TargetSource {
  app: string;
  db: string;
  raw: unknown;
  path: string;
  baseDir: string;
  /** The app's retain_log_days: the default for this target's tables. */
  retainLogDays: number;
  /** Registers a table for this target; false (after reporting) when another target has it. */
  claim(table: string, keyPath: string): boolean;
}

/** Validates one `[app.NAME.db.DB]` table; problems go to the reader, undefined when unusable. */
export function buildTarget(r: Reader, input: TargetSource): TargetConfig | undefined {
  const { path, raw } = input;
  if (!NAME.test(input.db)) return r.fail(path, `db name "${input.db}" may only contain letters, digits, "_" and "-"`);
  if (!isTable(raw)) return r.fail(path, `expected a table ([${path}]), got ${typeName(raw)}`);
  r.checkKeys(raw, TARGET_KEYS, path);

  const { writer, writerClass } = readWriter(r, raw, path, input.baseDir);
  const retainLogDays = r.number(raw, "retain_log_days", path, { min: 0 }) ?? input.retainLogDays;
  const tables = readTables(r, raw, path, retainLogDays, input.claim);
  const connection = readConnection(r, raw, path, writer, input.baseDir);
  return {
    name: `${input.app}.${input.db}`,
    app: input.app,
    db: input.db,
    writer,
    writerClass,
    connection,
    dialect: r.oneOf(raw, "dialect", path, DIALECTS) ?? null,
    compat: r.boolean(raw, "compat", path) ?? DEFAULTS.compat,
    tables,
  };
}

function readWriter(r: Reader, raw: Table, path: string, baseDir: string): { writer: string | null; writerClass: string | null } {
  const writer = r.string(raw, "writer", path) ?? null;
  const writerClassRaw = r.string(raw, "writer_class", path) ?? null;
  const hasWriter = r.raw(raw, "writer") !== undefined;
  const hasClass = r.raw(raw, "writer_class") !== undefined;
  if (hasWriter && hasClass) {
    r.fail(join(path, r.key("writer_class")), `set either "${r.key("writer")}" or "${r.key("writer_class")}", not both`);
  } else if (!hasWriter && !hasClass) {
    r.fail(path, `missing "${r.key("writer")}" (one of ${BUILTIN_WRITER_NAMES.join(", ")}) or "${r.key("writer_class")}" ("./file.ts:Export")`);
  }
  if (writer !== null && !(BUILTIN_WRITER_NAMES as readonly string[]).includes(writer)) {
    r.fail(join(path, r.key("writer")), `unknown built-in writer "${writer}"${didYouMean(writer, BUILTIN_WRITER_NAMES)}; built-ins are ${BUILTIN_WRITER_NAMES.join(", ")} (use ${r.key("writer_class")} for your own)`);
  }
  let writerClass: string | null = null;
  if (writerClassRaw !== null) {
    const at = join(path, r.key("writer_class"));
    const split = splitWriterClass(writerClassRaw);
    if (!split.module) r.fail(at, `expected "./path/to/file.ts:ExportName" or "package:ExportName", got "${writerClassRaw}"`);
    else writerClass = `${isRelativePath(split.module) ? resolve(baseDir, split.module) : split.module}:${split.exportName}`;
  }
  return { writer, writerClass };
}

/** `"./w.ts:MyWriter"` → module `./w.ts`, export `MyWriter`; no `:Export` means the default export. */
export function splitWriterClass(spec: string): { module: string; exportName: string } {
  const colon = spec.lastIndexOf(":");
  // A colon right after a drive letter or inside a URL scheme is not an export separator.
  if (colon <= 1 || spec.slice(colon + 1).includes("/") || spec.slice(colon + 1).includes("\\")) {
    return { module: spec.trim(), exportName: "default" };
  }
  return { module: spec.slice(0, colon).trim(), exportName: spec.slice(colon + 1).trim() || "default" };
}

/** `./x`, `../x` and absolute paths are files; anything else is a package specifier. */
export function isRelativePath(spec: string): boolean {
  return spec.startsWith("./") || spec.startsWith("../") || spec === "." || spec === "..";
}

function readTables(r: Reader, raw: Table, path: string, retainLogDays: number, claim: TargetSource["claim"]): TableConfig[] {
  const at = join(path, r.key("tables"));
  const list = r.raw(raw, "tables");
  if (list === undefined) return r.fail(at, "required: the tables (outbox namespaces) this target receives") ?? [];
  if (!Array.isArray(list)) return r.fail(at, `expected an array of table names, got ${typeName(list)}`) ?? [];
  if (list.length === 0) return r.fail(at, "must list at least one table") ?? [];

  const injectDefault = readInjectDefault(r, raw, path);
  const tables: TableConfig[] = [];
  const firstIndex = new Map<string, number>();
  list.forEach((entry, i) => {
    const itemPath = `${at}[${i}]`;
    const table = readTable(r, entry, itemPath, retainLogDays);
    if (!table) return;
    const seen = firstIndex.get(table.name);
    if (seen !== undefined) {
      r.fail(itemPath, `table "${table.name}" is listed twice (also ${r.key("tables")}[${seen}])`);
      return;
    }
    firstIndex.set(table.name, i);
    if (!claim(table.name, itemPath)) return;
    const inject = table.inject ?? (typeof injectDefault === "boolean" ? injectDefault : injectDefault.has(table.name));
    tables.push({ name: table.name, injectOutboxSeq: inject, retainLogDays: table.retainLogDays });
  });
  if (typeof injectDefault !== "boolean") {
    for (const name of injectDefault) {
      if (!firstIndex.has(name)) r.fail(join(path, r.key("inject_outbox_seq")), `names table "${name}", which is not in ${r.key("tables")}${didYouMean(name, [...firstIndex.keys()])}`);
    }
  }
  return tables;
}

/** Target-level inject_outbox_seq: true/false for every table, or the names of the tables to inject. */
function readInjectDefault(r: Reader, raw: Table, path: string): boolean | Set<string> {
  const value = r.raw(raw, "inject_outbox_seq");
  const at = join(path, r.key("inject_outbox_seq"));
  if (value === undefined) return DEFAULTS.injectOutboxSeq;
  if (typeof value === "boolean") return value;
  if (!Array.isArray(value)) return r.fail(at, `expected a boolean or an array of table names, got ${typeName(value)}`) ?? DEFAULTS.injectOutboxSeq;
  const names = new Set<string>();
  value.forEach((name, i) => {
    if (typeof name !== "string") r.fail(`${at}[${i}]`, `expected a table name (string), got ${typeName(name)}`);
    else names.add(r.text(name, `${at}[${i}]`) ?? name);
  });
  return names;
}

function readTable(
  r: Reader,
  entry: unknown,
  path: string,
  retainLogDays: number,
): { name: string; inject?: boolean; retainLogDays: number } | undefined {
  if (typeof entry === "string") {
    const name = r.text(entry, path);
    return name !== undefined && checkTableName(r, name, path) ? { name, retainLogDays } : undefined;
  }
  if (!isTable(entry)) return r.fail(path, `expected a table name or { name = "…" }, got ${typeName(entry)}`);
  r.checkKeys(entry, TABLE_KEYS, path);
  const name = r.string(entry, "name", path);
  if (r.raw(entry, "name") === undefined) return r.fail(join(path, "name"), "required: the table name");
  if (name === undefined || !checkTableName(r, name, join(path, "name"))) return undefined;
  return {
    name,
    inject: r.boolean(entry, "inject_outbox_seq", path),
    retainLogDays: r.number(entry, "retain_log_days", path, { min: 0 }) ?? retainLogDays,
  };
}

/** Table names become file names `{db_dir}/{table}.db`: nothing that could escape db_dir. */
function checkTableName(r: Reader, name: string, path: string): boolean {
  if (name.trim() === "") return r.fail(path, "table name must not be empty") ?? false;
  if (/[/\\\0]/.test(name) || name.startsWith(".")) {
    return r.fail(path, `table name "${name}" must not contain "/", "\\" or NUL, nor start with "." (it names the file {db_dir}/{table}.db)`) ?? false;
  }
  return true;
}

function readConnection(r: Reader, raw: Table, path: string, writer: string | null, baseDir: string): Record<string, unknown> {
  const at = join(path, "connection");
  const value = r.raw(raw, "connection");
  if (value === undefined) {
    checkBuiltinConnection(r, writer, {}, at);
    return {};
  }
  if (!isTable(value)) return r.fail(at, `expected a table ([${at}]), got ${typeName(value)}`) ?? {};
  const connection = interpolateDeep(r, value, at) as Record<string, unknown>;
  resolveLocalPaths(writer, connection, baseDir);
  checkBuiltinConnection(r, writer, connection, at);
  return connection;
}

/** Interpolates `${VAR}` in every string inside the connection table, at any depth. */
function interpolateDeep(r: Reader, value: unknown, path: string): unknown {
  if (typeof value === "string") return r.text(value, path, true) ?? value;
  if (Array.isArray(value)) return value.map((v, i) => interpolateDeep(r, v, `${path}[${i}]`));
  if (isTable(value)) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, interpolateDeep(r, v, join(path, k))]));
  return value;
}

/** A relative sqlite `path` (or libsql `file:` URL) means relative to the config file, not the cwd. */
function resolveLocalPaths(writer: string | null, connection: Record<string, unknown>, baseDir: string): void {
  const path = connection.path;
  if (writer === "sqlite" && typeof path === "string" && path !== "" && path !== ":memory:" && !path.startsWith("file:") && !isAbsolute(path)) {
    connection.path = resolve(baseDir, path);
  }
  for (const key of ["url", "db_url"]) {
    const url = connection[key];
    if (writer === "libsql" && typeof url === "string" && url.startsWith("file:") && !url.startsWith("file:/")) {
      connection[key] = `file:${resolve(baseDir, url.slice("file:".length))}`;
    }
  }
}

/** Checks a built-in writer's `[connection]` against its declared keys (unknown, missing, invalid). */
function checkBuiltinConnection(r: Reader, writer: string | null, connection: Record<string, unknown>, path: string): void {
  const spec = writer === null ? undefined : builtinWriters[writer as BuiltinWriterName];
  if (!spec) return; // unknown writer already reported; an unregistered one is checked when created
  const known = spec.keys.map((k) => k.name);
  for (const key of Object.keys(connection)) {
    if (!known.includes(key)) r.fail(join(path, key), `unknown connection key "${key}" for writer "${writer}"${didYouMean(key, known)}; known keys: ${known.join(", ")}`);
  }
  for (const key of spec.keys) {
    if (key.required && (connection[key.name] === undefined || connection[key.name] === "")) {
      r.fail(join(path, key.name), `required by writer "${writer}": ${key.description}`);
    }
  }
  for (const problem of spec.validate?.(connection) ?? []) r.fail(join(path, problem.key), problem.message);
}
