import type { Database } from "bun:sqlite";
import { StorageError } from "../errors.ts";
import { convertRowLogToRanges, DELIVERED, RANGE_LOG_DDL } from "./delivered.ts";

/*
 * The on-disk format, in two layouts the reference reads alike (it only ever names its own columns):
 *
 * - lean, for files we create: `seq INTEGER PRIMARY KEY` without AUTOINCREMENT (enqueue allocates
 *   one past the highest seq the file ever held, so a drained-empty queue never reuses one),
 *   `prev_seq` without a UNIQUE index (the reference adds its own unique prev_seq indexes when it
 *   opens a file), and an `ord` column — the row's position among its namespace's pending rows,
 *   consecutive from head to tail — so the pending count is `tail.ord - head.ord + 1`, two index
 *   reads and no counter to write. An enqueue commit writes the table and the worker index only:
 *   measured on the 2-core machine, 20.7 µs against 28.4 µs for the reference's layout, next to
 *   15.4 µs for a bare table with no index (p50 of 8 000 inserts, 2 KiB pages, WAL/NORMAL).
 * - legacy, for files the reference (or an earlier version of ours) created: its DDL as it is,
 *   plus our columns and a pending counter kept by triggers in `sqlite_sequence`, which stays
 *   exact even when the reference itself writes the file.
 *
 * Both get the dead log, `outbox_meta` and `outbox_group` through idempotent migrations; the
 * legacy layout keeps the reference's per-row sync log, the lean one logs delivered ranges
 * (delivered.ts). We never create the reference's redundant `idx_outbox_prev` /
 * `idx_outbox_prev_unique`, but tolerate them.
 *
 * Every row carries its group (`grp`): the seq of the first row of the local transaction that wrote
 * it (a `pushMany`, an `outbox.transaction`), NULL for a row enqueued alone. A transaction holds the
 * write lock from its first row to its commit, so a group is a contiguous run of seqs in the file
 * and, within each namespace, a contiguous run of the chain. A group that spans namespaces (one
 * file holding several tables) is also recorded in `outbox_group` with its last seq and its
 * namespaces, so the drain can deliver it whole.
 */

/** The reference's own DDL, for the legacy layout (a file it created). */
const LEGACY_QUEUE_DDL = [
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
];

/** The worker index of both layouts. */
// The reference's worker index doubles as our O(log n) tail/head lookup:
// max(seq)/min(seq) WHERE namespace=? AND synced=? is one descent of this b-tree.
const WORKER_INDEX_DDL = `CREATE INDEX IF NOT EXISTS idx_outbox_worker ON outbox_queue (namespace, synced, seq)`;

/** The reference's per-row sync log (legacy layout only). */
const SYNC_LOG_DDL = [
  `CREATE TABLE IF NOT EXISTS outbox_sync_log (
    seq INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL,
    synced_at TEXT NOT NULL
  )`,
  `CREATE INDEX IF NOT EXISTS idx_sync_log ON outbox_sync_log (namespace, seq)`,
];

/** Columns we add to outbox_queue: delivery state of the head. */
const QUEUE_EXTRA_COLUMNS: ReadonlyArray<readonly [string, string]> = [
  ["attempts", "INTEGER NOT NULL DEFAULT 0"],
  ["last_error", "TEXT"],
  ["last_error_class", "TEXT"],
  ["last_attempt_at", "TEXT"],
  ["next_attempt_at", "TEXT"],
  // Where versions before the ledger kept the sent mark (now `sent:<namespace>` in outbox_meta);
  // still read, so a file upgraded with a batch in flight settles right.
  ["sent_through", "INTEGER"],
  // The row's group: the first seq of the local transaction that wrote it; NULL when alone.
  ["grp", "INTEGER"],
  // The W3C trace context the producer pushed the row in, if any.
  ["traceparent", "TEXT"],
  ["tracestate", "TEXT"],
];

/** The lean layout's queue table (see the top of this file): our columns from the start, plus `ord`. */
const LEAN_QUEUE_DDL = `CREATE TABLE outbox_queue (
    seq INTEGER PRIMARY KEY,
    created_at TEXT NOT NULL,
    namespace TEXT NOT NULL,
    source TEXT NOT NULL DEFAULT '',
    tag TEXT NOT NULL,
    payload TEXT NOT NULL,
    prev_seq INTEGER,
    synced INTEGER NOT NULL DEFAULT 0,
    ${QUEUE_EXTRA_COLUMNS.map(([n, t]) => `${n} ${t}`).join(",\n    ")},
    ord INTEGER
  )`;

