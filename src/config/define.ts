import { resolve } from "node:path";
import type { BuiltinWriterName } from "../writers/registry.ts";
import type { Dialect } from "../vocabulary.ts";
import { buildConfig } from "./build.ts";
import type { Durability } from "../vocabulary.ts";
import type { OutboxConfig } from "./types.ts";

/** One table of a target: a name, or a name with per-table overrides. */
export type TableInput = string | { name: string; injectOutboxSeq?: boolean; retainLogDays?: number };

/** One target (`[app.NAME.db.DB]` in TOML): exactly one of `writer` / `writerClass`. */
export interface TargetInput {
  writer?: BuiltinWriterName;
  /** `"./file.ts:Export"` (relative to `baseDir`) or `"package:Export"`. */
  writerClass?: string;
  tables: TableInput[];
  /** true/false for every table, or the names of the tables to inject. Default false (the ledger). */
  injectOutboxSeq?: boolean | string[];
  retainLogDays?: number;
  dialect?: Dialect;
  compat?: boolean;
  /** Fence batches with a delivery ledger in the target (default true); false = at least once. */
  ledger?: boolean;
  /** The ledger table's name (default "sqloutbox_ledger"). */
  ledgerTable?: string;
  /** Append each row's traceparent to its statement as a sqlcommenter comment (default false). */
  traceComments?: boolean;
  /** Passed to the writer as is (keys as the writer documents them). */
  connection?: Record<string, unknown>;
}

/**
 * One app (`[app.NAME]` in TOML): the same keys in camelCase and the same units (seconds,
 * minutes, as the names say); `null` or 0 means "no limit".
 */
export interface AppInput {
  /** One `{table}.db` file per table here; exactly one of `dbDir` and `dbFile`. */
  dbDir?: string;
  /** Every table as a namespace of this one file (it may be the application's own database). */
  dbFile?: string;
  originLabel?: string;
  batchSize?: number;
  batchMaxBytes?: number;
  /** Seconds. */
  flushInterval?: number;
  tableFlushThreshold?: number;
  /** Seconds. */
  tableMaxWait?: number;
  autoSchema?: boolean;
  cleanupEvery?: number;
  retainLogDays?: number;
  retainReplayedDays?: number;
  maxPending?: number | null;
  maxAttempts?: number | null;
  backoffCapMinutes?: number;
  backoffUnitSeconds?: number;
  outageBackoffCapMinutes?: number;
  /** Seconds. */
  writeTimeout?: number;
  durability?: Durability;
  /** Permission bits of created queue files, e.g. 0o600. */
  fileMode?: number;
  db: Record<string, TargetInput>;
}

/** `[tracing]` in camelCase; `exportTimeout` in seconds, as in TOML. */
export interface TracingInput {
  enabled?: boolean;
  endpoint?: string;
  protocol?: "http/protobuf" | "http/json";
  headers?: Record<string, string>;
  serviceName?: string;
  maxQueueSpans?: number;
  maxSpansPerSecond?: number;
  /** Seconds. */
  exportTimeout?: number;
}

/** The programmatic form of outbox.toml. */
export interface ConfigInput {
  /** Relative `dbDir`, `writerClass` and sqlite `path` resolve against this (default: the cwd). */
  baseDir?: string;
  /** Where `runService` callers may serve metrics: `"HOST:PORT"` or a port (127.0.0.1). */
  metricsAddr?: string | number;
  /** `[tracing]`: the OTLP export of delivery spans (OTEL_* variables fill in what is not given). */
  tracing?: TracingInput;
  app: Record<string, AppInput>;
}

/**
 * Validates a programmatic config exactly like outbox.toml (camelCase keys, no `${VAR}`
 * interpolation) and returns it with defaults applied and paths absolute. Throws `ConfigError`/`ConfigIssuesError`.
 */
export function defineConfig(input: ConfigInput): OutboxConfig {
  const { baseDir, ...doc } = input;
  return buildConfig(doc, { baseDir: resolve(baseDir ?? process.cwd()), env: null, style: "camel" }).config;
}
