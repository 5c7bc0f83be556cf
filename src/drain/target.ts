import type { AppConfig, TargetConfig } from "../config/types.ts";
import { describeError } from "../errors.ts";
import { withFields, type Logger } from "../logger.ts";
import type { Scheduler } from "../scheduler.ts";
import { withTimeout } from "../timeout.ts";
import { openDrainQueue } from "../outbox/queue-for-drain.ts";
import { isTenantWriters, type OutboxWriter, type TenantWriters } from "../writers/writer.ts";
import type { Dialect } from "../vocabulary.ts";
import { BoundedWriter } from "./bounded-writer.ts";
import { type AnsweredBatch, Delivery, type BatchEvent, type DeliveryHooks, type TargetCycle } from "./delivery.ts";
import { noSpin } from "./batch-answer.ts";
import { TenantDelivery } from "./tenants/delivery.ts";
import { DescriptorRoom, QUEUE_FILE_DESCRIPTORS } from "./descriptors.ts";
import type { FileCare } from "./file-care.ts";
import { FleetView } from "./fleet-view.ts";
import { TargetLedger } from "./ledger.ts";
import type { DeliveryObserver } from "./observer.ts";
import type { LockHoldEvent, QueuePool } from "./queue-pool.ts";
import { BacklogProgress } from "./backlog.ts";
import { Reachability } from "./reachability.ts";
import { DrainTable } from "./table/table.ts";
import { TargetLoop } from "./target-loop.ts";
import { TargetSetup } from "./target-setup.ts";
import { formatDuration } from "../duration.ts";
import type { FleetRow, TargetView } from "./views.ts";
import type { DirWatch } from "./wake.ts";

/** The dialect a target's statements are written in: the config's, else the writer's, else sqlite. */
export function targetDialect(target: TargetConfig, writer: Pick<OutboxWriter, "dialect">): Dialect {
  return target.dialect ?? writer.dialect ?? "sqlite";
}

/** Everything one target's runner is built from. */
export interface TargetRunnerOptions {
  target: TargetConfig;
  app: AppConfig;
  /** The target's writer; a tenant template's: the writers of its tenants' databases, made on demand. */
  writer: OutboxWriter | TenantWriters;
  logger: Logger;
  now: () => number;
  /** Where every sleep, timer and timeout comes from (see Scheduler). */
  scheduler: Scheduler;
  /** How the files' directories are watched for commits (fs.watch by default). */
  watch?: DirWatch;
  /** How long (ms) after a file changed without a visible commit it is looked at again (see CommitWatcher). */
  pollIntervalMs: number;
  /** Told about every batch the target answered. */
  onBatch?: (event: BatchEvent) => void;
  /** Told how long each of the drain's write transactions on a queue file held its lock. */
  onLockHold?: (event: LockHoldEvent) => void;
  /** The drain's shared connections to db_files (every target serving tables of one file uses one). */
  pool: QueuePool;
  /** Keeps the files' WAL bounded and gives their space back (shared by every target of the drain). */
  care: FileCare;
  /** Told what each batch carried and what became of it (tracing); absent: nobody listens. */
  observer?: DeliveryObserver | null;
}

/**
 * Drives one target, in three parts each with one reason to change: its setup (TargetSetup: the
 * ledger table, the compatibility mode's schema), its batches (Delivery: plan, send, apply the
 * answer) and its background loop (TargetLoop: when to cycle). A cycle settles the tables whose
 * outcome is unknown from the ledger, then delivers one batch. This class is the target's face:
 * what status, metrics and health endpoints read (view, liveness, readiness), and what the service
 * calls. A cycle never throws.
 */
export class TargetRunner {
  readonly name: string;
  readonly tables: DrainTable[];
  /** The tables by queue file (a db_file serves several), in table order: fixed for the runner's life. */
  readonly #tablesByFile: ReadonlyMap<string, readonly DrainTable[]>;
  readonly dialect: Dialect;
  readonly ledger: TargetLedger | null;
  /** Whether the target answers, since when, why, and the backoff. */
  readonly reachability: Reachability;
  /** When the loop last finished a cycle (epoch ms). */
  #lastCycleAt: number | null = null;
  /** What the target says while it drains a backlog (see BacklogProgress). */
  readonly #progress: BacklogProgress;
  private readonly app: AppConfig;
  private readonly logger: Logger;
  private readonly now: () => number;
  private readonly fleetView: FleetView;
  private readonly setup: TargetSetup;
  private readonly delivery: Delivery | TenantDelivery;
  /** A tenant template's delivery (the same as `delivery`), null for one database. */
  #tenants: TenantDelivery | null = null;
  private readonly loop: TargetLoop;
  #running: Promise<TargetCycle> | null = null;
  /** Batches answered since the drain started: every `cleanup_every` of them the tables prune. */
  #batches = 0;
  /** The cycle in flight looks at some tables only (see Agenda). */
  #selective = false;

