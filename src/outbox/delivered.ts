import type { Database, Statement } from "bun:sqlite";
import type { QueueLayout } from "./layout.ts";

/*
 * What a queue file remembers of the rows it delivered, so a chain stays verifiable across
 * deliveries (a pending head links to a delivered row), the tail and the seq high-water survive an
 * empty queue, and `status` can say when a namespace last delivered. Two layouts, two logs:
 *
 * - legacy (the reference's files): `outbox_sync_log`, one row per delivered row, as the
 *   reference writes and reads it — its files stay its own;
 * - lean (files we create): `outbox_delivered`, one row per confirmed slice of a namespace,
 *   extended while the next slice continues the chain within RANGE_SPAN_MS. The per-row log cost
 *   ~62 bytes and an index entry per delivered row (10 GB a day at 2 000 events/s kept 30 days);
 *   a range costs that per slice, and at most one per namespace per minute under steady load.
 *
 * A range [first_seq, last_seq] of namespace N holds every row of N with a seq in it that was
 * delivered: slices are consecutive pending rows, so no row of N inside a range was left behind
 * (rows of other namespaces of the same file may sit between, with ranges of their own).
 * "When was seq S delivered?" is answered by its range: between first_at and last_at.
 */

/** A slice of one namespace being confirmed: its first and last seq, how many rows, and the first row's prev_seq. */
export interface ConfirmedSlice {
  namespace: string;
  first: number;
  last: number;
  rows: number;
  firstPrev: number | null;
}

/** A range stays open for extension this long after it started: bounds how coarse "when was it delivered" gets. */
export const RANGE_SPAN_MS = 60_000;

/** The SQL each log answers the queue's questions with, and how it records and forgets deliveries. */
export interface DeliveredSql {
  /** An expression: the highest delivered seq of namespace ?1, or NULL. */
  readonly maxOfNamespace: string;
  /** An expression: the highest delivered seq of the whole file, or NULL. */
  readonly maxOfFile: string;
  /** An expression: 1 when seq ?1 of namespace ?2 was delivered. */
  readonly contains: string;
  /** An expression: 1 when namespace ?1 delivered anything. */
  readonly any: string;
  /** A query: the newest delivery time of namespace ?1 as `t`. */
  readonly lastAt: string;
  /** The table holding the log: where a skip-scan finds the namespaces that delivered. */
  readonly table: string;
  /**
   * A query: the namespace whose log holds seq ?1 as `namespace` (ranges of a file's namespaces interleave:
   * the nearest).
   */
  readonly ownerOf: string;
  /** What is wrong with namespace `namespace`'s log, one sentence per problem (verify). */
  audit(db: Database, namespace: string): string[];
  /**
   * A statement: logs the rows of namespace ?2 that the reference left at synced=1 (its confirm
   * is two transactions: a crash between them leaves them) as delivered at ?1.
   */
  readonly recordLeftovers: string;
  /**
   * A statement: one chunk of a prune (see DrainQueue.pruneSyncLog) of namespace ?1's entries
   * older than ?2, looking at ?3 of them, sparing its newest entry and those holding seq ?4 or ?5
   * (the chain's bridges). julianday() compares times, not strings (stored texts may differ in
   * format).
   */
  readonly prune: string;
  /** The log's writer, with its statements prepared by `prepare`. */
  writer(prepare: (sql: string) => Statement): DeliveredWriter;
}

/** The reference's per-row sync log (legacy layout). */
const ROW_LOG: DeliveredSql = {
  maxOfNamespace: "(SELECT max(seq) FROM outbox_sync_log WHERE namespace = ?1)",
  maxOfFile: "(SELECT max(seq) FROM outbox_sync_log)",
  contains: "EXISTS (SELECT 1 FROM outbox_sync_log WHERE seq = ?1 AND namespace = ?2)",
  any: "EXISTS (SELECT 1 FROM outbox_sync_log WHERE namespace = ?1)",
  lastAt: "SELECT synced_at AS t FROM outbox_sync_log WHERE namespace = ?1 ORDER BY seq DESC LIMIT 1",
  table: "outbox_sync_log",
  ownerOf: "SELECT namespace FROM outbox_sync_log WHERE seq = ?1",
  // The reference's log, as the reference keeps it: one row per seq, nothing to overlap.
  audit: () => [],
  recordLeftovers:
    "INSERT OR IGNORE INTO outbox_sync_log (seq, namespace, synced_at) SELECT seq, namespace, ?1 FROM outbox_queue WHERE namespace = ?2 AND synced = 1",
  prune: `DELETE FROM outbox_sync_log WHERE seq IN (
  SELECT seq FROM (SELECT seq, synced_at FROM outbox_sync_log WHERE namespace = ?1 ORDER BY seq LIMIT ?3)
  WHERE julianday(synced_at) < julianday(?2)
    AND seq < (SELECT max(seq) FROM outbox_sync_log WHERE namespace = ?1)
    AND seq IS NOT ?4 AND seq IS NOT ?5)`,
  writer: rowLogWriter,
};

