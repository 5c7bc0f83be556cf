import type { Database } from "bun:sqlite";
import { StorageError } from "../errors.ts";
import { type Layout, type PendingCount, QUEUE_EXTRA_COLUMNS, type QueueLayout } from "./layout.ts";
import { LEAN, LEAN_QUEUE_DDL, ORD_PENDING_SQL } from "./layout-lean.ts";
import { COUNTER_PENDING_SQL, hasPendingCounter, LEGACY } from "./layout-legacy.ts";

/*
 * The on-disk format, in two layouts (layout.ts): lean for the files we create, legacy for the
 * reference's. Both get the dead log, `outbox_meta` and `outbox_group` through idempotent
 * migrations; each layout adds its own delivered log and triggers.
 *
 * Every row carries its group (`grp`): the seq of the first row of the local transaction that wrote
 * it (a `pushMany`, an `outbox.transaction`), NULL for a row enqueued alone. A transaction holds the
 * write lock from its first row to its commit, so a group is a contiguous run of seqs in the file
 * and, within each namespace, a contiguous run of the chain. A group that spans namespaces (one
 * file holding several tables) is also recorded in `outbox_group` with its last seq and its
 * namespaces, so the drain can deliver it whole.
 */

/** Each layout's format, counting and writing (one file each: layout-lean.ts, layout-legacy.ts). */
export const LAYOUTS: Record<QueueLayout, Layout> = { lean: LEAN, legacy: LEGACY };

/** The worker index of both layouts. */
// The reference's worker index doubles as our O(log n) tail/head lookup:
// max(seq)/min(seq) WHERE namespace=? AND synced=? is one descent of this b-tree.
const WORKER_INDEX_DDL = `CREATE INDEX IF NOT EXISTS idx_outbox_worker ON outbox_queue (namespace, synced, seq)`;
/**
 * A table served by a tenant template is read tenant by tenant (each its own database): its rows
 * by tenant, in seq order, are one index seek away. Made with a file's first tenant row (and by the
 * drain for rows written before), so files without tenants never pay for it on insert.
 */
export const TENANT_INDEX = "idx_outbox_tenant";
export const TENANT_INDEX_DDL = `CREATE INDEX IF NOT EXISTS ${TENANT_INDEX} ON outbox_queue (namespace, synced, tenant, seq)`;

/** The next free seq of a lean file (one column, `seq`): the enqueue bench fills a file in bulk from it. */
export { NEXT_SEQ_SQL } from "./layout-lean.ts";

/**
 * How a migrated file (one an Outbox opened) of `layout` counts pending rows; only an unmigrated reference
 * file has to scan.
 */
export function layoutPendingCount(layout: QueueLayout): PendingCount {
  return LAYOUTS[layout].pendingCount;
}

/** The query of each way of counting a namespace's pending rows (`?1` is the namespace; one column, `pending`). */
const PENDING_COUNT_SQL: Record<PendingCount, string> = {
  ord: ORD_PENDING_SQL,
  counter: COUNTER_PENDING_SQL,
  scan: "SELECT count(*) AS pending FROM outbox_queue WHERE namespace = ?1 AND synced = 0",
};

/** The query of a namespace's pending count (`?1` is the namespace; one column, `pending`). */
export function pendingCountSql(how: PendingCount): string {
  return PENDING_COUNT_SQL[how];
}

/** Which way `pendingCountSql` can count in this file (see PendingCount). */
export function pendingCountIn(db: Database): PendingCount {
  if (tableColumns(db, "outbox_queue").includes("ord")) return "ord";
  return hasPendingCounter(db) ? "counter" : "scan";
}

