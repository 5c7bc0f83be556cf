import type { Database } from "bun:sqlite";
import type { Layout } from "./layout.ts";

/*
 * The legacy layout, for files the reference (or an earlier version of ours) created: its DDL as it
 * is (`seq INTEGER PRIMARY KEY AUTOINCREMENT`, `prev_seq INTEGER UNIQUE`), plus our columns and a
 * pending counter kept by triggers in `sqlite_sequence`, which stays exact even when the reference
 * itself writes the file. It keeps the reference's per-row sync log (delivered.ts). We never create
 * the reference's redundant `idx_outbox_prev` / `idx_outbox_prev_unique`, but tolerate them.
 */

/** The reference's per-row sync log. */
const SYNC_LOG_DDL = [
  `CREATE TABLE IF NOT EXISTS outbox_sync_log (
    seq INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL,
    synced_at TEXT NOT NULL
  )`,
  `CREATE INDEX IF NOT EXISTS idx_sync_log ON outbox_sync_log (namespace, seq)`,
];

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
const COUNTER_TRIGGERS = ["outbox_pending_insert", "outbox_pending_delete", "outbox_pending_update"];

/** The namespace's pending count from our counter (`?1` is the namespace; one column, `pending`). */
export const COUNTER_PENDING_SQL = `SELECT ifnull((SELECT seq FROM sqlite_sequence WHERE name = '${PENDING_PREFIX}' || ?1), 0) AS pending`;

/** Whether the file has our pending-counter triggers (all three, or the counter is not trusted). */
export function hasPendingCounter(db: Database): boolean {
  const row = db
    .query<{ n: number }, []>(
      `SELECT count(*) AS n FROM sqlite_schema WHERE type = 'trigger' AND name IN (${COUNTER_TRIGGERS.map((t) => `'${t}'`).join(", ")})`,
    )
    .get()!;
  return row.n === COUNTER_TRIGGERS.length;
}

/** The legacy layout: format 1, which every version reads (the columns we add are ignored by older readers). */
export const LEGACY: Layout = {
  format: 1,
  pendingCount: "counter",
  objects: ["outbox_sync_log", "idx_sync_log"],
  triggers: COUNTER_TRIGGERS,

  migrate(db) {
    for (const sql of SYNC_LOG_DDL) db.run(sql);
    if (!hasPendingCounter(db)) for (const sql of COUNTER_DDL) db.run(sql);
  },

  // AUTOINCREMENT allocates the seq, and the triggers count the row.
  insertSql: (columns, values) => `INSERT INTO outbox_queue (${columns.join(", ")}) VALUES (${values.join(", ")})`,

  raiseSequence(db, minSeq) {
    const current = db.query<{ seq: number }, []>("SELECT seq FROM sqlite_sequence WHERE name = 'outbox_queue'").get();
    if (current === null) db.query("INSERT INTO sqlite_sequence (name, seq) VALUES ('outbox_queue', ?)").run(minSeq);
    else if (current.seq < minSeq)
      db.query("UPDATE sqlite_sequence SET seq = ? WHERE name = 'outbox_queue'").run(minSeq);
  },

  // The file allocates each seq: a group learns its id from its first row, once inserted.
  rowInserts(cache) {
    const insert = cache.prepare(
      "INSERT INTO outbox_queue (grp, created_at, namespace, source, tag, payload, prev_seq, traceparent, tracestate, lane_key, tenant) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    );
    const setGroup = cache.prepare("UPDATE outbox_queue SET grp = ?1 WHERE seq = ?1");
    return {
      nextSeq: () => 0,
      nextOrd: () => 0,
      // AUTOINCREMENT gives each row its seq: one INSERT per row, each linked to the seq the one before got.
      insert(run, items, prev) {
        const seqs: number[] = [];
        for (const item of items) {
          const seq = Number(
            insert.run(
              run.grp,
              run.createdAt,
              run.namespace,
              run.source,
              item.tag,
              item.payload,
              prev,
              run.traceparent,
              run.tracestate,
              run.laneKey,
              run.tenant,
            ).lastInsertRowid,
          );
          if (run.grouped && run.grp === null) setGroup.run((run.grp = seq));
          seqs.push((prev = seq));
        }
        return seqs;
      },
    };
  },

  // The triggers count every delete: nothing to repair.
  // AUTOINCREMENT never hands out a seq twice and the counter triggers count every insert: a
  // foreign row needs nothing.
  adoptForeignRows: () => 0,
  hasForeignRows: () => false,

  closeHole() {},
};
