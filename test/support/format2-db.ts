// A queue file as sqloutbox wrote it before format 3 (the lean layout of format 2: no groups, no
// trace context, one sync-log row per delivered row), written by hand like reference-db.ts writes
// the reference's: the migration to format 3 is tested against what an earlier version left.
import { Database } from "bun:sqlite";

const HIGH_WATER = `max(ifnull((SELECT max(seq) FROM outbox_sync_log), 0), ifnull((SELECT max(seq) FROM outbox_dead_log), 0),
  ifnull((SELECT CAST(value AS INTEGER) FROM outbox_meta WHERE key = 'seq_floor'), 0))`;

/**
 * Creates `path` as a format-2 file of namespace `namespace`: rows 1..`delivered` delivered (two
 * confirms: the first half, then the rest), rows after them up to `total` pending, chained. Returns
 * the file's origin.
 */
export function buildFormat2File(path: string, namespace: string, delivered: number, total: number): string {
  const db = new Database(path, { create: true });
  try {
    db.run("PRAGMA page_size = 2048");
    db.run("PRAGMA journal_mode = WAL");
    db.run(`CREATE TABLE outbox_queue (seq INTEGER PRIMARY KEY, created_at TEXT NOT NULL, namespace TEXT NOT NULL, source TEXT NOT NULL DEFAULT '',
      tag TEXT NOT NULL, payload TEXT NOT NULL, prev_seq INTEGER, synced INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0,
      last_error TEXT, last_error_class TEXT, last_attempt_at TEXT, next_attempt_at TEXT, sent_through INTEGER, ord INTEGER)`);
    db.run("CREATE TABLE outbox_sync_log (seq INTEGER PRIMARY KEY, namespace TEXT NOT NULL, synced_at TEXT NOT NULL)");
    db.run("CREATE INDEX idx_outbox_worker ON outbox_queue (namespace, synced, seq)");
    db.run("CREATE INDEX idx_sync_log ON outbox_sync_log (namespace, seq)");
    db.run(`CREATE TABLE outbox_dead_log (seq INTEGER PRIMARY KEY, namespace TEXT NOT NULL DEFAULT '', source TEXT NOT NULL DEFAULT '', tag TEXT NOT NULL DEFAULT '',
      payload TEXT NOT NULL DEFAULT '', prev_seq INTEGER, created_at TEXT NOT NULL DEFAULT '', attempts INTEGER NOT NULL DEFAULT 0, error TEXT, error_class TEXT,
      reason TEXT NOT NULL DEFAULT '', dead_at TEXT NOT NULL DEFAULT '', replayed_at TEXT, replayed_as_seq INTEGER)`);
    db.run("CREATE INDEX idx_dead_log ON outbox_dead_log (namespace, seq)");
    db.run("CREATE TABLE outbox_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)");
    db.run(`CREATE TRIGGER outbox_foreign_insert AFTER INSERT ON outbox_queue WHEN new.ord IS NULL BEGIN
      UPDATE outbox_queue SET
        ord = ifnull((SELECT ord FROM outbox_queue WHERE namespace = new.namespace AND synced = 0 AND seq < new.seq ORDER BY seq DESC LIMIT 1), 0) + 1,
        seq = CASE WHEN new.seq > ${HIGH_WATER} THEN new.seq ELSE max(${HIGH_WATER}, (SELECT max(seq) FROM outbox_queue)) + 1 END
      WHERE seq = new.seq;
    END`);
    const origin = "0190aaaa-2222-7000-8000-000000000002";
    db.run("INSERT INTO outbox_meta (key, value) VALUES ('origin', ?)", [origin]);
    db.run(`PRAGMA application_id = ${0x73716f62}`);
    db.run("PRAGMA user_version = 2");
    db.transaction(() => {
      for (let seq = 1; seq <= delivered; seq++) {
        db.run("INSERT INTO outbox_sync_log (seq, namespace, synced_at) VALUES (?, ?, ?)", [
          seq,
          namespace,
          seq <= delivered / 2 ? "2026-11-01T10:00:00.000000+00:00" : "2026-11-01T10:00:05.000000+00:00",
        ]);
      }
      for (let seq = delivered + 1; seq <= total; seq++) {
        db.run(
          "INSERT INTO outbox_queue (seq, ord, created_at, namespace, source, tag, payload, prev_seq) VALUES (?, ?, '2026-11-01T10:00:00.000000+00:00', ?, 'v2', ?, ?, ?)",
          [
            seq,
            seq - delivered,
            namespace,
            `INSERT INTO ${namespace} (id) VALUES (?)`,
            `[${seq}]`,
            seq > 1 ? seq - 1 : null,
          ],
        );
      }
    })();
    return origin;
  } finally {
    db.close();
  }
}
