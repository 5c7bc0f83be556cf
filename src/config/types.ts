import { DEFAULT_FILE_MODE, type Dialect, type Durability } from "../vocabulary.ts";
import type { ListenAddress } from "./listen-address.ts";


/** One table routed to a target; per-table overrides already applied. */
export interface TableConfig {
  name: string;
  /**
   * The compatibility mode: rewrite statements to carry `outbox_seq` for remote schemas built for
   * the Python reference. Default false: statements go verbatim, fenced by the delivery ledger.
   */
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
  /**
   * Keep a delivery ledger in the target and fence every batch with it (exactly once in effect).
   * false: for a writer that cannot run a transaction; delivery is then at least once. Default true.
   */
  ledger: boolean;
  /** Name of the ledger table in the target. Default `sqloutbox_ledger`. */
  ledgerTable: string;
  /** Append each row's `traceparent` to its statement as a sqlcommenter comment (`trace_comments`). Default false. */
  traceComments: boolean;
  tables: TableConfig[];
}

/**
 * One `[app.NAME]`: a db_dir and its tuning, which apply to this app's targets only. Durations are
 * milliseconds here, converted once from the TOML keys (seconds, minutes) when the config is read.
 */
export interface AppConfig {
  name: string;
  /** Absolute path of the directory holding `{table}.db` files — with `dbFile`, that file's directory. */
  dbDir: string;
  /**
   * Absolute path of the one file holding every table of the app as a namespace (`db_file`;
   * possibly the application's own database); null: one `{table}.db` file per table in `dbDir`.
   */
  dbFile: string | null;
  /** The label this app's origins carry in the ledger (`origin_label`). Default: the host name. */
  originLabel: string;
  /** Max rows per table per cycle. Default 500. */
  batchSize: number;
  /** Max bytes (SQL text + payload) of one target's batch; a single larger row goes alone. Default 16 MiB. */
  batchMaxBytes: number;
  /** Between scans (`flush_interval`). Default 1 000. */
  flushIntervalMs: number;
  /** Pending rows that make a table ready at once. Default 15. */
  tableFlushThreshold: number;
  /** How long the oldest pending row may wait before its table is flushed anyway. Default 6 000. */
  tableMaxWaitMs: number;
  /** Create the ledger table (and, for injected tables, `outbox_seq` + its index) when missing. Default true. */
  autoSchema: boolean;
  /** Prune the sync log every N cycles. Default 500. */
  cleanupEvery: number;
  /** Default retention of the sync log, days. Default 30. */
  retainLogDays: number;
  /** Days a replayed dead letter is kept after its replay (never-replayed ones are kept). Default 30. */
  retainReplayedDays: number;
  /** Hard cap of pending rows per namespace for producers; null = unbounded (default). */
  maxPending: number | null;
  /** Dead-letter a head after this many failed attempts; null = retry forever. Default 10. */
  maxAttempts: number | null;
  /** Backoff unit of a failed row: it waits 2^attempts units. Default 60 000. */
  backoffUnitMs: number;
  /** Cap of a failed row's backoff. Default 64 minutes. */
  backoffCapMs: number;
  /** Cap of an unreachable target's backoff (it starts at one second, doubling, jittered). Default 5 minutes. */
  outageBackoffCapMs: number;
  /** How long one writeBatch may take before the target counts as down. Default 30 000. */
  writeTimeoutMs: number;
  durability: Durability;
  /** Permission bits of the queue files and the lock file this app creates. Default 0o600. */
  fileMode: number;
  targets: TargetConfig[];
}

/** The whole configuration: one or more apps. */
export interface OutboxConfig {
  /** The file it was loaded from, if any (used to resolve relative paths in messages). */
  file?: string;
  /** The directory relative paths (`db_dir`, `writer_class`, sqlite `path`) were resolved against: the config file's. */
  baseDir?: string;
  /** Where `runservice` serves /metrics, /healthz and /readyz (`metrics_addr`); null: off (default). */
  metricsAddr: ListenAddress | null;
  /** `[tracing]`: the OTLP export of delivery spans, as configured (the OTEL_* variables fill in what it leaves null). */
  tracing: TracingConfig;
  apps: AppConfig[];
}

/** The OTLP/HTTP encodings the drain can export in. */
export type TraceProtocol = "http/protobuf" | "http/json";
export const TRACE_PROTOCOLS: readonly TraceProtocol[] = ["http/protobuf", "http/json"];

/** `[tracing]` as written: null where a key is absent (then OTEL_* decides). */
export interface TracingConfig {
  /** false: off even when OTEL_* names an endpoint; true: on (at http://localhost:4318 unless an endpoint is given). */
  enabled: boolean | null;
  /** The collector's OTLP/HTTP base URL; spans go to `{endpoint}/v1/traces`. */
  endpoint: string | null;
  protocol: TraceProtocol | null;
  /** Sent with every export (an API key): secrets. */
  headers: Record<string, string>;
  serviceName: string | null;
  /** Spans waiting for export beyond this are dropped, and counted. Default 8 192. */
  maxQueueSpans: number;
  /** The most spans made a second (bursts of a second's worth allowed); the batches beyond get none, counted. Default 2 000. */
  maxSpansPerSecond: number;
  /** How long one export may take, retries included. Default 10 000. */
  exportTimeoutMs: number;
}

/** Defaults of every tunable key, in the units of the TOML key named in the comment. */
export const DEFAULTS = {
  batchSize: 500, // batch_size
  batchMaxBytes: 16 * 1024 * 1024, // batch_max_bytes
  flushInterval: 1.0, // flush_interval, seconds
  tableFlushThreshold: 15, // table_flush_threshold
  tableMaxWait: 6.0, // table_max_wait, seconds
  autoSchema: true, // auto_schema
  cleanupEvery: 500, // cleanup_every
  retainLogDays: 30, // retain_log_days
  retainReplayedDays: 30, // retain_replayed_days
  maxPending: null, // max_pending
  maxAttempts: 10, // max_attempts
  backoffCapMinutes: 64, // backoff_cap_minutes
  backoffUnitSeconds: 60, // backoff_unit_seconds
  outageBackoffCapMinutes: 5, // outage_backoff_cap_minutes
  writeTimeout: 30, // write_timeout, seconds
  durability: "normal", // durability
  fileMode: DEFAULT_FILE_MODE, // file_mode
  injectOutboxSeq: false, // inject_outbox_seq
  compat: false, // compat
  ledger: true, // ledger
  ledgerTable: "sqloutbox_ledger", // ledger_table
  traceComments: false, // trace_comments
  maxQueueSpans: 8192, // [tracing] max_queue_spans
  maxSpansPerSecond: 2000, // [tracing] max_spans_per_second
  exportTimeout: 10, // [tracing] export_timeout, seconds
} as const satisfies Record<string, unknown>;