/** Columns of outbox_dead_log (after seq); added one by one if a table of that name pre-exists. */
const DEAD_COLUMNS: ReadonlyArray<readonly [string, string]> = [
  ["namespace", "TEXT NOT NULL DEFAULT ''"],
  ["source", "TEXT NOT NULL DEFAULT ''"],
  ["tag", "TEXT NOT NULL DEFAULT ''"],
  ["payload", "TEXT NOT NULL DEFAULT ''"],
  ["prev_seq", "INTEGER"],
  ["created_at", "TEXT NOT NULL DEFAULT ''"],
  ["attempts", "INTEGER NOT NULL DEFAULT 0"],
  ["error", "TEXT"],
  ["error_class", "TEXT"],
  ["reason", "TEXT NOT NULL DEFAULT ''"],
  ["dead_at", "TEXT NOT NULL DEFAULT ''"],
  ["replayed_at", "TEXT"],
  ["replayed_as_seq", "INTEGER"],
  ["grp", "INTEGER"],
  ["lane_key", "TEXT"],
  ["traceparent", "TEXT"],
  ["tracestate", "TEXT"],
  ["tenant", "TEXT"],
  // What the remote may have done with the row (see LetterRemote in rows.ts): NULL not applied,
  // 'in doubt' (a batch that carried it got no answer), 'applied'. Older readers ignore it.
  ["remote", "TEXT"],
];

/**
 * The letters in doubt, which the drain looks for after every batch applied: a few, in a log that
 * may keep many thousands of replayed letters (retain_replayed_days). Created once the column is.
 */
const DEAD_IN_DOUBT_DDL = `CREATE INDEX IF NOT EXISTS idx_dead_in_doubt ON outbox_dead_log (namespace, seq) WHERE remote = 'in doubt'`;

const ADDED_DDL = [
  `CREATE TABLE IF NOT EXISTS outbox_dead_log (
    seq INTEGER PRIMARY KEY,
    ${DEAD_COLUMNS.map(([n, t]) => `${n} ${t}`).join(",\n    ")}
  )`,
  `CREATE INDEX IF NOT EXISTS idx_dead_log ON outbox_dead_log (namespace, seq)`,
  // Facts about the file itself; `origin` names this queue file in every target's delivery ledger.
  `CREATE TABLE IF NOT EXISTS outbox_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`,
  // Groups that span namespaces: the drain delivers such a group when it heads every namespace it touches.
  `CREATE TABLE IF NOT EXISTS outbox_group (grp INTEGER PRIMARY KEY, last_seq INTEGER NOT NULL, namespaces TEXT NOT NULL)`,
];

/**
 * The newest on-disk format this version reads, kept in `PRAGMA user_version` of the files we own
 * (the reference leaves it 0): each layout keeps its own (Layout.format). In an application's own
 * database (`embedded`), `user_version` and `application_id` are the application's: the format is
 * kept in `outbox_meta` instead. A file with a higher version was written by a newer sqloutbox: it
 * is refused, never "upgraded" backwards.
 */
/**
 * The format of a lean file that holds rows for a tenant (SPEC §4c): an earlier sqloutbox would
 * read past their tenant and deliver them all to one database, so once the first such row is
 * written the file says so (markTenantRows) and those refuse it. A file without one stays at its
 * layout's format, readable by them.
 */
export const TENANT_FORMAT = 5;

/** See above: the newest format this version reads. */
export const FORMAT_VERSION = Math.max(...Object.values(LAYOUTS).map((l) => l.format), TENANT_FORMAT);

/** `PRAGMA application_id` of our files ("sqob"): marks a SQLite file as an outbox file. */
export const APPLICATION_ID = 0x73716f62;

/** The `outbox_meta` key of the file's origin id. */
const ORIGIN_KEY = "origin";
/** The `outbox_meta` keys of an application's own database that holds our tables (see migrate). */
const EMBEDDED_KEY = "embedded";
const FORMAT_KEY = "format";

/** Names of the schema objects both layouts have once migrated (each layout adds its own: Layout.objects). */
const SHARED_OBJECTS = [
  "outbox_queue",
  "outbox_dead_log",
  "idx_dead_log",
  "idx_dead_in_doubt",
  "outbox_meta",
  "outbox_group",
  "idx_outbox_worker",
];