  constructor(private readonly options: TargetRunnerOptions) {
    const { target, app, writer: given } = options;
    const logger = withFields(options.logger, { app: app.name, target: target.name });
    const { now, scheduler } = options;
    this.name = target.name;
    this.app = app;
    this.logger = logger;
    this.now = now;
    this.dialect = targetDialect(target, given);
    if (!target.dialect && !given.dialect) {
      // The drain must convert for some dialect; say which one it picked rather than guess silently.
      logger.warn(
        `drain: target ${target.name}: the writer has no dialect and none is configured; statements are converted for sqlite (set dialect = "…" in [app.${target.app}.db.${target.db}])`,
        { target: target.name },
      );
    }
    const tenants = isTenantWriters(given) ? given : null;
    const writer =
      tenants === null ? new BoundedWriter(target.name, given as OutboxWriter, app.writeTimeoutMs, scheduler) : null;
    const queue = { maxPending: app.maxPending, durability: app.durability, fileMode: app.fileMode };
    const { pool, onLockHold } = options;
    const holdsOf = (file: string) =>
      onLockHold === undefined ? null : (seconds: number) => onLockHold({ app: app.name, file, seconds });
    const opener =
      app.dbFile === null
        ? (t: DrainTable) => openDrainQueue(t.file, t.name, queue, holdsOf(t.file))
        : (t: DrainTable) => pool.queue(t.file, t.name, { ...queue, onWriteHold: holdsOf(t.file) });
    const observer = options.observer ?? null;
    // A tenant template's tables: each tenant's rows its own lanes; a tenant's schema fault holds that tenant.
    const tenanted = tenants !== null;
    const tenantFault = (tenant: string, message: string) => this.#tenants?.fault(tenant, message);
    this.tables = target.tables.map(
      (config) =>
        new DrainTable(config, {
          app,
          target: target.name,
          logger,
          opener,
          observer,
          now,
          scheduler,
          tenanted,
          tenantFault,
        }),
    );
    if (target.ledger) for (const table of this.tables) table.fencedByLedger();
    this.#tablesByFile = Map.groupBy(this.tables, (t) => t.file);
    this.fleetView = new FleetView(target.name, app.originLabel);
    this.reachability = new Reachability(target.name, app.outageBackoffCapMs, logger, () => scheduler.random());
    this.#progress = new BacklogProgress(target.name, logger);
    // A tenant template keeps a ledger in each tenant's database (see TenantDelivery), none of its own.
    this.ledger =
      target.ledger && writer !== null
        ? new TargetLedger(writer, this.dialect, target.ledgerTable, app.originLabel, app.autoSchema, logger)
        : null;
    if (!target.ledger && tenants === null) {
      logger.warn(
        `drain: target ${target.name} has ledger = false: delivery is at least once, and a writer without transactions may apply part of a transaction before a statement fails (docs/delivery.md#without-a-ledger)`,
        { target: target.name },
      );
    }
    const { name, dialect, ledger, tables, reachability, fleetView } = this;
    this.loop = new TargetLoop({
      name,
      app,
      tables,
      reachability,
      logger,
      now,
      scheduler,
      tablesByFile: this.#tablesByFile,
      pollIntervalMs: options.pollIntervalMs,
      cycle: (only) => this.cycle(only),
      // The fleet view is read by a cycle that reaches the ledger: not while the target is down or not set up.
      fleetDueAt: () => (ledger && this.setup.done && !reachability.down ? fleetView.dueAt : null),
      ...(options.watch === undefined ? {} : { watch: options.watch }),
    });
    this.setup = new TargetSetup({
      name,
      app,
      dialect,
      writer,
      ledger,
      tables,
      reachability,
      logger,
      now,
      scheduler,
      openTables: () => this.openTables(),
      stopping: () => this.loop.stopping,
    });
    const loop = this.loop;
    const hooks: DeliveryHooks = {
      changed: (changed) => loop.changed(changed),
      quiet: (until) => loop.quiet(until),
      ledgerMissing: () => this.setup.undo(),
      lateAnswered: () => loop.wakeForAll(),
      answered: (batch) => this.#answered(batch),
    };
    const common = { name, target, app, dialect, tables, reachability, logger, now, scheduler, observer, hooks };
    if (tenants !== null) this.delivery = this.#tenants = new TenantDelivery({ ...common, writers: tenants });
    else this.delivery = new Delivery({ ...common, writer: writer!, ledger });
  }

