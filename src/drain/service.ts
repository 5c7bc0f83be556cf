import path from "node:path";
import type { AppConfig, OutboxConfig } from "../config/types.ts";
import { ConfigError, ServiceStoppedError } from "../errors.ts";
import { libraryLogger, type Logger } from "../logger.ts";
import { realScheduler, type Scheduler } from "../scheduler.ts";
import { withTimeout } from "../timeout.ts";
import { isTenantWriters, type OutboxWriter, type TenantWriters } from "../writers/writer.ts";
import { scanIntegrity, type IntegrityReport } from "../outbox/inspect.ts";
import { FileCare } from "./file-care.ts";
import { drainHome } from "./home.ts";
import { acquireLock, type DrainLock } from "./lock.ts";
import { type LockHoldEvent, QueuePool } from "./queue-pool.ts";
import { writeDrainState, type DrainState } from "./state-file.ts";
import type { DeliveryObserver } from "./observer.ts";
import type { BatchEvent, TargetCycle } from "./delivery.ts";
import { TargetRunner } from "./target.ts";
import type { TargetView } from "./views.ts";
import { formatDuration } from "../duration.ts";
import type { DirWatch } from "./wake.ts";

/** How long `stop()` waits for the in-flight batches unless told otherwise (`stopTimeoutMs`): 10 s. */
export const DEFAULT_STOP_TIMEOUT_MS = 10_000;

/** Options of an `OutboxSyncService` beyond the config. */
export interface SyncServiceOptions {
  /** Where the drain reports; silent by default. */
  logger?: Logger;
  /**
   * The drain's one clock (epoch ms), for everything it schedules, stores and compares: readiness, backoffs,
   * holds, the loop's sleeps, the state file; tests may shift it. Default: the scheduler's.
   */
  now?: () => number;
  /**
   * Where every sleep, timer and timeout of the drain comes from, and the jitter of its retries (see
   * Scheduler). Default: the process's own (`realScheduler`); the simulator gives a virtual one.
   */
  scheduler?: Scheduler;
  /** How the directories of the queue files are watched for commits. Default: fs.watch. */
  watch?: DirWatch;
  /**
   * How the lock of each queue location is taken (see acquireLock: an exclusive flock of its lock
   * file, default). The simulator gives its own, so a drain it abandons mid-flight (a crash) lets go
   * of them as a process that dies does.
   */
  lock?: (lockFile: string, fileMode: number) => DrainLock;
  /**
   * How long (ms) after a file changed without a commit the drain's connection can see yet it is
   * checked again (`PRAGMA data_version`), doubling up to 64 ms. Default: a quarter of
   * `flush_interval`, between 1 and 50 ms.
   */
  pollIntervalMs?: number;
  /** How long `stop()` waits for the in-flight batch by default (ms). Default 10 000. */
  stopTimeoutMs?: number;
  /** Told about every batch a target answered (rows, duration): for metrics. */
  onBatch?: (event: BatchEvent) => void;
  /**
   * Told how long each of the drain's write transactions held a queue file's write lock (every
   * producer of that file, the application's own writes in a `db_file` included, waits meanwhile):
   * for metrics. Called on the drain's thread: it must return at once.
   */
  onLockHold?: (event: LockHoldEvent) => void;
  /**
   * Told what every batch carried and what became of its rows — sent, applied, failed,
   * dead-lettered, held — for tracing (`createTracing` in src/ops/tracing/). Default: none.
   */
  observer?: DeliveryObserver;
}

/** Cumulative counts of one target, for periodic activity logs and health endpoints. */
export interface TargetActivity {
  target: string;
  delivered: number;
  failed: number;
  deadLettered: number;
  /** The target is backing off after an outage, or is misconfigured. */
  down: boolean;
}

/** What one `runOnce()` did across every target. */
export interface CycleReport {
  delivered: number;
  failed: number;
  deadLettered: number;
  /** Targets that were down (or still backing off) in this cycle. */
  outages: string[];
  /** Some target has more rows ready right now. */
  more: boolean;
  targets: TargetCycle[];
}

/**
 * The drain: delivers every served table's queue to its target, head-of-line per namespace,
 * exactly once in effect through each target's delivery ledger (at least once for a target with
 * `ledger = false`), with one `writeBatch` per target per cycle. `writers` is keyed by target name
 * (`app.db`). Construction validates; `start()` takes the db_dir locks, opens the queues (a file
 * that cannot be opened holds only its table), sets up each target and starts one loop per target;
 * `stop()` lets in-flight batches settle, then closes writers and queues and releases the locks.
 */
