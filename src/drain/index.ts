export { OutboxSyncService, type SyncServiceOptions, type CycleReport, type TargetActivity } from "./service.ts";
export { runService, type RunServiceOptions } from "./run.ts";
export { acquireLock, LOCK_FILE_NAME, type DrainLock } from "./lock.ts";
export { rowBackoffMs, outageBackoffMs } from "./schedule.ts";
export type { TargetCycle, TargetState } from "./target.ts";
export type { LedgerRow } from "./ledger.ts";
export type { IntegrityReport } from "./integrity.ts";
