import type { Database } from "bun:sqlite";
import { StorageError } from "../errors.ts";

/*
 * The on-disk format. The two base tables and their two indexes are exactly the reference's, so
 * files stay readable both ways. Everything we add goes in through idempotent migrations the
 * reference tolerates (it only ever names its own columns): extra nullable/defaulted columns on
 * outbox_queue, the outbox_dead_log table, and a pending counter kept by triggers, which therefore
 * stays right even when the reference itself writes the file. We never create the reference's
 * redundant `idx_outbox_prev` / `idx_outbox_prev_unique` indexes (the UNIQUE constraint on
 * prev_seq already has an index), but tolerate them.
 */

const BASE_DDL = [
  `CREATE TABLE IF NOT EXISTS outbox_queue (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at TEXT NOT NULL,
    namespace TEXT NOT NULL,
    source TEXT NOT NULL DEFAULT '',
    tag TEXT NOT NULL,
    payload TEXT NOT NULL,
    prev_seq INTEGER UNIQUE,
    synced INTEGER NOT NULL DEFAULT 0
  )`,
  `CREATE TABLE IF NOT EXISTS outbox_sync_log (
    seq INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL,
    synced_at TEXT NOT NULL
  )`,
  // The reference's worker index doubles as our O(log n) tail/head lookup:
  // max(seq)/min(seq) WHERE namespace=? AND synced=? is one descent of this b-tree.
  `CREATE INDEX IF NOT EXISTS idx_outbox_worker ON outbox_queue (namespace, synced, seq)`,
  `CREATE INDEX IF NOT EXISTS idx_sync_log ON outbox_sync_log (namespace, seq)`,
];

/** Columns we add to outbox_queue: delivery state of the head. */
const QUEUE_EXTRA_COLUMNS: ReadonlyArray<readonly [string, string]> = [
  ["attempts", "INTEGER NOT NULL DEFAULT 0"],
  ["last_error", "TEXT"],
  ["last_error_class", "TEXT"],
  ["last_attempt_at", "TEXT"],
  ["next_attempt_at", "TEXT"],
  // The last seq of the batch the head was sent in, until its outcome is known: after a crash or
  // an outage mid-commit, the drain compares it with the remote MAX(outbox_seq) instead of
  // redelivering rows the remote already applied.
  ["sent_through", "INTEGER"],
];

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
];

const ADDED_DDL = [
  `CREATE TABLE IF NOT EXISTS outbox_dead_log (
    seq INTEGER PRIMARY KEY,
    ${DEAD_COLUMNS.map(([n, t]) => `${n} ${t}`).join(",\n    ")}
  )`,
  `CREATE INDEX IF NOT EXISTS idx_dead_log ON outbox_dead_log (namespace, seq)`,
  // Facts about the file itself; `origin` names this queue file in every target's delivery ledger.
  `CREATE TABLE IF NOT EXISTS outbox_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`,
];

/**
 * The on-disk format version of files we write, kept in `PRAGMA user_version` (the reference
 * leaves it 0). A file with a higher version was written by a newer sqloutbox, whose format this
 * one may misread: it is refused, never "upgraded" backwards.
 */
export const FORMAT_VERSION = 1;

/** `PRAGMA application_id` of our files ("sqob"): marks a SQLite file as an outbox file. */
export const APPLICATION_ID = 0x73716f62;

/** The `outbox_meta` key of the file's origin id. */
const ORIGIN_KEY = "origin";

/** Name of a namespace's pending counter row in sqlite_sequence. */
export function pendingCounterName(namespace: string): string {
  return `${PENDING_PREFIX}${namespace}`;
}
const PENDING_PREFIX = "outbox_pending:";
const COUNTER = (row: "new" | "old") => `'${PENDING_PREFIX}' || ${row}.namespace`;
// Increment, or create the row when the UPDATE found none: inside a trigger, changes() is the
// count of the trigger's own previous statement, so no lookup is repeated on the hot path.
const INCREMENT = (cond: string) => `UPDATE sqlite_sequence SET seq = seq + 1 WHERE name = ${COUNTER("new")}${cond};
    INSERT INTO sqlite_sequence (name, seq) SELECT ${COUNTER("new")}, 1 WHERE changes() = 0${cond};`;

/*
 * The pending counter: one row per namespace, named `outbox_pending:<namespace>`, kept by
 * triggers so that any writer (the reference included) keeps it exact. It lives in
 * sqlite_sequence on purpose: every AUTOINCREMENT insert already rewrites that page, so the
 * counter adds no page to the commit (a separate table cost ~20% of an enqueue). SQLite ignores
 * sqlite_sequence rows that name no table, and only ever touches a table's own row.
 */
const COUNTER_DDL = [
  `CREATE TRIGGER outbox_pending_insert AFTER INSERT ON outbox_queue WHEN new.synced = 0 BEGIN
    ${INCREMENT("")}
  END`,
  `CREATE TRIGGER outbox_pending_delete AFTER DELETE ON outbox_queue WHEN old.synced = 0 BEGIN
    UPDATE sqlite_sequence SET seq = seq - 1 WHERE name = ${COUNTER("old")};
  END`,
  // The reference marks rows synced=1 before deleting them; only synced=0 rows are pending.
  `CREATE TRIGGER outbox_pending_update AFTER UPDATE OF synced, namespace ON outbox_queue
    WHEN (old.synced = 0) != (new.synced = 0) OR old.namespace != new.namespace BEGIN
    UPDATE sqlite_sequence SET seq = seq - 1 WHERE name = ${COUNTER("old")} AND old.synced = 0;
    ${INCREMENT(" AND new.synced = 0")}
  END`,
  // Initialised once, in the same transaction that creates the triggers: exact from then on.
  `DELETE FROM sqlite_sequence WHERE name LIKE '${PENDING_PREFIX}%'`,
  `INSERT INTO sqlite_sequence (name, seq)
    SELECT '${PENDING_PREFIX}' || namespace, count(*) FROM outbox_queue WHERE synced = 0 GROUP BY namespace`,
];

