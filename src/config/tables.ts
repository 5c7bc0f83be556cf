import { tableNameProblem } from "../outbox/table-name.ts";
import { isTable, join, typeName, type Reader, type Table } from "./reader.ts";
import { didYouMean } from "./suggest.ts";
import { DEFAULTS, type TableConfig } from "./types.ts";

/** The keys of an inline `tables` entry. */
export const TABLE_KEYS = ["name", "inject_outbox_seq", "retain_log_days"] as const;

/**
 * Reads a target's `tables` with per-table overrides applied: `inject_outbox_seq` (entry >
 * target's boolean or name list > false) and `retain_log_days` (entry > `retainLogDays`).
 * `claim` registers each table with the app so one table cannot drain to two targets.
 */
export function readTables(r: Reader, raw: Table, path: string, retainLogDays: number, claim: (table: string, keyPath: string) => boolean): TableConfig[] {
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

/**
 * Asks the producer's own question (`tableNameProblem`), so the config never accepts a table the
 * producer refuses to write: a looser check let `"a b"` through, and the drain then created
 * `a b.db`, a queue no producer could ever fill.
 */
function checkTableName(r: Reader, name: string, path: string): boolean {
  const problem = tableNameProblem(name);
  return problem === null ? true : (r.fail(path, problem) ?? false);
}
