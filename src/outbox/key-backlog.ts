import { hasOutboxSchema } from "./health.ts";
import { readSnapshot } from "./sqlite-open.ts";

/**
 * Which keys weigh most in the front of a namespace's queue: the `rows` oldest rows read (at most
 * the sample asked for, by seq), and the `top` keys by how many of those rows they have (most
 * first, ties by key). Rows without a key are in `rows`, never in `top`. The front of the queue
 * is what the drain delivers next, so a key that holds most of it is a hot key: its lane goes
 * one row after another while the others wait for work.
 */
export interface KeyBacklog {
  rows: number;
  top: Array<{ key: string; rows: number }>;
}

/**
 * The sample: a namespace's first ?2 pending rows by seq. `synced = 0` is not a filter (pending
 * rows all have it) but what lets SQLite walk idx_outbox_worker (namespace, synced, seq) in seq
 * order and stop at the LIMIT; without it the plan sorts every row of the namespace first (120 ms
 * at 1 M rows, against 4 ms).
 */
export const KEY_SAMPLE_SQL =
  "SELECT lane_key FROM outbox_queue WHERE namespace = ?1 AND synced = 0 ORDER BY seq LIMIT ?2";

/**
 * Samples the first `sampleRows` rows of `namespace` in `file` (read-only, one snapshot): bounded
 * by the sample, never a scan of the whole queue, so a scrape costs the same over a million rows
 * as over ten thousand. Rows a lane delivered ahead of a held one are still in the queue (the local
 * confirmation is a prefix) and are counted. Throws StorageError when the file cannot be read; an
 * empty sample for a file without an outbox schema.
 */
export function sampleKeyBacklog(file: string, namespace: string, sampleRows: number, topKeys: number): KeyBacklog {
  return readSnapshot(file, (db) => {
    if (!hasOutboxSchema(db, file)) return { rows: 0, top: [] };
    // One pass over the sample: its groups by key, each row carrying the sample's size. The
    // group without a key sorts last, so it is cut first, and at least one row always comes back
    // when the sample has any (LIMIT 1 at least): its total is the sample's size.
    const groups = db
      .query<{ key: string | null; rows: number; total: number }, [string, number, number]>(
        `SELECT lane_key AS key, count(*) AS rows, sum(count(*)) OVER () AS total FROM (${KEY_SAMPLE_SQL})
         GROUP BY lane_key ORDER BY lane_key IS NULL, rows DESC, key LIMIT max(?3, 1)`,
      )
      .all(namespace, sampleRows, topKeys);
    const rows = groups[0]?.total ?? 0;
    const top = groups.flatMap(({ key, rows }) => (key === null ? [] : [{ key, rows }])).slice(0, topKeys);
    return { rows, top };
  });
}