/** Names of schema objects whose presence means "fully migrated". */
const MARKERS = ["outbox_queue", "outbox_sync_log", "outbox_dead_log", "idx_dead_log", "outbox_meta",
  "outbox_pending_insert", "outbox_pending_delete", "outbox_pending_update"];

/** True when every table, trigger, column and fact we rely on exists (one cheap read of the schema). */
function isMigrated(db: Database): boolean {
  const row = db
    .query<{ objects: number; columns: number; dead: number; version: number }, []>(
      `SELECT
        (SELECT count(*) FROM sqlite_schema WHERE name IN (${MARKERS.map((m) => `'${m}'`).join(",")})) AS objects,
        (SELECT count(*) FROM pragma_table_info('outbox_queue') WHERE name IN (${QUEUE_EXTRA_COLUMNS.map(([n]) => `'${n}'`).join(",")})) AS columns,
        (SELECT count(*) FROM pragma_table_info('outbox_dead_log') WHERE name IN ('seq', ${DEAD_COLUMNS.map(([n]) => `'${n}'`).join(",")})) AS dead,
        (SELECT user_version FROM pragma_user_version) AS version`,
    )
    .get()!;
  return (
    row.objects === MARKERS.length && row.columns === QUEUE_EXTRA_COLUMNS.length && row.dead === DEAD_COLUMNS.length + 1 &&
    row.version === FORMAT_VERSION && readOrigin(db) !== null
  );
}

/**
 * Creates or upgrades the schema; idempotent and safe against concurrent openers (it re-checks
 * under the write lock). Must be called outside a transaction. Refuses, without writing, a file
 * written by a newer format and a database that belongs to something else (`checkOwnFile`).
 */
export function migrate(db: Database, file: string): void {
  checkOwnFile(db, file);
  if (isMigrated(db)) return;
  db.run("BEGIN IMMEDIATE");
  try {
    checkOwnFile(db, file); // another process may have changed it before we held the lock
    if (!isMigrated(db)) {
      for (const sql of BASE_DDL) db.run(sql);
      addMissingColumns(db, "outbox_queue", QUEUE_EXTRA_COLUMNS);
      for (const sql of ADDED_DDL) db.run(sql);
      addMissingColumns(db, "outbox_dead_log", DEAD_COLUMNS);
      if (!hasPendingCounter(db)) for (const sql of COUNTER_DDL) db.run(sql);
      // The origin is created once, with the file (or the first time we write a reference file),
      // and never changes: the ledger knows this queue by it.
      db.query("INSERT OR IGNORE INTO outbox_meta (key, value) VALUES (?, ?)").run(ORIGIN_KEY, Bun.randomUUIDv7());
      db.run(`PRAGMA application_id = ${APPLICATION_ID}`);
      db.run(`PRAGMA user_version = ${FORMAT_VERSION}`);
    }
    db.run("COMMIT");
  } catch (e) {
    if (db.inTransaction) db.run("ROLLBACK");
    throw e;
  }
}

/** This file's origin id (a UUIDv7), or null when it has none yet (a reference file, never opened for writing). */
export function readOrigin(db: Database): string | null {
  if (!tableColumns(db, "outbox_meta").includes("value")) return null;
  return db.query<{ value: string }, [string]>("SELECT value FROM outbox_meta WHERE key = ?").get(ORIGIN_KEY)?.value ?? null;
}

/**
 * Throws StorageError unless `db` may be treated as an outbox file: empty (new), an outbox file of
 * our format version or older (the reference's included), and not marked as another
 * application's. A database with tables but no outbox_queue is somebody else's — a producer
 * pointed at `users.db` must not add outbox tables to it.
 */
export function checkOwnFile(db: Database, file: string): void {
  // One statement, one snapshot: another process may be creating the schema right now.
  const { version, app, queue, tables } = db
    .query<{ version: number; app: number; queue: number; tables: string | null }, []>(
      `SELECT (SELECT user_version FROM pragma_user_version) AS version, (SELECT application_id FROM pragma_application_id) AS app,
        (SELECT count(*) FROM pragma_table_info('outbox_queue') WHERE name = 'seq') AS queue,
        (SELECT group_concat(name, ', ') FROM (SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name LIMIT 6)) AS tables`,
    )
    .get()!;
  if (app !== 0 && app !== APPLICATION_ID) {
    throw new StorageError(`not an outbox file: ${file} belongs to another application (application_id ${app}); sqloutbox never writes to it`, file);
  }
  if (version > FORMAT_VERSION) {
    throw new StorageError(`outbox file ${file} was written by a newer sqloutbox (format ${version}; this version reads formats up to ${FORMAT_VERSION}): upgrade sqloutbox to use it`, file);
  }
  if (queue > 0 || tables === null) return;
  const names = tables.split(", ");
  const shown = names.length > 5 ? `${names.slice(0, 5).join(", ")}, …` : tables;
  throw new StorageError(`not an outbox file: ${file} holds other tables (${shown}) and no outbox_queue; sqloutbox never adds its tables to another database`, file);
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

/** Whether the file has our pending-counter triggers (all three, or the counter is not trusted). */
export function hasPendingCounter(db: Database): boolean {
  const row = db
    .query<{ n: number }, []>(
      "SELECT count(*) AS n FROM sqlite_schema WHERE type = 'trigger' AND name IN ('outbox_pending_insert', 'outbox_pending_delete', 'outbox_pending_update')",
    )
    .get()!;
  return row.n === 3;
}
