import { Database } from "bun:sqlite";

/**
 * The highest seq a queue file ever allocated or was seeded to, in either layout: the legacy
 * layout's AUTOINCREMENT counter, the lean layout's seed floor, and every seq still held in the
 * queue, the sync log or the dead log. A new row's seq must be above it.
 */
export function highestSeq(path: string): number {
  const db = new Database(path, { readonly: true });
  try {
    const has = (table: string) => db.query("SELECT 1 FROM sqlite_schema WHERE name = ?").get(table) !== null;
    const parts = ["SELECT max(seq) AS s FROM outbox_queue"];
    if (has("sqlite_sequence")) parts.push("SELECT seq FROM sqlite_sequence WHERE name = 'outbox_queue'");
    if (has("outbox_meta")) parts.push("SELECT CAST(value AS INTEGER) FROM outbox_meta WHERE key = 'seq_floor'");
    if (has("outbox_sync_log")) parts.push("SELECT max(seq) FROM outbox_sync_log");
    if (has("outbox_dead_log")) parts.push("SELECT max(seq) FROM outbox_dead_log");
    return db.query<{ s: number | null }, []>(`SELECT max(s) AS s FROM (${parts.join(" UNION ALL ")})`).get()?.s ?? 0;
  } finally {
    db.close();
  }
}
