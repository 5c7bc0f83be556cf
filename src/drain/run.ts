import type { OutboxConfig } from "../config/types.ts";
import { libraryLogger, type Logger } from "../logger.ts";
import type { OutboxWriter, TenantWriters } from "../writers/writer.ts";
import { realScheduler, type Scheduler } from "../scheduler.ts";
import { DEFAULT_STOP_TIMEOUT_MS, OutboxSyncService, type SyncServiceOptions, type TargetActivity } from "./service.ts";
import { DEFAULT_STATE_INTERVAL_MS } from "./state-file.ts";
import { formatDuration } from "../duration.ts";

/** Options of `runService`. */
export interface RunServiceOptions extends SyncServiceOptions {
  /**
   * Upper bound (ms) for finishing the in-flight batch after a stop signal (SIGTERM, SIGINT, SIGHUP or
   * `signal`). Default 10 000.
   */
  stopTimeoutMs?: number;
  /** Stops the service without a signal, e.g. from a test or an embedding app. */
  signal?: AbortSignal;
  /** Interval (ms) of the "what the drain did" info line; 0 turns it off. Default 60 000. */
  activityLogIntervalMs?: number;
  /** Interval (ms) at which each db_dir's drain state (for `status`) is rewritten; 0 turns it off. Default 2 000. */
  stateIntervalMs?: number;
  /**
   * Called with the service as soon as it is constructed, before startup (e.g. for health endpoints that say
   * "starting").
   */
  onCreated?: (service: OutboxSyncService) => void;
  /** Called once the service is running (locks held, startup done or bounded, loops started). */
  onStarted?: (service: OutboxSyncService) => void;
  /** Called once when stopping begins (a signal or `signal`), before the in-flight batch settles. */
  onStopping?: (why: string) => void;
}

/**
 * Runs the drain until SIGTERM, SIGINT or SIGHUP (or `options.signal` aborts): starts the
 * service, logs an integrity scan on SIGUSR1, retries every backed-off target and held table at
 * once on SIGUSR2 (`sqloutbox kick`), logs a line of activity every minute and rewrites each
 * db_dir's drain state every two seconds; on a stop signal stops scheduling, lets the in-flight
 * batch settle (bounded by `stopTimeoutMs`), closes the writers and releases the locks. Resolves
 * when stopped — the caller exits 0. Rejects if startup fails (e.g. `LockedError`).
 */