/** The two layouts a queue file can have (see the top of this file). */
export type QueueLayout = "lean" | "legacy";

/** The `outbox_meta` key of the lean layout's seq floor: `seedSequence` raises it. */
const SEQ_FLOOR_KEY = "seq_floor";

// The highest seq the file ever held, bar rows still in the queue: the delivered ranges and the
// dead log always keep each namespace's newest entry (their pruning spares it), and the floor
// holds seeds. Lean layout only (the legacy layout allocates by AUTOINCREMENT).
const SEQ_HIGH_WATER = `max(
      ifnull(${DELIVERED.lean.maxOfFile}, 0),
      ifnull((SELECT max(seq) FROM outbox_dead_log), 0),
      ifnull((SELECT CAST(value AS INTEGER) FROM outbox_meta WHERE key = '${SEQ_FLOOR_KEY}'), 0))`;

// A pending row's position in its namespace: one past the tail's (?1 is the namespace).
const NEXT_ORD =
  "ifnull((SELECT ord FROM outbox_queue WHERE namespace = ?1 AND synced = 0 ORDER BY seq DESC LIMIT 1), 0) + 1";

/**
 * The INSERT of one pending row with the given columns and value expressions, in which `?1` must
 * be the namespace. In the lean layout it also allocates the seq (one past everything the file
 * ever held, so a drained-empty queue never reuses one) and the ord; in the legacy layout
 * AUTOINCREMENT allocates the seq and the triggers count the row.
 */
export function queueInsertSql(layout: QueueLayout, columns: readonly string[], values: readonly string[]): string {
  if (layout === "legacy") return `INSERT INTO outbox_queue (${columns.join(", ")}) VALUES (${values.join(", ")})`;
  return `INSERT INTO outbox_queue (seq, ord, ${columns.join(", ")}) SELECT seq, ord, ${values.join(", ")} FROM (${NEXT_SLOT_SQL})`;
}

/** The lean layout's next free seq of the file: one past everything it ever held. */
const NEXT_SEQ = `max(${SEQ_HIGH_WATER}, ifnull((SELECT max(seq) FROM outbox_queue), 0)) + 1`;

/**
 * The lean layout's next free seq and the namespace's next ord (`?1` is the namespace): an
 * autocommit insert reads them in its own statement.
 */
export const NEXT_SLOT_SQL = `SELECT ${NEXT_SEQ} AS seq, ${NEXT_ORD} AS ord`;

/** The lean layout's next free seq (one column, `seq`): a transaction reads it once and counts on, under the write lock it holds. */
export const NEXT_SEQ_SQL = `SELECT ${NEXT_SEQ} AS seq`;

/** The lean layout's next ord of namespace `?1` (one column, `ord`). */
export const NEXT_ORD_SQL = `SELECT ${NEXT_ORD} AS ord`;

/**
 * Makes every seq allocated from now on greater than `minSeq`; never lowers the sequence. Call
 * inside a write transaction.
 */
export function raiseSequence(db: Database, layout: QueueLayout, minSeq: number): void {
  if (layout === "lean") {
    db.query(
      "INSERT INTO outbox_meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = max(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))",
    ).run(SEQ_FLOOR_KEY, minSeq);
    return;
  }
  const current = db.query<{ seq: number }, []>("SELECT seq FROM sqlite_sequence WHERE name = 'outbox_queue'").get();
  if (current === null) db.query("INSERT INTO sqlite_sequence (name, seq) VALUES ('outbox_queue', ?)").run(minSeq);
  else if (current.seq < minSeq) db.query("UPDATE sqlite_sequence SET seq = ? WHERE name = 'outbox_queue'").run(minSeq);
}

/**
 * How a file counts a namespace's pending rows: lean files from the head's and tail's ord (two
 * index reads), legacy files from our trigger-kept counter, reference files by a scan of the
 * namespace's index range.
 */
export type PendingCount = "ord" | "counter" | "scan";

/** How a migrated file (one an Outbox opened) of `layout` counts pending rows; only an unmigrated reference file has to scan. */
export function layoutPendingCount(layout: QueueLayout): PendingCount {
  return layout === "lean" ? "ord" : "counter";
}