  /**
   * What follows an answered batch beyond its tables: our own ledger rows that moved show in the
   * fleet view at once, the metrics and the debug log hear of it, and every `cleanup_every` batches
   * the tables prune their logs in the background.
   */
  #answered(batch: AnsweredBatch): void {
    const { app, now, logger } = this;
    for (const { table, fenced, delivered } of batch.slices)
      if (fenced && delivered > 0) this.fleetView.noteThrough(table, now());
    const { rows, moved, durationMs } = batch;
    this.options.onBatch?.({ app: app.name, target: this.name, rows, durationMs });
    logger.debug(`drain: batch to ${this.name}: ${rows} rows, ${moved} settled in ${formatDuration(durationMs)}`, {
      app: app.name,
      target: this.name,
      rows,
      duration_ms: Math.round(durationMs),
    });
    this.#batches += 1;
    if (this.#batches % app.cleanupEvery === 0) for (const table of this.tables) void table.prune();
  }

  /** Every origin's delivery of the served tables, as last read (see FleetView). */
  get fleet(): FleetRow[] {
    return this.fleetView.rows;
  }

  /** When a batch was last answered (epoch ms). */
  get lastSuccessAt(): number | null {
    return this.delivery.lastSuccessAt;
  }

  /** When the loop last ran at all (epoch ms): the liveness signal. */
  get lastBeatAt(): number | null {
    return this.loop.lastBeatAt;
  }

  /** Whether setup is done. */
  get prepared(): boolean {
    return this.setup.done;
  }

  /** Why setup (the ledger table) is not done, while it is not. */
  get setupProblem(): string | null {
    return this.setup.problem;
  }

  /** Rows delivered, failed and dead-lettered since the service started: the sum of its tables' counts. */
  get totals(): { delivered: number; failed: number; deadLettered: number } {
    const totals = { delivered: 0, failed: 0, deadLettered: 0 };
    for (const { counts } of this.tables) {
      totals.delivered += counts.delivered;
      totals.failed += counts.failed;
      totals.deadLettered += counts.deadLettered;
    }
    return totals;
  }

  /**
   * Opens every table's queue file; a file that cannot be opened holds only its table. So does a
   * file that would take the last descriptors of the process (see DescriptorRoom): the targets'
   * connections and the state file need some, or no table at all would be delivered.
   */
  openTables(): void {
    const now = this.now();
    let room: DescriptorRoom | null | undefined;
    const files = this.#tablesByFile.size;
    for (const table of this.tables) {
      if (!table.wantsOpening(now)) continue;
      // A db_file's tables share one connection (QueuePool): only its first opening takes descriptors.
      const shared = this.app.dbFile !== null && this.options.pool.isOpen(table.file);
      room ??= shared ? undefined : DescriptorRoom.read(); // once per round, and only when a file is to be opened
      const refused = shared ? null : (room?.take(QUEUE_FILE_DESCRIPTORS, files) ?? null);
      if (refused) table.hold({ reason: "file", error: refused }, now);
      else table.open(now);
    }
  }