/** Our range log (lean layout). */
const RANGE_LOG: DeliveredSql = {
  maxOfNamespace: "(SELECT max(last_seq) FROM outbox_delivered WHERE namespace = ?1)",
  maxOfFile: "(SELECT max(last_seq) FROM outbox_delivered)",
  // The first range of the namespace ending at or after the seq: it holds the seq if it starts at or before it.
  contains:
    "ifnull((SELECT first_seq <= ?1 FROM outbox_delivered WHERE namespace = ?2 AND last_seq >= ?1 ORDER BY last_seq LIMIT 1), 0)",
  any: "EXISTS (SELECT 1 FROM outbox_delivered WHERE namespace = ?1)",
  lastAt: "SELECT last_at AS t FROM outbox_delivered WHERE namespace = ?1 ORDER BY last_seq DESC LIMIT 1",
  table: "outbox_delivered",
  ownerOf: "SELECT namespace FROM outbox_delivered WHERE last_seq >= ?1 AND first_seq <= ?1 ORDER BY last_seq LIMIT 1",
  audit: auditRanges,
  recordLeftovers: `INSERT INTO outbox_delivered (last_seq, namespace, first_seq, rows, first_prev, first_at, last_at)
           SELECT max(seq), namespace, min(seq), count(*), NULL, ?1, ?1 FROM outbox_queue WHERE namespace = ?2 AND synced = 1 GROUP BY namespace`,
  prune: `DELETE FROM outbox_delivered WHERE last_seq IN (
  SELECT last_seq FROM (SELECT last_seq, first_seq, last_at FROM outbox_delivered WHERE namespace = ?1 ORDER BY last_seq LIMIT ?3)
  WHERE julianday(last_at) < julianday(?2)
    AND last_seq < (SELECT max(last_seq) FROM outbox_delivered WHERE namespace = ?1)
    AND NOT (?4 IS NOT NULL AND first_seq <= ?4 AND last_seq >= ?4)
    AND NOT (?5 IS NOT NULL AND first_seq <= ?5 AND last_seq >= ?5))`,
  writer: rangeLogWriter,
};

/** The delivered-rows log of each layout (see the top of this file). */
export const DELIVERED: Record<QueueLayout, DeliveredSql> = { lean: RANGE_LOG, legacy: ROW_LOG };

/** The log a file has, from its tables (for files opened read-only, before knowing their layout). */
export function deliveredSqlOf(db: Database): DeliveredSql | null {
  const row = db
    .query<{ ranges: number; rows: number }, []>(
      `SELECT (SELECT count(*) FROM pragma_table_info('outbox_delivered') WHERE name = 'last_seq') AS ranges,
        (SELECT count(*) FROM pragma_table_info('outbox_sync_log') WHERE name = 'synced_at') AS rows`,
    )
    .get()!;
  return row.ranges > 0 ? RANGE_LOG : row.rows > 0 ? ROW_LOG : null;
}

/** DDL of the range log (lean layout). */
export const RANGE_LOG_DDL = [
  `CREATE TABLE IF NOT EXISTS outbox_delivered (
    last_seq INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    rows INTEGER NOT NULL,
    first_prev INTEGER,
    first_at TEXT NOT NULL,
    last_at TEXT NOT NULL
  )`,
  `CREATE INDEX IF NOT EXISTS idx_delivered ON outbox_delivered (namespace, last_seq)`,
];

/**
 * Turns a format-2 file's per-row sync log, if it has one, into ranges, one per confirm (the rows
 * one confirm recorded share its timestamp), then drops it. The first row's prev_seq is gone with
 * the row: unknown (NULL) for converted ranges. Inside the migration's write transaction.
 */