/**
 * What a database is to the outbox: an outbox file of ours (or the reference's), or an application's own
 * database holding our tables.
 */
export interface Ownership {
  /** The application's own database (see migrate's `embed`): its pragmas and other tables are never touched. */
  embedded: boolean;
  /** The database says so itself (`outbox_meta`); false while an adoption (`embed`) is still to be written. */
  marked: boolean;
  /** The format of our tables in it; 0 when they do not exist yet. */
  format: number;
}

/**
 * True when every table, trigger, column and fact we rely on exists, at this version's format (one cheap read
 * of the schema).
 */
function isMigrated(db: Database, own: Ownership): boolean {
  const layout = LAYOUTS[queueLayout(db)];
  const objects = [...SHARED_OBJECTS, ...layout.objects];
  const names = (list: readonly string[]) => list.map((m) => `'${m}'`).join(",");
  const row = db
    .query<{ objects: number; triggers: number; columns: number; dead: number }, []>(
      `SELECT
        (SELECT count(*) FROM sqlite_schema WHERE name IN (${names(objects)})) AS objects,
        (SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND name IN (${names(layout.triggers)})) AS triggers,
        (SELECT count(*) FROM pragma_table_info('outbox_queue') WHERE name IN (${names(QUEUE_EXTRA_COLUMNS.map(([n]) => n))})) AS columns,
        (SELECT count(*) FROM pragma_table_info('outbox_dead_log') WHERE name IN ('seq', ${names(DEAD_COLUMNS.map(([n]) => n))})) AS dead`,
    )
    .get()!;
  return (
    own.marked === own.embedded &&
    row.objects === objects.length &&
    row.triggers === layout.triggers.length &&
    row.columns === QUEUE_EXTRA_COLUMNS.length &&
    row.dead === DEAD_COLUMNS.length + 1 &&
    (own.format === layout.format || (layout === LAYOUTS.lean && own.format === TENANT_FORMAT)) &&
    readOrigin(db) !== null
  );
}

/** Which layout a file has: lean files have the `ord` column (a file without a queue yet reads as legacy). */
export function queueLayout(db: Database): QueueLayout {
  return tableColumns(db, "outbox_queue").includes("ord") ? "lean" : "legacy";
}

/**
 * Creates or upgrades the schema; idempotent and safe against concurrent openers (it re-checks
 * under the write lock). Must be called outside a transaction. Refuses, without writing, a file
 * written by a newer format and a database that belongs to something else (`checkOwnFile`).
 *
 * `embed`: the explicit opt-in of `new SQLMiddleware({ database })` — the outbox may create its
 * `outbox_*` tables in the application's own database, beside the application's tables, leaving
 * its `user_version`, `application_id`, page size and vacuum mode alone. Without it, such a
 * database is refused; and once embedded, only that opt-in may change our tables in it (the drain
 * never creates anything there: it waits for the application to bring them up to date).
 */
export function migrate(db: Database, file: string, options: { embed?: boolean } = {}): void {
  const embed = options.embed === true;
  if (isMigrated(db, checkOwnFile(db, file, { embed }))) return;
  db.run("BEGIN IMMEDIATE");
  try {
    const own = checkOwnFile(db, file, { embed }); // another process may have changed it before we held the lock
    if (!isMigrated(db, own)) {
      if (own.embedded && !embed) {
        throw new StorageError(
          `the outbox tables in ${file} (an application's own database) are ${own.format === 0 ? "missing" : `format ${own.format}`}: the application creates and upgrades them when it opens its outbox with new SQLMiddleware({ database }); the drain never changes that database`,
          file,
        );
      }
      createOrUpgrade(db, own.embedded || embed);
    }
    db.run("COMMIT");
  } catch (e) {
    if (db.inTransaction) db.run("ROLLBACK");
    throw e;
  }
}