export async function runService(
  config: OutboxConfig,
  writers: Record<string, OutboxWriter | TenantWriters>,
  options: RunServiceOptions = {},
): Promise<void> {
  const logger: Logger = libraryLogger(options.logger);
  const stopTimeoutMs = options.stopTimeoutMs ?? DEFAULT_STOP_TIMEOUT_MS;
  const service = new OutboxSyncService(config, writers, options);
  options.onCreated?.(service);
  let finish!: () => void;
  const done = new Promise<void>((resolve) => {
    finish = resolve;
  });
  let started = false;
  let starting = false;
  let stopRequested: string | null = null;
  let stopping = false;
  let stopActivityLog = () => {};
  let stopState = () => {};
  const stop = (why: string) => {
    if (!started) {
      // A signal during startup: nothing is in flight yet, so stop now rather than wait out a
      // remote that hangs; start() returns as soon as stop() begins.
      if (stopRequested) return;
      stopRequested = why;
      logger.info(`drain: ${why} during startup: stopping`);
      if (starting)
        void service
          .stop(stopTimeoutMs)
          .catch((error) => logger.error(`drain: stop failed: ${(error as Error).message}`));
      return;
    }
    if (stopping) {
      logger.warn(
        `drain: ${why} again while stopping; still waiting for the in-flight batch (at most ${formatDuration(stopTimeoutMs)})`,
      );
      return;
    }
    stopping = true;
    logger.info(`drain: ${why}: finishing the in-flight batch and stopping`);
    options.onStopping?.(why);
    service
      .stop(stopTimeoutMs)
      .catch((error) => logger.error(`drain: stop failed: ${(error as Error).message}`))
      .finally(finish);
  };
  const onTerm = () => stop("SIGTERM");
  const onInt = () => stop("SIGINT");
  // The controlling terminal went away: stop as gracefully as on SIGTERM rather than die mid-batch.
  const onHup = () => stop("SIGHUP");
  const onUsr1 = () => {
    if (!started) return;
    try {
      service.integrityScan();
    } catch (error) {
      logger.error(`drain: integrity scan failed: ${(error as Error).message}`);
    }
  };
  // The operator fixed the remote: do not make them wait out a backoff.
  const onUsr2 = () => {
    if (!started) return;
    logger.info("drain: SIGUSR2: retrying every backed-off target and held table now");
    service.retryNow();
  };
  const onAbort = () => stop("stop requested");
  process.on("SIGTERM", onTerm);
  process.on("SIGINT", onInt);
  process.on("SIGHUP", onHup);
  process.on("SIGUSR1", onUsr1);
  process.on("SIGUSR2", onUsr2);
  if (options.signal?.aborted) onAbort();
  options.signal?.addEventListener("abort", onAbort, { once: true });
  try {
    if (!stopRequested) {
      starting = true;
      try {
        await service.start();
      } catch (error) {
        await service.stop(0).catch(() => {});
        throw error;
      }
    }
    if (stopRequested) {
      await service
        .stop(stopTimeoutMs)
        .catch((error) => logger.error(`drain: stop failed: ${(error as Error).message}`));
      return;
    }
    started = true;
    const every = options.activityLogIntervalMs ?? 60_000;
    const scheduler = options.scheduler ?? realScheduler;
    if (every > 0) stopActivityLog = logActivity(service, logger, every, scheduler);
    const stateEvery = options.stateIntervalMs ?? DEFAULT_STATE_INTERVAL_MS;
    if (stateEvery > 0) {
      service.persistState();
      stopState = scheduler.timer(stateEvery, () => service.persistState(), { repeat: true, unref: true });
    }
    options.onStarted?.(service);
    await done;
    if (stateEvery > 0) service.persistState({ stopped: true });
  } finally {
    process.off("SIGTERM", onTerm);
    process.off("SIGINT", onInt);
    process.off("SIGHUP", onHup);
    process.off("SIGUSR1", onUsr1);
    process.off("SIGUSR2", onUsr2);
    stopActivityLog();
    stopState();
    options.signal?.removeEventListener("abort", onAbort);
  }
}

/**
 * Logs one line every `intervalMs` saying what the drain did since the previous line: rows
 * delivered (per target), failed and dead-lettered, rows pending, and targets that are down — so
 * an operator reading the journal can tell a healthy idle drain from a stuck one. Returns a stop
 * function. The timer never keeps the process alive.
 */
function logActivity(service: OutboxSyncService, logger: Logger, intervalMs: number, scheduler: Scheduler): () => void {
  let last = new Map(service.activity().map((a) => [a.target, a]));
  const repeat = () => {
    if (service.isStopped) return; // stopping: the service no longer answers, and the last line is said
    try {
      const now = service.activity();
      const delta = now.map((a) => minus(a, last.get(a.target)));
      last = new Map(now.map((a) => [a.target, a]));
      logger.info(describe(delta, service.totalPending(), intervalMs));
    } catch (error) {
      logger.warn(`drain: activity summary failed: ${(error as Error).message}`);
    }
  };
  return scheduler.timer(intervalMs, repeat, { repeat: true, unref: true });
}

function minus(a: TargetActivity, before: TargetActivity | undefined): TargetActivity {
  if (!before) return a;
  return {
    ...a,
    delivered: a.delivered - before.delivered,
    failed: a.failed - before.failed,
    deadLettered: a.deadLettered - before.deadLettered,
  };
}

/**
 * `drain: last 1m0s: delivered 1200 (app.pg 1000, app.local 200), 1 failed, 0 dead-lettered; 35 pending;
 * down: app.pg`
 */
function describe(delta: TargetActivity[], pending: number, intervalMs: number): string {
  const sum = (k: "delivered" | "failed" | "deadLettered") => delta.reduce((n, a) => n + a[k], 0);
  const per = delta.length > 1 ? ` (${delta.map((a) => `${a.target} ${a.delivered}`).join(", ")})` : "";
  const down = delta.filter((a) => a.down).map((a) => a.target);
  return (
    `drain: last ${formatDuration(intervalMs)}: delivered ${sum("delivered")}${per}, ${sum("failed")} failed, ` +
    `${sum("deadLettered")} dead-lettered; ${pending} pending${down.length ? `; down: ${down.join(", ")}` : ""}`
  );
}