export function convertRowLogToRanges(db: Database): void {
  if (db.query("SELECT 1 FROM pragma_table_info('outbox_sync_log')").get() === null) return;
  db.run(
    `INSERT INTO outbox_delivered (last_seq, namespace, first_seq, rows, first_prev, first_at, last_at)
     SELECT max(seq), namespace, min(seq), count(*), NULL, synced_at, synced_at FROM outbox_sync_log GROUP BY namespace, synced_at`,
  );
  db.run("DROP TABLE outbox_sync_log");
}

/**
 * Records confirmed slices in the log, inside the caller's write transaction. The row log keeps a
 * row per delivered row: `rowsOf(slice)` lists them (the rows are still in the queue when this
 * runs). The range log extends the namespace's newest range when the slice continues its chain
 * (the slice's first row links to the range's last) and the range started within RANGE_SPAN_MS;
 * otherwise it starts a new range.
 */
export interface DeliveredWriter {
  record(slice: ConfirmedSlice, at: string, atMs: number): void;
}

/** The writer of the range log. */
function rangeLogWriter(prepare: (sql: string) => Statement): DeliveredWriter {
  const newest = prepare(
    "SELECT last_seq AS last, first_at AS firstAt FROM outbox_delivered WHERE namespace = ?1 ORDER BY last_seq DESC LIMIT 1",
  );
  const extend = prepare(
    "UPDATE outbox_delivered SET last_seq = ?1, rows = rows + ?2, last_at = ?3 WHERE last_seq = ?4",
  );
  const insert = prepare(
    "INSERT INTO outbox_delivered (last_seq, namespace, first_seq, rows, first_prev, first_at, last_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)",
  );
  return {
    record(slice, at, atMs) {
      const open = newest.get(slice.namespace) as { last: number; firstAt: string } | null;
      const startedMs = open ? Date.parse(open.firstAt) : Number.NaN;
      if (open && slice.firstPrev === open.last && atMs - startedMs < RANGE_SPAN_MS && atMs >= startedMs) {
        extend.run(slice.last, slice.rows, at, open.last);
      } else {
        insert.run(slice.last, slice.namespace, slice.first, slice.rows, slice.firstPrev, at);
      }
    },
  };
}

/**
 * The writer of the reference's row log: one row per delivered row, from the queue (`?1` time, `?2`
 * namespace, `?3..?4` the seqs).
 */
function rowLogWriter(prepare: (sql: string) => Statement): DeliveredWriter {
  const insert = prepare(
    "INSERT OR IGNORE INTO outbox_sync_log (seq, namespace, synced_at) SELECT seq, namespace, ?1 FROM outbox_queue WHERE namespace = ?2 AND synced = 0 AND seq >= ?3 AND seq <= ?4",
  );
  return {
    record(slice, at) {
      insert.run(at, slice.namespace, slice.first, slice.last);
    },
  };
}

/**
 * The audit of a namespace's delivered ranges: each starts after the one before ends and holds no
 * more rows than seqs, and every pending row comes after the last (a pending row inside a
 * delivered range would be a row delivered twice, or one taken for delivered).
 */
function auditRanges(db: Database, namespace: string): string[] {
  const problems: string[] = [];
  const ranges = db
    .query<{ first: number; last: number; rows: number }, [string]>(
      "SELECT first_seq AS first, last_seq AS last, rows FROM outbox_delivered WHERE namespace = ? ORDER BY last_seq",
    )
    .iterate(namespace);
  let before: { first: number; last: number } | null = null;
  let last = 0;
  for (const range of ranges) {
    if (range.first > range.last || range.rows < 1 || range.rows > range.last - range.first + 1) {
      problems.push(`delivered range ${range.first}..${range.last} claims ${range.rows} row(s)`);
    }
    if (before !== null && range.first <= before.last)
      problems.push(`delivered ranges ${before.first}..${before.last} and ${range.first}..${range.last} overlap`);
    before = range;
    last = range.last;
  }
  const head = db
    .query<{ seq: number }, [string]>(
      "SELECT seq FROM outbox_queue WHERE namespace = ? AND synced = 0 ORDER BY seq LIMIT 1",
    )
    .get(namespace);
  if (head && head.seq <= last)
    problems.push(
      `pending seq ${head.seq} is not above the last delivered seq ${last}: it lies inside what was delivered`,
    );
  return problems;
}
