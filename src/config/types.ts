import type { Dialect } from "../writers/writer.ts";

/** Local durability of the outbox files: `normal` = synchronous=NORMAL (default), `full` = synchronous=FULL. */
export type Durability = "normal" | "full";

/** One table routed to a target; per-table overrides already applied. */
export interface TableConfig {
  name: string;
  /** Rewrite statements to carry `outbox_seq` (idempotent delivery). Default true. */
  injectOutboxSeq: boolean;
  /** Days to keep `outbox_sync_log` entries for this table. Default 30. */
  retainLogDays: number;
}

/** One remote database target, named `app.db`. */
export interface TargetConfig {
  /** `${app}.${db}` — the key of this target's writer. */
  name: string;
  app: string;
  db: string;
  /** A built-in writer name (`sqlite`, `libsql`, `postgres`, `mysql`), or null with `writerClass`. */
  writer: string | null;
  /** `./path.ts:Export` or `package:Export`, resolved relative to the config file. */
  writerClass: string | null;
  /** The `[connection]` table as given (after `${VAR}` interpolation). Contains secrets: never log it. */
  connection: Record<string, unknown>;
  /** Overrides the writer's dialect for rewriting (custom writers without `dialect`). */
  dialect: Dialect | null;
  /** Produce the reference's rewrite forms (`INSERT OR IGNORE`, unguarded UPDATE). Default false. */
  compat: boolean;
  tables: TableConfig[];
}

/** One `[app.NAME]`: a db_dir and its tuning, which apply to this app's targets only. */
export interface AppConfig {
  name: string;
  /** Absolute path of the directory holding `{table}.db` files. */
  dbDir: string;
  /** Max rows per table per cycle. Default 500. */
  batchSize: number;
  /** Seconds between scans (`flush_interval`). Default 1.0. */
  flushInterval: number;
  /** Pending rows that make a table ready at once. Default 15. */
  tableFlushThreshold: number;
  /** Seconds the oldest pending row may wait before its table is flushed anyway. Default 6.0. */
  tableMaxWait: number;
  /** Add `outbox_seq` + unique index to injected remote tables on startup (never drops). Default true. */
  autoSchema: boolean;
  /** Prune the sync log every N cycles. Default 500. */
  cleanupEvery: number;
  /** Default retention of the sync log, days. Default 30. */
  retainLogDays: number;
  /** Hard cap of pending rows per namespace for producers; null = unbounded (default). */
  maxPending: number | null;
  /** Dead-letter a head after this many failed attempts; null = retry forever. Default 10. */
  maxAttempts: number | null;
  /** Cap of the per-row and per-target backoff, minutes. Default 64. */
  backoffCapMinutes: number;
  /** Backoff unit: a head that failed n times waits 2^n units. Seconds; default 60. */
  backoffUnitSeconds: number;
  /** Seconds one writeBatch may take before the target counts as down. Default 30. */
  writeTimeout: number;
  durability: Durability;
  targets: TargetConfig[];
}

/** The whole configuration: one or more apps. */
export interface OutboxConfig {
  /** The file it was loaded from, if any (used to resolve relative paths in messages). */
  file?: string;
  /** The directory relative paths (`db_dir`, `writer_class`, sqlite `path`) were resolved against: the config file's. */
  baseDir?: string;
  apps: AppConfig[];
}

/** Defaults of every tunable key (TOML names in comments). */
export const DEFAULTS = {
  batchSize: 500, // batch_size
  flushInterval: 1.0, // flush_interval
  tableFlushThreshold: 15, // table_flush_threshold
  tableMaxWait: 6.0, // table_max_wait
  autoSchema: true, // auto_schema
  cleanupEvery: 500, // cleanup_every
  retainLogDays: 30, // retain_log_days
  maxPending: null, // max_pending
  maxAttempts: 10, // max_attempts
  backoffCapMinutes: 64, // backoff_cap_minutes
  backoffUnitSeconds: 60, // backoff_unit_seconds
  writeTimeout: 30, // write_timeout
  durability: "normal", // durability
  injectOutboxSeq: true, // inject_outbox_seq
  compat: false, // compat
} as const satisfies Record<string, unknown>;