/** The query of a namespace's pending count (`?1` is the namespace; one column, `pending`). */
export function pendingCountSql(how: PendingCount): string {
  switch (how) {
    case "ord":
      return `SELECT ifnull((SELECT ord FROM outbox_queue WHERE namespace = ?1 AND synced = 0 ORDER BY seq DESC LIMIT 1)
        - (SELECT ord FROM outbox_queue WHERE namespace = ?1 AND synced = 0 ORDER BY seq LIMIT 1) + 1, 0) AS pending`;
    case "counter":
      return `SELECT ifnull((SELECT seq FROM sqlite_sequence WHERE name = '${PENDING_PREFIX}' || ?1), 0) AS pending`;
    case "scan":
      return "SELECT count(*) AS pending FROM outbox_queue WHERE namespace = ?1 AND synced = 0";
  }
}

/** Which way `pendingCountSql` can count in this file (see PendingCount). */
export function pendingCountIn(db: Database): PendingCount {
  if (tableColumns(db, "outbox_queue").includes("ord")) return "ord";
  return hasPendingCounter(db) ? "counter" : "scan";
}

/**
 * Renumbers a namespace's pending ords consecutively from 1, in seq order: after a delete that
 * was not a prefix of the queue (lean layout only). Call inside a write transaction.
 */
export function renumberOrds(db: Database, namespace: string): void {
  db.query(
    `UPDATE outbox_queue SET ord = numbered.n FROM
      (SELECT seq, row_number() OVER (ORDER BY seq) AS n FROM outbox_queue WHERE namespace = ?1 AND synced = 0) AS numbered
     WHERE outbox_queue.seq = numbered.seq`,
  ).run(namespace);
}

/*
 * A writer that does not know the lean layout — the reference, opening a file we created —
 * inserts without seq or ord. SQLite then gives the row max(seq)+1, which reuses a delivered seq
 * once the queue has drained empty, and a delivery ledger would take that row for delivered. So
 * such a row is moved above the high-water mark and given its ord. Our own inserts always carry
 * an ord: for them the trigger is one NULL test.
 */
const FOREIGN_INSERT_DDL = `CREATE TRIGGER outbox_foreign_insert AFTER INSERT ON outbox_queue WHEN new.ord IS NULL BEGIN
    UPDATE outbox_queue SET
      ord = ifnull((SELECT ord FROM outbox_queue WHERE namespace = new.namespace AND synced = 0 AND seq < new.seq ORDER BY seq DESC LIMIT 1), 0) + 1,
      seq = CASE WHEN new.seq > ${SEQ_HIGH_WATER} THEN new.seq ELSE max(${SEQ_HIGH_WATER}, (SELECT max(seq) FROM outbox_queue)) + 1 END
    WHERE seq = new.seq;
  END`;

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
  ["traceparent", "TEXT"],
  ["tracestate", "TEXT"],
];

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
 * (the reference leaves it 0). 3 is the lean layout with groups, trace context and the range log;
 * 2 (the lean layout before them) is migrated to 3 on open. An earlier sqloutbox would misread a
 * lean file, so those refuse it. A reference file we migrated keeps the legacy layout and format 1,
 * which every version reads (the columns we add are ignored by older readers). In an application's
 * own database (`embedded`), `user_version` and `application_id` are the application's: the format
 * is kept in `outbox_meta` instead. A file with a higher version was written by a newer sqloutbox:
 * it is refused, never "upgraded" backwards.
 */
export const FORMAT_VERSION = 3;
const LEGACY_FORMAT_VERSION = 1;

/** `PRAGMA application_id` of our files ("sqob"): marks a SQLite file as an outbox file. */
export const APPLICATION_ID = 0x73716f62;

/** The `outbox_meta` key of the file's origin id. */
const ORIGIN_KEY = "origin";
/** The `outbox_meta` keys of an application's own database that holds our tables (see migrate). */
const EMBEDDED_KEY = "embedded";
const FORMAT_KEY = "format";

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

/** Names of schema objects whose presence means "fully migrated", per layout. */
const MARKERS = {
  lean: [
    "outbox_queue",
    "outbox_delivered",
    "idx_delivered",
    "outbox_dead_log",
    "idx_dead_log",
    "outbox_meta",
    "outbox_group",
    "idx_outbox_worker",
  ],
  legacy: [
    "outbox_queue",
    "outbox_sync_log",
    "idx_sync_log",
    "outbox_dead_log",
    "idx_dead_log",
    "outbox_meta",
    "outbox_group",
    "idx_outbox_worker",
  ],
} as const;
const COUNTER_TRIGGERS = ["outbox_pending_insert", "outbox_pending_delete", "outbox_pending_update"];