function createOrUpgrade(db: Database, embedded: boolean): void {
  // A new file is lean; a file with a queue already keeps the layout it has.
  if (tableColumns(db, "outbox_queue").length === 0) db.run(LEAN_QUEUE_DDL);
  const layout = LAYOUTS[queueLayout(db)];
  db.run(WORKER_INDEX_DDL);
  addMissingColumns(db, "outbox_queue", QUEUE_EXTRA_COLUMNS);
  for (const sql of ADDED_DDL) db.run(sql);
  addMissingColumns(db, "outbox_dead_log", DEAD_COLUMNS);
  db.run(DEAD_IN_DOUBT_DDL);
  layout.migrate(db);
  // The origin is created once, with the file (or the first time we write a reference file),
  // and never changes: the ledger knows this queue by it.
  db.query("INSERT OR IGNORE INTO outbox_meta (key, value) VALUES (?, ?)").run(ORIGIN_KEY, Bun.randomUUIDv7());
  // A file that holds tenants' rows keeps saying so (see TENANT_FORMAT).
  const format =
    layout === LAYOUTS.lean && currentFormat(db, embedded) === TENANT_FORMAT ? TENANT_FORMAT : layout.format;
  writeFormat(db, embedded, format);
}

/** The format a file of ours says it is at (0: none yet). */
function currentFormat(db: Database, embedded: boolean): number {
  if (embedded) return Number(readMeta(db, FORMAT_KEY) ?? 0);
  return db.query<{ v: number }, []>("SELECT user_version AS v FROM pragma_user_version").get()!.v;
}