export class OutboxSyncService {
  private readonly logger: Logger;
  private readonly now: () => number;
  private readonly scheduler: Scheduler;
  private readonly runners: TargetRunner[] = [];
  private locks: DrainLock[] = [];
  /** The drain's connections to db_files, shared by every target serving one. */
  private readonly pool = new QueuePool();
  /** WAL and free space of every file served (shared: a db_file may serve several targets). */
  private readonly care: FileCare;
  private readonly startedAt: string;
  private opened = false;
  private closed = false;
  private looping = false;
  private stopped: Promise<void> | null = null;
  /** Each target's delivered total at the last persistState, and when: the base of the next write's `recent`. */
  private persisted: { at: number; delivered: Map<string, number> } | null = null;
  /** Resolves when stop() is first called: a pending start() gives up its startup wait then. */
  private readonly stopSignal = Promise.withResolvers<void>();

  constructor(
    readonly config: OutboxConfig,
    private readonly writers: Record<string, OutboxWriter | TenantWriters>,
    private readonly options: SyncServiceOptions = {},
  ) {
    this.logger = libraryLogger(options.logger);
    this.scheduler = options.scheduler ?? realScheduler;
    const scheduler = this.scheduler;
    this.now = options.now ?? (() => scheduler.now());
    this.startedAt = new Date(this.now()).toISOString();
    this.care = new FileCare(this.logger, undefined, scheduler);
    const served = new Set<string>();
    for (const app of config.apps) {
      for (const target of app.targets) {
        const writer = writers[target.name];
        // A tenant template takes the writers of its tenants (TenantWriters: see createWriters); any other
        // target one writer.
        const fits =
          target.tenants !== null
            ? isTenantWriters(writer)
            : !!writer && !isTenantWriters(writer) && typeof writer.writeBatch === "function";
        if (!fits) {
          throw new ConfigError(
            target.tenants !== null
              ? `no tenant writers for tenant template target "${target.name}" (expected writers["${target.name}"] to be the TenantWriters createWriters makes for it)`
              : `no writer for target "${target.name}" (expected writers["${target.name}"] with a writeBatch method)`,
            {
              file: config.file,
              keyPath: `app.${app.name}.db.${target.db}`,
            },
          );
        }
        for (const table of target.tables) {
          const key = `${path.resolve(app.dbFile ?? app.dbDir)}\0${table.name}`;
          if (served.has(key)) {
            throw new ConfigError(
              `table "${table.name}" in ${app.dbFile ?? app.dbDir} is routed to more than one target; one queue can feed one target`,
              {
                file: config.file,
                keyPath: `app.${app.name}.db.${target.db}.tables`,
              },
            );
          }
          served.add(key);
        }
      }
    }
  }

  /**
   * Takes the locks, opens the queues, runs startup for every target (bounded by write_timeout, or
   * until stop() is called) and starts the loops.
   */
  async start(): Promise<void> {
    this.open();
    if (this.looping) return;
    await Promise.race([Promise.all(this.runners.map((r) => r.startupBounded())), this.stopSignal.promise]);
    if (this.closed) return; // stopped during startup
    this.looping = true;
    for (const runner of this.runners) runner.startLoop();
    this.logger.info(
      `drain: started: ${this.runners.length} target(s), ${this.tables().length} table(s), ${this.locks.length} queue location(s)`,
    );
  }

  /**
   * Stops scheduling, waits up to `timeoutMs` for in-flight batches to be delivered and confirmed,
   * then closes the writers and queues and releases the locks. Idempotent: every call resolves
   * when the first one is done.
   */
  stop(timeoutMs = this.options.stopTimeoutMs ?? DEFAULT_STOP_TIMEOUT_MS): Promise<void> {
    this.stopped ??= this.shutdown(timeoutMs);
    return this.stopped;
  }

  private async shutdown(timeoutMs: number): Promise<void> {
    this.closed = true;
    this.stopSignal.resolve();
    const settled = Promise.all(this.runners.map((r) => r.stopLoop())).then(() => true);
    const clean = await withTimeout(settled, timeoutMs, () => false, this.scheduler);
    if (!clean)
      this.logger.warn(
        `drain: an in-flight batch did not settle within ${formatDuration(timeoutMs)}; its rows stay queued and are settled from the ledger on the next start`,
      );
    for (const runner of this.runners) await runner.closeWriter();
    for (const runner of this.runners) runner.closeTables();
    this.pool.close();
    for (const lock of this.locks) lock.release();
    this.locks = [];
    if (this.opened) this.logger.info("drain: stopped");
  }

  /** Runs exactly one cycle of every target (startup first where still pending); for tests and tools. */
  async runOnce(): Promise<CycleReport> {
    this.open();
    const targets = await Promise.all(this.runners.map((r) => r.cycle()));
    return {
      delivered: targets.reduce((n, t) => n + t.delivered, 0),
      failed: targets.reduce((n, t) => n + t.failed, 0),
      deadLettered: targets.reduce((n, t) => n + t.deadLettered, 0),
      outages: targets.filter((t) => t.outage).map((t) => t.target),
      more: targets.some((t) => t.more),
      targets,
    };
  }

