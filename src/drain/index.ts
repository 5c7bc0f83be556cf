export { OutboxSyncService, type SyncServiceOptions, type CycleReport, type TargetActivity } from "./service.ts";
export { runService, type RunServiceOptions } from "./run.ts";
export { acquireLock, LOCK_FILE_NAME, type DrainLock } from "./lock.ts";
export { rowBackoffMs, targetBackoffMs } from "./backoff.ts";
export type { TargetCycle } from "./target.ts";
export type { IntegrityReport } from "./integrity.ts";
