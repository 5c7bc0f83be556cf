import { resolve } from "node:path";
import type { Dialect } from "../vocabulary.ts";
import { builtinWriter, builtinWriters, type BuiltinWriterName } from "../writers/registry.ts";
import { readConnection } from "./connection.ts";
import { readKeys } from "./declaration.ts";
import { TARGET_KEYS } from "./keys.ts";
import { isTable, join, typeName, type Reader, type Table } from "./reader.ts";
import { didYouMean } from "./suggest.ts";
import { readTables } from "./tables.ts";
import { readTenants } from "./tenant-template.ts";
import type { TableConfig, TargetConfig } from "./types.ts";
import { isRelativePath, splitWriterClass } from "./writer-class-spec.ts";

/** The names `writer = "…"` accepts: the registry's, so a new engine needs no edit here. */
const BUILTIN_WRITER_NAMES = Object.keys(builtinWriters) as BuiltinWriterName[];

/** Db names become part of target names `app.db`. */
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
  /** The app's lanes: the default for this target's tables. */
  lanes: number;
  /** Registers a table for this target; false (after reporting) when another target has it. */
  claim(table: string, keyPath: string): boolean;
}

/** Validates one `[app.NAME.db.DB]` table; problems go to the reader, undefined when unusable. */
export function buildTarget(r: Reader, input: TargetSource): TargetConfig | undefined {
  const { path, raw } = input;
  if (!NAME.test(input.db)) return r.fail(path, `db name "${input.db}" may only contain letters, digits, "_" and "-"`);
  if (!isTable(raw)) return r.fail(path, `expected a table ([${path}]), got ${typeName(raw)}`);
  r.checkKeys(raw, Object.keys(TARGET_KEYS), path);

  const { writer, writerClass } = readWriter(r, raw, path, input.baseDir);
  const { retainLogDays, maxOpenTenants, ...settings } = readKeys(r, raw, path, TARGET_KEYS);
  const tables = readTables(r, raw, path, retainLogDays ?? input.retainLogDays, input.lanes, input.claim);
  const connection = readConnection(r, raw, path, writer, input.baseDir);
  checkCompat(r, path, settings.compat, settings.dialect ?? builtinWriter(writer)?.dialect ?? null);
  checkLanes(r, path, tables, settings.ledger);
  const tenants = readTenants(r, raw, path, { ...settings, connection, maxOpenTenants, writerClass, tables });
  return {
    name: `${input.app}.${input.db}`,
    app: input.app,
    db: input.db,
    writer,
    writerClass,
    connection,
    tenants,
    ...settings,
    tables,
  };
}

/**
 * `compat = true` reproduces the reference's SQLite statement forms: accepted on a postgres or
 * mysql target, it would dead-letter every injected row as unsupported at the first batch.
 */
function checkCompat(r: Reader, path: string, compat: boolean, writes: Dialect | null): void {
  if (compat && (writes === "postgres" || writes === "mysql")) {
    r.fail(
      join(path, r.key("compat")),
      `compat = true reproduces the reference's SQLite statement forms and exists only for sqlite and libsql targets; this target writes ${writes}`,
    );
  }
}

/**
 * Lanes deliver rows out of seq order across keys: only the ledger, with a row per lane, can say
 * which of them a target applied. Without one (or in the compatibility mode, whose outbox_seq
 * absorbs duplicates by a per-file seq) they would land twice after a crash, or never.
 */
function checkLanes(r: Reader, path: string, tables: TableConfig[], ledger: boolean): void {
  for (const [i, table] of tables.entries()) {
    if (table.lanes === 1) continue;
    if (!ledger)
      r.fail(
        `${join(path, r.key("tables"))}[${i}]`,
        `table "${table.name}" has lanes = ${table.lanes}, which need the delivery ledger: this target has ledger = false (set lanes = 1, or ledger = true)`,
      );
    else if (table.injectOutboxSeq)
      r.fail(
        `${join(path, r.key("tables"))}[${i}]`,
        `table "${table.name}" has lanes = ${table.lanes} and is injected (inject_outbox_seq): the compatibility mode keeps one strict order per table (set lanes = 1, or inject_outbox_seq = false)`,
      );
  }
}

function readWriter(
  r: Reader,
  raw: Table,
  path: string,
  baseDir: string,
): { writer: string | null; writerClass: string | null } {
  const writer = r.string(raw, "writer", path) ?? null;
  const writerClassRaw = r.string(raw, "writer_class", path) ?? null;
  const hasWriter = r.raw(raw, "writer") !== undefined;
  const hasClass = r.raw(raw, "writer_class") !== undefined;
  if (hasWriter && hasClass) {
    r.fail(
      join(path, r.key("writer_class")),
      `set either "${r.key("writer")}" or "${r.key("writer_class")}", not both`,
    );
  } else if (!hasWriter && !hasClass) {
    r.fail(
      path,
      `missing "${r.key("writer")}" (one of ${BUILTIN_WRITER_NAMES.join(", ")}) or "${r.key("writer_class")}" ("./file.ts:Export")`,
    );
  }
  if (writer !== null && !(BUILTIN_WRITER_NAMES as readonly string[]).includes(writer)) {
    r.fail(
      join(path, r.key("writer")),
      `unknown built-in writer "${writer}"${didYouMean(writer, BUILTIN_WRITER_NAMES)}; built-ins are ${BUILTIN_WRITER_NAMES.join(", ")} (use ${r.key("writer_class")} for your own)`,
    );
  }
  let writerClass: string | null = null;
  if (writerClassRaw !== null) {
    const at = join(path, r.key("writer_class"));
    const split = splitWriterClass(writerClassRaw);
    if (!split.module)
      r.fail(at, `expected "./path/to/file.ts:ExportName" or "package:ExportName", got "${writerClassRaw}"`);
    else
      writerClass = `${isRelativePath(split.module) ? resolve(baseDir, split.module) : split.module}:${split.exportName}`;
  }
  return { writer, writerClass };
}