  /** Rows pending in every table of the target. */
  #pending(): number {
    let pending = 0;
    for (const table of this.tables) pending += table.pendingCount();
    return pending;
  }

  /** Closes every table's queue file. */
  closeTables(): void {
    for (const table of this.tables) table.close();
  }

  /**
   * Runs one cycle over every table, or over `only` (the loop's, see Agenda); concurrent callers
   * share the cycle already in flight — but one that asks for every table waits out a cycle over
   * some, then runs its own.
   */
  cycle(only: ReadonlySet<DrainTable> | null = null): Promise<TargetCycle> {
    if (this.#running && this.#selective && only === null) return this.#running.then(() => this.cycle());
    this.#selective = this.#running ? this.#selective : only !== null;
    this.#running ??= this.runCycle(only)
      .then(async (out) => {
        // Rows a target applied are confirmed while the next batch is in flight; a cycle after
        // which no batch follows at once (nothing more ready, an outage, outside the loop) confirms
        // them now, so the pending count never holds rows the remote already has.
        if (!(out.more && this.delivery.pipelining)) await this.delivery.confirmApplied();
        this.#lastCycleAt = this.now();
        this.loop.beat(this.#lastCycleAt);
        if (!this.loop.stopping) this.#progress.cycled(this.#lastCycleAt, this.totals.delivered, () => this.#pending());
        return out;
      })
      .finally(() => {
        this.#running = null;
      });
    return this.#running;
  }

  /**
   * This target as status, metrics and health endpoints show it; with `health`, each table's queue health too
   * (see TableView).
   */
  view(options: { health?: boolean } = {}): TargetView {
    const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
    return {
      target: this.name,
      app: this.app.name,
      state: this.reachability.state,
      failures: this.reachability.failures,
      downSince: iso(this.reachability.downSince),
      lastError: this.reachability.lastError,
      lastSuccessAt: iso(this.lastSuccessAt),
      batchesInFlight: this.delivery.inFlight,
      lastRoundTripMs:
        this.delivery.lastRoundTripMs === null ? null : Math.round(this.delivery.lastRoundTripMs * 10) / 10,
      lastCycleAt: iso(this.#lastCycleAt),
      lastBeatAt: iso(this.lastBeatAt),
      setupProblem: this.setupProblem,
      ledger: this.ledger !== null,
      totals: this.totals,
      tables: this.tables.map((t) => t.view(options)),
      fleet: this.fleet,
      fleetReadAt: this.fleetView.readAt ? iso(this.fleetView.readAt) : null,
      files: this.options.care.conditions().filter((c) => this.#tablesByFile.has(c.file)),
      ...(this.#tenants !== null && { tenants: this.#tenants.view() }),
    };
  }

  /**
   * Whether the loop is alive: it ran (a cycle, or a poll while idle or backing off) within twice
   * write_timeout plus flush_interval plus 10 s of its last run or of its start — a batch blocked on
   * a dead remote is not a hung loop. Before the loop starts the target is starting, which is alive:
   * a liveness probe must not kill a slow start (startup is bounded by write_timeout).
   */
  liveness(now = this.now()): { ok: boolean; why?: string } {
    const boundMs = 2 * this.app.writeTimeoutMs + this.app.flushIntervalMs + 10_000;
    if (this.lastBeatAt === null) return { ok: true, why: "starting" };
    const ageMs = now - this.lastBeatAt;
    return ageMs <= boundMs
      ? { ok: true }
      : {
          ok: false,
          why: `the loop last ran ${formatDuration(ageMs)} ago (bound ${formatDuration(boundMs)})`,
        };
  }

  /** Whether the target can take batches: reachable and set up (its ledger table present). */
  readiness(): { ok: boolean; why?: string } {
    const { state, lastError } = this.reachability;
    if (state === "outage") return { ok: false, why: `down: ${lastError ?? "unreachable"}` };
    if (state === "misconfigured") return { ok: false, why: `misconfigured: ${lastError ?? ""}` };
    if (this.setupProblem) return { ok: false, why: `not set up: ${this.setupProblem}` };
    if (!this.prepared) return { ok: false, why: "starting" };
    return { ok: true };
  }

  /** Ends every backoff and timed hold now (`sqloutbox kick`): the operator fixed the cause. */
  retryNow(): void {
    const now = this.now();
    this.reachability.retryNow();
    this.setup.retryNow();
    this.#tenants?.retryNow();
    for (const table of this.tables) table.retryNow(now);
    this.loop.retryNow();
  }

  /** Runs setup once; true when done (see TargetSetup). */
  prepare(): Promise<boolean> {
    return this.setup.run();
  }

  /** Startup bounded by `write_timeout`, for `start()`: a remote that hangs must not hang the service. */
  startupBounded(): Promise<void> {
    return this.setup.bounded();
  }

  /** Starts the background loop (idempotent). */
  startLoop(): void {
    this.delivery.pipeline(true);
    this.loop.start();
  }

  /** Stops scheduling; resolves when the in-flight cycle (if any) has settled and what was applied is confirmed. */
  async stopLoop(): Promise<void> {
    await this.loop.stop();
    await this.#running; // a runOnce() cycle in flight settles too
    this.delivery.pipeline(false);
    await Promise.all(this.tables.map((t) => t.pruning));
    await this.delivery.confirmApplied();
  }

  /**
   * Closes the writer (a tenant template: every tenant's open), bounded: a writer that cannot close (a dead
   * server) must not hold the shutdown hostage.
   */
  async closeWriter(): Promise<void> {
    const { writer } = this.options;
    try {
      const closing = isTenantWriters(writer) ? this.#tenants!.close() : writer.close?.();
      await withTimeout(Promise.resolve(closing), 2000, () => undefined, this.options.scheduler);
    } catch (error) {
      this.logger.warn(`drain: closing the writer of ${this.name} failed: ${describeError(error).message}`, {
        target: this.name,
      });
    }
  }

  private async runCycle(only: ReadonlySet<DrainTable> | null): Promise<TargetCycle> {
    const out: TargetCycle = {
      target: this.name,
      delivered: 0,
      failed: 0,
      deadLettered: 0,
      outage: false,
      more: false,
      wakeAt: null,
    };
    try {
      const { reachability } = this;
      if (this.now() < reachability.backoffUntil) return { ...out, outage: true, wakeAt: reachability.backoffUntil };
      if (!this.setup.done && !(await this.setup.run())) {
        return {
          ...out,
          outage: reachability.down,
          wakeAt: reachability.down ? reachability.backoffUntil : this.setup.retryAt,
        };
      }
      const now = this.now();
      this.openTables();
      // A table settled from the ledger now may have rows to send without any new commit: look at every table.
      if (only !== null && this.ledger && this.tables.some((t) => t.unsettled)) only = null;
      try {
        out.delivered += await this.settleAndLook(now);
        await this.setup.injected(now);
      } catch (error) {
        this.reachability.outage(error, "reading the delivery ledger", this.now());
        return { ...out, outage: true, wakeAt: this.reachability.backoffUntil };
      }
      const cycle = noSpin(await this.delivery.deliver(now, out, only));
      const lookAgainAt = this.tendFiles(cycle);
      if (lookAgainAt !== null) cycle.wakeAt = Math.min(cycle.wakeAt ?? lookAgainAt, lookAgainAt);
      return cycle;
    } catch (error) {
      this.logger.error(`drain: cycle of target ${this.name} failed: ${describeError(error).message}`, {
        target: this.name,
      });
      return { ...out, wakeAt: this.now() + 1000 };
    }
  }

  /**
   * Settles the tables whose outcome is unknown and refreshes the fleet view when due, in one round trip when
   * both are. An outage throws.
   */
  private async settleAndLook(now: number): Promise<number> {
    if (!this.ledger) return 0;
    const unsettled = this.tables.filter((t) => t.unsettled && !t.held(now));
    if (unsettled.length === 0) {
      await this.fleetView.refresh(this.ledger, this.tables, now);
      return 0;
    }
    const fleet = this.fleetView.readAlong(this.ledger, this.tables, now);
    const { confirmed, along } = await this.ledger.settle(unsettled, now, fleet ? [fleet.read] : []);
    if (fleet) fleet.take(along[0]!);
    return confirmed;
  }

  /**
   * Looks after the files of the open tables (see FileCare): one that has nothing pending here is
   * idle. Returns the earliest time one of them wants looking at again, or null.
   */
  private tendFiles(cycle: TargetCycle): number | null {
    const now = this.now();
    let againAt: number | null = null;
    for (const served of this.#tablesByFile.values()) {
      const tables = served.filter((t) => t.isOpen);
      if (tables.length === 0) continue;
      const idle = () => !cycle.more && tables.every((t) => t.pendingCount() === 0);
      const at = this.options.care.tend(tables[0]!.openFile()!, now, idle);
      if (at !== null) againAt = Math.min(againAt ?? at, at);
    }
    return againAt;
  }
}
