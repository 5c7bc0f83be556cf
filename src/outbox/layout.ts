import type { Database, SQLQueryBindings, Statement } from "bun:sqlite";

/*
 * A queue file has one of two layouts, which the reference reads alike (it only ever names its own
 * columns): lean for the files we create (layout-lean.ts), legacy for the files the reference
 * created (layout-legacy.ts). Both carry the reference's columns, ours (QUEUE_EXTRA_COLUMNS), the
 * worker index, the dead log, `outbox_meta` and `outbox_group` (schema.ts); a layout is what
 * differs: how a row gets its seq, how pending rows are counted, and the format it is kept at. What
 * a file remembers of delivered rows differs with the layout too, in delivered.ts (DELIVERED).
 */

/** The layouts a queue file can have; each has its `Layout` in LAYOUTS (schema.ts). */
export type QueueLayout = "lean" | "legacy";

/**
 * How a file counts a namespace's pending rows: lean files from the head's and tail's ord (two
 * index reads), legacy files from our trigger-kept counter, reference files by a scan of the
 * namespace's index range.
 */
export type PendingCount = "ord" | "counter" | "scan";

/** Columns we add to outbox_queue in both layouts: the delivery state of the head, the group, the trace context. */
export const QUEUE_EXTRA_COLUMNS: ReadonlyArray<readonly [string, string]> = [
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
  // The row's key (its text): rows of one key are delivered in order in their lane; NULL when none.
  ["lane_key", "TEXT"],
  // The tenant whose database the row goes to, on a tenant template target (SPEC §4c); NULL when none.
  ["tenant", "TEXT"],
];

/**
 * Where a layout keeps the statements it prepares: a queue file's (QueueFile.prepare), finalized with its
 * connection.
 */
export interface StatementCache {
  prepare<Row = unknown, Params extends SQLQueryBindings[] = SQLQueryBindings[]>(sql: string): Statement<Row, Params>;
}

/** One event to append: its tag (SQL text) and payload (encoded arguments). */
export interface AppendItem {
  tag: string;
  payload: string;
}

/**
 * A run of rows one namespace appends under one write lock: what they share, and where the next
 * one goes. One object per Appender, filled in for each run: a row costs no allocation.
 */
export interface AppendRun {
  namespace: string;
  createdAt: string;
  source: string;
  traceparent: string | null;
  tracestate: string | null;
  laneKey: string | null;
  tenant: string | null;
  /** The rows' group: the open group's id; null for rows alone, or for a group whose first row is still to come. */
  grp: number | null;
  /** Whether the rows form a group: the first row of a group without an id yet gives it its seq. */
  grouped: boolean;
  /**
   * Where the next row goes, for a layout that places rows itself (lean); one whose file allocates them
   * leaves both alone.
   */
  seq: number;
  ord: number;
}

/** One namespace's row INSERT of a layout, prepared once: what every append inside a write transaction goes through. */
export interface RowInserts {
  /** The file's next free seq, read once under the write lock and counted on (0 where the file allocates seqs). */
  nextSeq(): number;
  /** The namespace's next ord, read once under the write lock and counted on (0 where the layout keeps none). */
  nextOrd(namespace: string): number;
  /**
   * Inserts `items` as pending rows of `run`, the first linked to `prev`, each later one to the one
   * before, and returns their seqs; moves `run` on to the next row's place, and sets `run.grp` when
   * these rows open the group.
   */
  insert(run: AppendRun, items: readonly AppendItem[], prev: number | null): number[];
}

/**
 * What one layout is on disk and how it is written. Every part is required, so a third layout
 * does not compile until it says how it does each. Functions taking `db` run inside the caller's
 * write transaction.
 */
export interface Layout {
  /** The format a file of this layout is kept at (`PRAGMA user_version`, or `format` in an application's database). */
  readonly format: number;
  /** How its pending rows are counted (see PendingCount). */
  readonly pendingCount: Exclude<PendingCount, "scan">;
  /** Its own tables and indexes, and its triggers: when all are there (with the shared ones), the file is migrated. */
  readonly objects: readonly string[];
  readonly triggers: readonly string[];
  /** Creates what is its own (idempotent), after the shared tables: the delivered log, the triggers it relies on. */
  migrate(db: Database): void;
  /**
   * The INSERT of one pending row with the given columns and value expressions, which allocates
   * the row's seq (and ord) itself: an autocommit push, a row moved above a seq. `?1` must be the
   * namespace.
   */
  insertSql(columns: readonly string[], values: readonly string[]): string;
  /** Makes every seq allocated from now on greater than `minSeq`; never lowers the sequence. */
  raiseSequence(db: Database, minSeq: number): void;
  /** The row INSERT of appends inside a write transaction, prepared on `cache`. */
  rowInserts(cache: StatementCache): RowInserts;
  /**
   * Gives rows a writer that does not know this layout inserted (the reference, into a file we
   * created) their place — a seq above every seq the file ever held, links to a moved row
   * followed, a position in the pending count — and returns how many it found. Runs before seqs
   * are read or confirmed; a layout whose file allocates seqs itself has nothing to adopt.
   */
  adoptForeignRows(db: Database): number;
  /** Whether such rows wait to be adopted (one probe, for a read transaction that must not see them). */
  hasForeignRows(db: Database): boolean;
  /**
   * Rows of `namespace` left its queue from behind its head (a confirm out of order, a group's part
   * dead-lettered behind another head): keeps its pending count right.
   */
  closeHole(db: Database, namespace: string): void;
}