function writeFormat(db: Database, embedded: boolean, format: number): void {
  if (embedded) {
    const meta = db.query(
      "INSERT INTO outbox_meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    );
    meta.run(EMBEDDED_KEY, "1");
    meta.run(FORMAT_KEY, String(format));
  } else {
    db.run(`PRAGMA application_id = ${APPLICATION_ID}`);
    db.run(`PRAGMA user_version = ${format}`);
  }
}

/**
 * Marks a lean file as holding rows for a tenant (see TENANT_FORMAT), and indexes its rows by
 * tenant (TENANT_INDEX_DDL), before the first is written:
 * inside the write transaction that writes it, or just before an autocommit append (a crash in
 * between leaves a mark and no such row, which only makes an earlier sqloutbox refuse the file).
 */
export function markTenantRows(db: Database): void {
  db.run(TENANT_INDEX_DDL);
  if (queueLayout(db) !== "lean") return; // the reference's layout: the reference reads its own columns only
  const embedded = isEmbedded(db);
  if (currentFormat(db, embedded) < TENANT_FORMAT) writeFormat(db, embedded, TENANT_FORMAT);
}

/**
 * Whether the file may hold rows for a tenant: it indexes its rows by tenant (every file does from
 * its first tenant row, see markTenantRows), or — rows written before the index — a lean file says so.
 */
export function mayHoldTenantRowsIn(db: Database): boolean {
  if (!tableColumns(db, "outbox_queue").includes("tenant")) return false;
  return hasTenantIndex(db) || currentFormat(db, isEmbedded(db)) === TENANT_FORMAT;
}

/** Whether the file indexes its rows by tenant (TENANT_INDEX): reads by tenant are seeks, not scans. */
export function hasTenantIndex(db: Database): boolean {
  return db.query("SELECT 1 FROM sqlite_schema WHERE type = 'index' AND name = ?").get(TENANT_INDEX) !== null;
}

/** This file's origin id (a UUIDv7), or null when it has none yet (a reference file, never opened for writing). */
export function readOrigin(db: Database): string | null {
  return readMeta(db, ORIGIN_KEY);
}

function readMeta(db: Database, key: string): string | null {
  if (!tableColumns(db, "outbox_meta").includes("value")) return null;
  return db.query<{ value: string }, [string]>("SELECT value FROM outbox_meta WHERE key = ?").get(key)?.value ?? null;
}

/** Whether this database is an application's own database holding our tables (see migrate). */
export function isEmbedded(db: Database): boolean {
  return readMeta(db, EMBEDDED_KEY) === "1";
}

/**
 * Throws StorageError unless `db` may be treated as an outbox file: empty (new), an outbox file of
 * our format version or older (the reference's included), and not marked as another
 * application's — or, with `embed` (the application's explicit opt-in) or once embedded, an
 * application's own database holding our tables. A database with tables but no outbox_queue is
 * somebody else's: a producer pointed at `users.db` must not add outbox tables to it.
 */
export function checkOwnFile(db: Database, file: string, options: { embed?: boolean } = {}): Ownership {
  // One snapshot: another process may be creating the schema right now.
  const read = () => {
    const facts = db
      .query<{ version: number; app: number; queue: number; meta: number; tables: string | null }, []>(
        `SELECT (SELECT user_version FROM pragma_user_version) AS version, (SELECT application_id FROM pragma_application_id) AS app,
          (SELECT count(*) FROM pragma_table_info('outbox_queue') WHERE name = 'seq') AS queue,
          (SELECT count(*) FROM pragma_table_info('outbox_meta') WHERE name = 'value') AS meta,
          (SELECT group_concat(name, ', ') FROM (SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name NOT LIKE 'outbox\\_%' ESCAPE '\\' ORDER BY name LIMIT 6)) AS tables`,
      )
      .get()!;
    const meta = (key: string) =>
      facts.meta > 0
        ? (db.query<{ value: string }, [string]>("SELECT value FROM outbox_meta WHERE key = ?").get(key)?.value ?? null)
        : null;
    return { ...facts, embedded: meta(EMBEDDED_KEY) === "1", metaFormat: meta(FORMAT_KEY) };
  };
  const { version, app, queue, tables, embedded, metaFormat } = db.inTransaction ? read() : db.transaction(read)();
  if (embedded || options.embed) {
    // An outbox file of ours that the application adopted as its own database keeps our marks until the
    // adoption is written.
    const format = embedded ? Number(metaFormat ?? 0) : queue > 0 && app === APPLICATION_ID ? version : 0;
    if (format > FORMAT_VERSION) {
      throw new StorageError(
        `the outbox tables in ${file} were written by a newer sqloutbox (format ${format}; this version reads formats up to ${FORMAT_VERSION}): upgrade sqloutbox to use them`,
        file,
      );
    }
    return { embedded: true, marked: embedded, format };
  }
  if (app !== 0 && app !== APPLICATION_ID) {
    throw new StorageError(
      `not an outbox file: ${file} belongs to another application (application_id ${app}); sqloutbox never writes to it`,
      file,
    );
  }
  if (queue === 0 && tables !== null) {
    // Somebody else's database (its user_version, if any, is its own): never ours to change.
    const names = tables.split(", ");
    const shown = names.length > 5 ? `${names.slice(0, 5).join(", ")}, …` : tables;
    throw new StorageError(
      `not an outbox file: ${file} holds other tables (${shown}) and no outbox_queue; sqloutbox never adds its tables to another database (an application keeps its events in its own database only by opening the outbox with new SQLMiddleware({ database }))`,
      file,
    );
  }
  if (version > FORMAT_VERSION) {
    throw new StorageError(
      `outbox file ${file} was written by a newer sqloutbox (format ${version}; this version reads formats up to ${FORMAT_VERSION}): upgrade sqloutbox to use it`,
      file,
    );
  }
  return { embedded: false, marked: false, format: version };
}

function addMissingColumns(db: Database, table: string, columns: ReadonlyArray<readonly [string, string]>): void {
  const have = new Set(tableColumns(db, table));
  for (const [name, type] of columns) {
    if (!have.has(name)) db.run(`ALTER TABLE ${table} ADD COLUMN ${name} ${type}`);
  }
}

/** The column names of a table (empty when it does not exist). */
export function tableColumns(db: Database, table: string): string[] {
  return db
    .query<{ name: string }, [string]>("SELECT name FROM pragma_table_info(?)")
    .all(table)
    .map((r) => r.name);
}
