import { tableNameProblem } from "../outbox/table-name.ts";
import { readKeys, type Values } from "./declaration.ts";
import { TABLE_KEYS, TARGET_KEYS } from "./keys.ts";
import { isTable, join, typeName, type Reader, type Table } from "./reader.ts";
import { didYouMean } from "./suggest.ts";
import type { TableConfig } from "./types.ts";

/** A target's inject_outbox_seq when it sets none: false, statements go as written, fenced by the ledger. */
const INJECT_DEFAULT = TARGET_KEYS.inject_outbox_seq.default;

/**
 * Reads a target's `tables` with per-table overrides applied: `inject_outbox_seq` (entry >
 * target's boolean or name list > false) and `retain_log_days` (entry > `retainLogDays`).
 * `claim` registers each table with the app so one table cannot drain to two targets.
 */
export function readTables(
  r: Reader,
  raw: Table,
  path: string,
  retainLogDays: number,
  lanes: number,
  claim: (table: string, keyPath: string) => boolean,
): TableConfig[] {
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
    const table = readTable(r, entry, itemPath);
    if (!table) return;
    const seen = firstIndex.get(table.name);
    if (seen !== undefined) {
      r.fail(itemPath, `table "${table.name}" is listed twice (also ${r.key("tables")}[${seen}])`);
      return;
    }
    firstIndex.set(table.name, i);
    if (!claim(table.name, itemPath)) return;
    const inject =
      table.injectOutboxSeq ?? (typeof injectDefault === "boolean" ? injectDefault : injectDefault.has(table.name));
    tables.push({
      name: table.name,
      injectOutboxSeq: inject,
      retainLogDays: table.retainLogDays ?? retainLogDays,
      lanes: table.lanes ?? lanes,
    });
  });
  if (typeof injectDefault !== "boolean") {
    for (const name of injectDefault) {
      if (!firstIndex.has(name))
        r.fail(
          join(path, r.key("inject_outbox_seq")),
          `names table "${name}", which is not in ${r.key("tables")}${didYouMean(name, [...firstIndex.keys()])}`,
        );
    }
  }
  return tables;
}

/** Target-level inject_outbox_seq: true/false for every table, or the names of the tables to inject. */
function readInjectDefault(r: Reader, raw: Table, path: string): boolean | Set<string> {
  const value = r.raw(raw, "inject_outbox_seq");
  const at = join(path, r.key("inject_outbox_seq"));
  if (value === undefined) return INJECT_DEFAULT;
  if (typeof value === "boolean") return value;
  if (!Array.isArray(value))
    return r.fail(at, `expected a boolean or an array of table names, got ${typeName(value)}`) ?? INJECT_DEFAULT;
  const names = new Set<string>();
  value.forEach((name, i) => {
    if (typeof name !== "string") r.fail(`${at}[${i}]`, `expected a table name (string), got ${typeName(name)}`);
    else names.add(r.text(name, `${at}[${i}]`) ?? name);
  });
  return names;
}

/** One entry: a name, or `{ name = "…", … }` with its own settings (null where it leaves the target's). */
function readTable(
  r: Reader,
  entry: unknown,
  path: string,
): ({ name: string } & Values<typeof TABLE_KEYS>) | undefined {
  if (typeof entry === "string") {
    const name = r.text(entry, path);
    // A bare name overrides nothing: every setting is its target's.
    return name !== undefined && checkTableName(r, name, path)
      ? { name, ...readKeys(r, {}, path, TABLE_KEYS) }
      : undefined;
  }
  if (!isTable(entry)) return r.fail(path, `expected a table name or { name = "…" }, got ${typeName(entry)}`);
  r.checkKeys(entry, Object.keys(TABLE_KEYS), path);
  const name = r.string(entry, "name", path);
  if (r.raw(entry, "name") === undefined) return r.fail(join(path, "name"), "required: the table name");
  if (name === undefined || !checkTableName(r, name, join(path, "name"))) return undefined;
  return { name, ...readKeys(r, entry, path, TABLE_KEYS) };
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
