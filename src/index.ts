// The library: what a Bun app imports from "sqloutbox", as docs/library.md documents it. Named
// exports only, so nothing internal (the drain lock, the lexer, the writers' isolation passes)
// leaks into the public API by accident; test/package-api.test.ts lists every name, so a new
// export is a decision.
export {
  OutboxError,
  ConfigError,
  ConfigIssuesError,
  CrossTableTransactionError,
  CrossTenantTransactionError,
  ForeignTransactionError,
  InvalidArgumentError,
  InvalidStatementError,
  LockedError,
  NotFoundError,
  OutboxClosedError,
  QueueFullError,
  ReplayRefusedError,
  SecretsError,
  ServiceStoppedError,
  StorageError,
  UnsupportedStatementError,
  UsageError,
  WriteError,
  type OutboxErrorCode,
} from "./errors.ts";
export type { BindValue, Dialect, Durability } from "./vocabulary.ts";
export type { Logger } from "./logger.ts";
export { tenantNameProblem } from "./tenant.ts";

// Producing events and reading queue files.
export {
  SQLMiddleware,
  closeSharedOutboxes,
  DEFAULT_MAX_PAYLOAD_BYTES,
  type PushOptions,
  type SQLMiddlewareOptions,
} from "./outbox/middleware.ts";
export {
  Outbox,
  type OutboxOptions,
  type OutboxRow,
  type ChainGap,
  type DeadLetter,
  type DeadReason,
} from "./outbox/outbox.ts";
export { healthAll, type NamespaceHealth, type HealthOptions } from "./outbox/health.ts";
export { listOutboxFiles } from "./outbox/files.ts";
export { verifyFile, type FileVerification, type NamespaceVerification } from "./outbox/inspect.ts";
export { findDeadLetters, type DeadLetterFilter, type FiledDeadLetter } from "./outbox/dead-letters.ts";
export { encodeArgs, decodeArgs } from "./outbox/payload.ts";

// Statements: the checks producers run, placeholder conversion, the compatibility mode's rewrite,
// the remote DDL `sqloutbox schema` prints.
export { validateStatement, checkStatement } from "./sql/statement.ts";
export { injectOutboxSeq, toDialect, type InjectOptions, type RewrittenStatement } from "./sql/rewrite.ts";
export { schemaSql, dropSchemaSql } from "./sql/schema.ts";
export { ledgerDdl } from "./sql/ledger.ts";

// Writers.
export type { Statement, WriteResult, OutboxWriter, WriteOptions, TenantWriters } from "./writers/writer.ts";
export { isTenantWriters } from "./writers/writer.ts";
export { createWriter, builtinWriters, type BuiltinWriterName } from "./writers/registry.ts";
export type { WriterSpec, ConnectionKey } from "./writers/writer-spec.ts";

// Configuration.
export { loadConfigToml, type LoadConfigOptions, type LoadedConfig } from "./config/load.ts";
export { parseConfigToml } from "./config/parse.ts";
export { defineConfig, type ConfigInput, type AppInput, type TargetInput, type TableInput } from "./config/define.ts";
export { createWriters, type CreateWritersOptions } from "./config/writers.ts";
export { maskSecrets } from "./masking.ts";
export { configSecrets } from "./config/secret-values.ts";
export { resolveEnv, type SecretsOptions } from "./config/secrets.ts";
export { DEFAULTS, type OutboxConfig, type AppConfig, type TargetConfig, type TableConfig } from "./config/types.ts";

// The drain, and what operators watch it with.
export { OutboxSyncService, type SyncServiceOptions, type CycleReport, type TargetActivity } from "./drain/service.ts";
export { runService, type RunServiceOptions } from "./drain/run.ts";
export { rowBackoffMs, outageBackoffMs } from "./drain/schedule.ts";
export type { TargetCycle, BatchEvent } from "./drain/delivery.ts";
export type { LockHoldEvent } from "./drain/queue-pool.ts";
export type {
  HoldReason,
  LedgerRow,
  TargetState,
  TargetView,
  TableView,
  TenantHoldView,
  TenantsView,
} from "./drain/views.ts";
export { readDrainState, type DrainState } from "./drain/state-file.ts";
export { createDrainMetrics, type DrainMetrics } from "./ops/metrics.ts";
export { serveOps, type OpsServer } from "./ops/http.ts";
export { createSystemdNotifier, type SystemdNotifier } from "./ops/systemd.ts";
export { createTracing, type Tracing, type TracingOptions, type TraceCounts } from "./ops/tracing/tracing.ts";
export { traceSettings, type TraceSettings } from "./ops/tracing/settings.ts";
export type { DeliveryObserver, ObservedBatch, ObservedRow, ObservedSlice, RowEvent } from "./drain/observer.ts";
export { checkTraceContext, parseTraceparent, type RowTrace, type TraceContextInput } from "./trace-context.ts";
