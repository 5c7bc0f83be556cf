import type { SQLQueryBindings, Statement } from "bun:sqlite";
import { convertRowLogToRanges, DELIVERED, RANGE_LOG_DDL } from "./delivered.ts";
import { type Layout, QUEUE_EXTRA_COLUMNS } from "./layout.ts";

/*
 * The lean layout, for files we create: `seq INTEGER PRIMARY KEY` without AUTOINCREMENT (enqueue
 * allocates one past the highest seq the file ever held, so a drained-empty queue never reuses
 * one), `prev_seq` without a UNIQUE index (the reference adds its own unique prev_seq indexes when
 * it opens a file), and an `ord` column — the row's position among its namespace's pending rows,
 * consecutive from head to tail — so the pending count is `tail.ord - head.ord + 1`, two index
 * reads and no counter to write. An enqueue commit writes the table and the worker index only —
 * cheaper than the reference's layout, close to a bare table (docs/benchmarks.md). It logs
 * delivered ranges (delivered.ts).
 */

/** The queue table of a new file: our columns from the start, plus `ord`. */
export const LEAN_QUEUE_DDL = `CREATE TABLE outbox_queue (
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

/** The `outbox_meta` key of the seq floor: `raiseSequence` raises it. */
const SEQ_FLOOR_KEY = "seq_floor";

// The highest seq the file ever held, bar rows still in the queue: the delivered ranges and the
// dead log always keep each namespace's newest entry (their pruning spares it), and the floor
// holds seeds.
const SEQ_HIGH_WATER = `max(
      ifnull(${DELIVERED.lean.maxOfFile}, 0),
      ifnull((SELECT max(seq) FROM outbox_dead_log), 0),
      ifnull((SELECT CAST(value AS INTEGER) FROM outbox_meta WHERE key = '${SEQ_FLOOR_KEY}'), 0))`;

// A pending row's position in its namespace: one past the tail's (?1 is the namespace). A row a
// foreign writer inserted has none until it is adopted (see adoptForeignRows): it is passed over.
const NEXT_ORD =
  "ifnull((SELECT ord FROM outbox_queue WHERE namespace = ?1 AND synced = 0 AND ord IS NOT NULL ORDER BY seq DESC LIMIT 1), 0) + 1";

/** The next free seq of the file: one past everything it ever held. */
const NEXT_SEQ = `max(${SEQ_HIGH_WATER}, ifnull((SELECT max(seq) FROM outbox_queue), 0)) + 1`;

/** The next free seq (one column, `seq`): a transaction reads it once and counts on, under the write lock it holds. */
export const NEXT_SEQ_SQL = `SELECT ${NEXT_SEQ} AS seq`;

/** The outbox_meta key counting a namespace's rows a tenant template marked applied (see Confirmation.markApplied). */
export const markedKey = (namespace: string): string => `marked:${namespace}`;

/**
 * The namespace's pending count from its tail's ord and its first row's (`?1` is the namespace;
 * one column, `pending`), less the rows a tenant template applied out of order and marked
 * (synced = 1, counted in outbox_meta: see Confirmation.markApplied). Positions are consecutive
 * over every queued row, marked or not — the queue only ever loses a prefix — and its last row is
 * never a marked one. (A row the reference's worker left at synced = 1 is not counted as marked:
 * the count then runs from the first pending row, as before.)
 */
export const ORD_PENDING_SQL = `SELECT ifnull((SELECT tail - CASE WHEN marked > 0 THEN min(head, ifnull(markedHead, head)) ELSE head END + 1 - marked FROM (SELECT
          (SELECT ord FROM outbox_queue WHERE namespace = ?1 AND synced = 0 AND ord IS NOT NULL ORDER BY seq DESC LIMIT 1) AS tail,
          (SELECT ord FROM outbox_queue WHERE namespace = ?1 AND synced = 0 AND ord IS NOT NULL ORDER BY seq LIMIT 1) AS head,
          (SELECT ord FROM outbox_queue WHERE namespace = ?1 AND synced = 1 AND ord IS NOT NULL ORDER BY seq LIMIT 1) AS markedHead,
          ifnull((SELECT CAST(value AS INTEGER) FROM outbox_meta WHERE key = 'marked:' || ?1), 0) AS marked)),
        0) AS pending`;

/*
 * A writer that does not know the lean layout — the reference, opening a file we created —
 * inserts without seq or ord. SQLite then gives the row max(seq)+1, which reuses a delivered seq
 * once the queue has drained empty, and a delivery ledger would take that row for delivered. Such
 * rows are found through a partial index of the rows without an ord (our own inserts never enter
 * it: an index whose WHERE is false costs an insert one test, where a trigger cost it a program's
 * invocation) and adopted before anything reads seqs: on open, and inside the drain's read and
 * confirmation (adoptForeignRows).
 */
const FOREIGN_ROWS_INDEX = "idx_outbox_foreign";
const FOREIGN_ROWS_DDL = `CREATE INDEX IF NOT EXISTS ${FOREIGN_ROWS_INDEX} ON outbox_queue (seq) WHERE ord IS NULL`;

/** The most rows one INSERT of a run writes: 2^6 = 64 (then 138 bound values, far below SQLite's limit of 32 766). */
const MAX_ROWS_LOG = 6;
/** The values the rows of one INSERT share, bound once: ?1 … ?11 of rowsInsert. */
const SHARED_VALUES = 11;

/**
 * The INSERT of `rows` consecutive rows of a run: ?1 the first row's seq, ?2 its ord, ?3 the group,
 * ?4 the creation time, ?5 the namespace, ?6 the source, ?7 the seq the first row links to, ?8 ?9
 * ?10 ?11 the trace context, key and tenant; then each row's tag and payload. Row r is at seq ?1 + r and ord
 * ?2 + r, linked to the row before it. One statement per run of rows rather than one per row: each
 * row cost a call into SQLite and twelve values bound, more than writing it.
 */
function rowsInsert(rows: number): string {
  const values = Array.from(
    { length: rows },
    (_, r) =>
      `(?1 + ${r}, ?2 + ${r}, ?3, ?4, ?5, ?6, ?${SHARED_VALUES + 1 + 2 * r}, ?${SHARED_VALUES + 2 + 2 * r}, ${r === 0 ? "?7" : `?1 + ${r - 1}`}, ?8, ?9, ?10, ?11)`,
  );
  return `INSERT INTO outbox_queue (seq, ord, grp, created_at, namespace, source, tag, payload, prev_seq, traceparent, tracestate, lane_key, tenant) VALUES ${values.join(", ")}`;
}

/**
 * The lean layout. Format 4 finds foreign rows by a partial index and adopts them (format 3 moved
 * each with a trigger on every insert); 3 added groups, trace context and the range log; 2 is the
 * lean layout before them. Older files migrate on open. An earlier sqloutbox would misread a newer
 * lean file (a format-3 reader relies on the trigger), so those refuse it.
 */
export const LEAN: Layout = {
  format: 4,
  pendingCount: "ord",
  objects: ["outbox_delivered", "idx_delivered", FOREIGN_ROWS_INDEX],
  triggers: [],

  migrate(db) {
    // Format 3 logs delivered ranges; a format-2 file's per-row log becomes ranges.
    for (const sql of RANGE_LOG_DDL) db.run(sql);
    convertRowLogToRanges(db);
    db.run("DROP TRIGGER IF EXISTS outbox_foreign_insert");
    db.run(FOREIGN_ROWS_DDL);
    LEAN.adoptForeignRows(db);
  },

  adoptForeignRows(db) {
    const foreign = db
      .query<{ seq: number; namespace: string }, []>(
        `SELECT seq, namespace FROM outbox_queue INDEXED BY ${FOREIGN_ROWS_INDEX} WHERE ord IS NULL ORDER BY seq`,
      )
      .all();
    if (foreign.length === 0) return 0;
    const highWater = db.query<{ high: number; top: number }, []>(
      `SELECT ${SEQ_HIGH_WATER} AS high, ifnull((SELECT max(seq) FROM outbox_queue), 0) AS top`,
    );
    const move = db.query("UPDATE outbox_queue SET seq = ?2 WHERE seq = ?1");
    const relink = db.query("UPDATE outbox_queue SET prev_seq = ?2 WHERE namespace = ?3 AND prev_seq = ?1");
    for (const row of foreign) {
      // A seq at or below what the file ever held is a delivered one SQLite handed out again.
      const { high, top } = highWater.get()!;
      if (row.seq > high) continue;
      const seq = Math.max(high, top) + 1;
      move.run(row.seq, seq);
      relink.run(row.seq, seq, row.namespace);
    }
    // Their ords: every pending row's position, counted again (the namespaces are few, the rows rare).
    for (const namespace of new Set(foreign.map((r) => r.namespace))) LEAN.closeHole(db, namespace);
    return foreign.length;
  },

  hasForeignRows(db) {
    return (
      db.query(`SELECT 1 FROM outbox_queue INDEXED BY ${FOREIGN_ROWS_INDEX} WHERE ord IS NULL LIMIT 1`).get() !== null
    );
  },

  // The seq and the ord are read in the statement itself: an autocommit insert needs no read before it.
  insertSql: (columns, values) =>
    `INSERT INTO outbox_queue (seq, ord, ${columns.join(", ")}) SELECT seq, ord, ${values.join(", ")} FROM (SELECT ${NEXT_SEQ} AS seq, ${NEXT_ORD} AS ord)`,

  raiseSequence(db, minSeq) {
    db.query(
      "INSERT INTO outbox_meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = max(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))",
    ).run(SEQ_FLOOR_KEY, minSeq);
  },

  // Nobody else can insert while the transaction holds the write lock: the seq and ord are read once
  // and counted on, so the rows of a run are placed before they are written, and written many to an
  // INSERT: what they share bound once, each row's own values its text and payload (see rowsInsert).
  rowInserts(cache) {
    const nextSeq = cache.prepare<{ seq: number }, []>(NEXT_SEQ_SQL);
    const nextOrd = cache.prepare<{ ord: number }, [string]>(`SELECT ${NEXT_ORD} AS ord`);
    const inserts: Statement[] = [];
    return {
      nextSeq: () => nextSeq.get()!.seq,
      nextOrd: (namespace) => nextOrd.get(namespace)!.ord,
      insert(run, items, prev) {
        if (run.grouped) run.grp ??= run.seq;
        const seqs = new Array<number>(items.length);
        for (let done = 0; done < items.length; ) {
          // The largest power of two left, at most 2^MAX_ROWS_LOG: a handful of statements serve every length.
          const log = Math.min(MAX_ROWS_LOG, 31 - Math.clz32(items.length - done));
          const rows = 1 << log;
          const values = new Array<SQLQueryBindings>(SHARED_VALUES + 2 * rows);
          values[0] = run.seq;
          values[1] = run.ord;
          values[2] = run.grp;
          values[3] = run.createdAt;
          values[4] = run.namespace;
          values[5] = run.source;
          values[6] = prev;
          values[7] = run.traceparent;
          values[8] = run.tracestate;
          values[9] = run.laneKey;
          values[10] = run.tenant;
          for (let r = 0; r < rows; r++) {
            const item = items[done + r]!;
            values[SHARED_VALUES + 2 * r] = item.tag;
            values[SHARED_VALUES + 2 * r + 1] = item.payload;
            seqs[done + r] = run.seq + r;
          }
          (inserts[log] ??= cache.prepare(rowsInsert(rows))).run(...values);
          prev = run.seq + rows - 1;
          run.seq += rows;
          run.ord += rows;
          done += rows;
        }
        return seqs;
      },
    };
  },

  // Pending rows are counted by ord, consecutive from the head: a hole behind it is renumbered away.
  // Every queued row is numbered, those a tenant template marked applied (synced = 1) too: the
  // pending count runs over their positions (see ORD_PENDING_SQL).
  closeHole(db, namespace) {
    db.query(
      `UPDATE outbox_queue SET ord = numbered.n FROM
      (SELECT seq, row_number() OVER (ORDER BY seq) AS n FROM outbox_queue WHERE namespace = ?1) AS numbered
     WHERE outbox_queue.seq = numbered.seq`,
    ).run(namespace);
  },
};