/** What a database is to the outbox: an outbox file of ours (or the reference's), or an application's own database holding our tables. */
export interface Ownership {
  /** The application's own database (see migrate's `embed`): its pragmas and other tables are never touched. */
  embedded: boolean;
  /** The database says so itself (`outbox_meta`); false while an adoption (`embed`) is still to be written. */
  marked: boolean;
  /** The format of our tables in it; 0 when they do not exist yet. */
  format: number;
}

/** True when every table, trigger, column and fact we rely on exists, at this version's format (one cheap read of the schema). */
function isMigrated(db: Database, own: Ownership): boolean {
  const layout = tableColumns(db, "outbox_queue").includes("ord") ? "lean" : "legacy";
  const markers = MARKERS[layout];
  const row = db
    .query<{ objects: number; triggers: number; foreign_insert: number; columns: number; dead: number }, []>(
      `SELECT
        (SELECT count(*) FROM sqlite_schema WHERE name IN (${markers.map((m) => `'${m}'`).join(",")})) AS objects,
        (SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND name IN (${COUNTER_TRIGGERS.map((m) => `'${m}'`).join(",")})) AS triggers,
        (SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND name = 'outbox_foreign_insert') AS foreign_insert,
        (SELECT count(*) FROM pragma_table_info('outbox_queue') WHERE name IN (${QUEUE_EXTRA_COLUMNS.map(([n]) => `'${n}'`).join(",")})) AS columns,
        (SELECT count(*) FROM pragma_table_info('outbox_dead_log') WHERE name IN ('seq', ${DEAD_COLUMNS.map(([n]) => `'${n}'`).join(",")})) AS dead`,
    )
    .get()!;
  const counted = layout === "lean" ? row.foreign_insert === 1 : row.triggers === COUNTER_TRIGGERS.length; // lean: ord; legacy: the counter
  return (
    own.marked === own.embedded &&
    row.objects === markers.length &&
    counted &&
    row.columns === QUEUE_EXTRA_COLUMNS.length &&
    row.dead === DEAD_COLUMNS.length + 1 &&
    own.format === (layout === "lean" ? FORMAT_VERSION : LEGACY_FORMAT_VERSION) &&
    readOrigin(db) !== null
  );
}

/** Which layout a migrated file has: lean files have the `ord` column. */
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
  const fresh = tableColumns(db, "outbox_queue").length === 0;
  if (fresh) db.run(LEAN_QUEUE_DDL);
  else for (const sql of LEGACY_QUEUE_DDL) db.run(sql);
  const layout = queueLayout(db);
  db.run(WORKER_INDEX_DDL);
  addMissingColumns(db, "outbox_queue", QUEUE_EXTRA_COLUMNS);
  for (const sql of ADDED_DDL) db.run(sql);
  addMissingColumns(db, "outbox_dead_log", DEAD_COLUMNS);
  if (layout === "lean") {
    // Format 3 logs delivered ranges; a format-2 file's per-row log becomes ranges. The
    // foreign-insert trigger reads the log: recreated with the new one.
    for (const sql of RANGE_LOG_DDL) db.run(sql);
    if (tableColumns(db, "outbox_sync_log").length > 0) convertRowLogToRanges(db);
    db.run("DROP TRIGGER IF EXISTS outbox_foreign_insert");
    db.run(FOREIGN_INSERT_DDL);
  } else {
    for (const sql of SYNC_LOG_DDL) db.run(sql);
    if (!hasPendingCounter(db)) for (const sql of COUNTER_DDL) db.run(sql);
  }
  // The origin is created once, with the file (or the first time we write a reference file),
  // and never changes: the ledger knows this queue by it.
  db.query("INSERT OR IGNORE INTO outbox_meta (key, value) VALUES (?, ?)").run(ORIGIN_KEY, Bun.randomUUIDv7());
  const format = layout === "lean" ? FORMAT_VERSION : LEGACY_FORMAT_VERSION;
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
    // An outbox file of ours that the application adopted as its own database keeps our marks until the adoption is written.
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

/** Whether the file has our pending-counter triggers (all three, or the counter is not trusted). */
function hasPendingCounter(db: Database): boolean {
  const row = db
    .query<{ n: number }, []>(
      "SELECT count(*) AS n FROM sqlite_schema WHERE type = 'trigger' AND name IN ('outbox_pending_insert', 'outbox_pending_delete', 'outbox_pending_update')",
    )
    .get()!;
  return row.n === 3;
}