  /** Whether stop() was called. */
  get isStopped(): boolean {
    return this.closed;
  }

  /** Pending rows per table name (tables of the same name in several apps are summed; an unopened file counts 0). */
  pendingCount(): Record<string, number> {
    this.open();
    const counts: Record<string, number> = {};
    for (const table of this.tables()) counts[table.name] = (counts[table.name] ?? 0) + table.pendingCount();
    return counts;
  }

  /** What each target has done since the service started, and whether it is down right now. */
  activity(): TargetActivity[] {
    return this.runners.map((r) => ({ target: r.name, ...r.totals, down: r.reachability.down }));
  }

  /** Every target as status and the metrics show it (see TargetView); `health` adds each table's queue health. */
  views(options: { health?: boolean } = {}): TargetView[] {
    return this.runners.map((r) => r.view(options));
  }

  /** Every target's runner (state, tables, fleet view), for status, metrics and health endpoints. */
  targets(): readonly TargetRunner[] {
    return this.runners;
  }

  /**
   * Writes each db_dir's drain state (`.sqloutbox-state.json`: every target's state, holds, fleet
   * view and what it delivered since the previous write) for `status` to read without a network
   * call; `stopped` marks it final.
   */
  persistState(options: { stopped?: boolean } = {}): void {
    const at = this.now();
    const now = new Date(at).toISOString();
    const previous = this.persisted;
    const delivered = new Map(this.runners.map((r) => [r.name, r.totals.delivered]));
    this.persisted = { at, delivered };
    const recent = (name: string) => {
      const before = previous?.delivered.get(name);
      return previous && before !== undefined
        ? { delivered: delivered.get(name)! - before, ms: at - previous.at }
        : null;
    };
    for (const app of this.config.apps) {
      const targets = this.views()
        .filter((v) => v.app === app.name)
        .map((v) => ({ ...v, recent: recent(v.target) }));
      const state: DrainState = {
        version: 1,
        pid: process.pid,
        startedAt: this.startedAt,
        updatedAt: now,
        stoppedAt: options.stopped ? now : null,
        targets,
      };
      const { stateFile } = drainHome(app);
      try {
        writeDrainState(stateFile, state, app.fileMode);
      } catch (error) {
        this.logger.warn(`drain: cannot write the drain state ${stateFile}: ${(error as Error).message}`);
      }
    }
  }

  /** Ends every backoff and timed hold now, on every target (`sqloutbox kick`, SIGUSR2). */
  retryNow(): void {
    for (const runner of this.runners) runner.retryNow();
  }

  /** Pending rows across every served table. */
  totalPending(): number {
    return Object.values(this.pendingCount()).reduce((a, b) => a + b, 0);
  }

  /** Verifies every served file read-only (chain, schema, dead letters) and logs the outcome; SIGUSR1 runs this. */
  integrityScan(): IntegrityReport {
    const report = scanIntegrity(this.tables().map((t) => t.file));
    const level = report.ok ? "info" : "error";
    this.logger[level](
      `drain: integrity scan of ${report.files.length} file(s): ${report.ok ? "clean" : "PROBLEMS FOUND"}`,
    );
    for (const line of report.lines) this.logger[report.ok ? "info" : "warn"](`drain:   ${line}`);
    return report;
  }

  private tables() {
    return this.runners.flatMap((r) => r.tables);
  }

  /** Locks every db_dir (each once) and opens every served table's queue file; idempotent. */
  private open(): void {
    if (this.closed) throw new ServiceStoppedError();
    if (this.opened) return;
    const homes = new Map<string, number>();
    for (const app of this.config.apps) homes.set(drainHome(app).lockFile, app.fileMode);
    try {
      const lock = this.options.lock ?? acquireLock;
      for (const [lockFile, mode] of homes) this.locks.push(lock(lockFile, mode));
      for (const app of this.config.apps) this.openApp(app);
    } catch (error) {
      for (const runner of this.runners.splice(0)) runner.closeTables();
      this.pool.close();
      for (const lock of this.locks.splice(0)) lock.release();
      throw error;
    }
    this.opened = true;
  }

  private openApp(app: AppConfig): void {
    const pollIntervalMs = this.options.pollIntervalMs ?? Math.min(50, Math.max(1, app.flushIntervalMs / 4));
    for (const target of app.targets) {
      const runner = new TargetRunner({
        target,
        app,
        writer: this.writers[target.name]!, // checked in the constructor
        logger: this.logger,
        now: this.now,
        scheduler: this.scheduler,
        ...(this.options.watch === undefined ? {} : { watch: this.options.watch }),
        pollIntervalMs,
        onBatch: this.options.onBatch,
        onLockHold: this.options.onLockHold,
        pool: this.pool,
        care: this.care,
        observer: this.options.observer ?? null,
      });
      this.runners.push(runner);
      runner.openTables();
    }
  }
}
