import type { AppConfig, TargetConfig } from "../config/types.ts";
import { describeError } from "../errors.ts";
import { withFields, type Logger } from "../logger.ts";
import { withTimeout } from "../timeout.ts";
import { Outbox, queueDbOf, type OutboxRow } from "../outbox/outbox.ts";
import { decodeArgs } from "../outbox/payload.ts";
import type { OutboxWriter, Statement, WriteResult } from "../writers/writer.ts";
import type { Dialect } from "../vocabulary.ts";
import { BoundedWriter, resultShapeProblem } from "./bounded-writer.ts";
import { prepareInjected } from "./compat.ts";
import { DescriptorRoom, QUEUE_FILE_DESCRIPTORS } from "./descriptors.ts";
import { FleetView } from "./fleet-view.ts";
import { TargetLedger } from "./ledger.ts";
import { Reachability } from "./reachability.ts";
import { RewriteCache } from "./rewrite-cache.ts";
import { doublingMs } from "./schedule.ts";
import type { FileCare } from "./file-care.ts";
import { linkDrafts } from "./linked-groups.ts";
import type { DeliveryObserver, ObservedBatch } from "./observer.ts";
import type { QueuePool } from "./queue-pool.ts";
import { DrainTable, minWake, trimDraft, type SliceDraft, type TableSlice } from "./table.ts";
import type { LedgerRow, TargetView } from "./views.ts";
import { Agenda, CommitWatcher, Waker } from "./wake.ts";
import { TraceComments } from "./trace-comments.ts";

/** What one cycle of one target did. */
export interface TargetCycle {
  target: string;
  delivered: number;
  failed: number;
  deadLettered: number;
  /** The target was down this cycle (or is still backing off from an outage). */
  outage: boolean;
  /** More rows are ready right now. */
  more: boolean;
  /** When something becomes ready next (epoch ms), if known. */
  wakeAt: number | null;
}

/** The dialect a target's statements are written in: the config's, else the writer's, else sqlite. */
export function targetDialect(target: TargetConfig, writer: OutboxWriter): Dialect {
  return target.dialect ?? writer.dialect ?? "sqlite";
}

/** A batch whose rows carry more than this (characters) is followed by a garbage collection. */
const LARGE_BATCH_BYTES = 4 * 1024 * 1024;
/**
 * While the files are watched: every file's data_version is read at least this often (or every
 * flush_interval, if longer), so a commit the watcher did not report waits no longer than this...
 */
const SWEEP_MS = 1_000;
/** ...and every table is looked at this often, for what changes without a commit. */
const FULL_CYCLE_MS = 60_000;
/** A target whose ledger cannot be set up tries again after this long, doubling to the cap. */
const SETUP_RETRY_FIRST_MS = 2_000;
const SETUP_RETRY_CAP_MS = 60_000;

/** One answered batch, for metrics: how many rows it carried and how long the target took. */
export interface BatchEvent {
  app: string;
  target: string;
  rows: number;
  durationMs: number;
}

/** Everything one target's runner is built from. */
export interface TargetRunnerOptions {
  target: TargetConfig;
  app: AppConfig;
  writer: OutboxWriter;
  logger: Logger;
  now: () => number;
  /** How long (ms) after a file changed without a visible commit it is looked at again (see CommitWatcher). */
  pollIntervalMs: number;
  /** Told about every batch the target answered. */
  onBatch?: (event: BatchEvent) => void;
  /** The drain's shared connections to db_files (every target serving tables of one file uses one). */
  pool: QueuePool;
  /** Keeps the files' WAL bounded and gives their space back (shared by every target of the drain). */
  care: FileCare;
  /** Told what each batch carried and what became of it (tracing); absent: nobody listens. */
  observer?: DeliveryObserver | null;
}

/** A batch as sent: its slices, the statements in the order sent, and where each slice's statements went. */
interface SentBatch {
  slices: TableSlice[];
  stmts: Statement[];
  /** Per slice, the index in `stmts` of each of its statements (its fence first), in the slice's order. */
  positions: Map<TableSlice, number[]>;
  /** The slices each unit of linked tables (a transaction across them) holds, when more than one. */
  units: TableSlice[][];
}

/**
 * "Cycle again at once" only after progress: a writer that keeps answering `skipped` for a head
 * (or any other no-op outcome) must not turn the loop into a hot spin against the remote.
 */
function noSpin(out: TargetCycle): TargetCycle {
  if (out.more && out.delivered + out.failed + out.deadLettered === 0) out.more = false;
  return out;
}

/**
 * Drives one target: setup (the ledger table, the compatibility mode's schema), then cycles of
 * settle (tables whose last outcome is unknown are settled from the ledger) → plan (every ready
 * table's slice, each opened by its fence) → one `writeBatch` → apply the answer per table. Between
 * cycles it sleeps until the next deadline (flush_interval, a table's max wait, a head's backoff,
 * the target's outage backoff) but wakes as soon as a producer commits to one of its files. A
 * cycle never throws.
 */
export class TargetRunner {
  readonly name: string;
  readonly tables: DrainTable[];
  readonly dialect: Dialect;
  readonly ledger: TargetLedger | null;
  /** Whether the target answers, since when, why, and the backoff. */
  readonly reachability: Reachability;
  /** When a batch was last answered (epoch ms). */
  lastSuccessAt: number | null = null;
  /** When the loop last finished a cycle (epoch ms). */
  lastCycleAt: number | null = null;
  /** When the loop last ran at all — a cycle, or a poll while idle or backing off (epoch ms): the liveness signal. */
  lastBeatAt: number | null = null;
  /** Why setup (the ledger table) is not done, while it is not. */
  setupProblem: string | null = null;
  prepared = false;
  private readonly app: AppConfig;
  private readonly logger: Logger;
  private readonly now: () => number;
  private readonly writer: BoundedWriter;
  private readonly rewrites: RewriteCache;
  private setupRetryAt = 0;
  private setupFailures = 0;
  /** After a batch that changed nothing, commits do not wake the loop before this (epoch ms). */
  private quietUntil = 0;
  private batches = 0;
  private running: Promise<TargetCycle> | null = null;
  private preparing: Promise<boolean> | null = null;
  private stopping = false;
  /** The background loop runs: a batch's local confirmation may wait for the next batch to be in flight. */
  private pipelining = false;
  private loopDone: Promise<void> | null = null;
  private readonly waker = new Waker();
  private watcher: CommitWatcher | null = null;
  /** Which tables the loop's next cycle looks at, while the files are watched. */
  private readonly agenda: Agenda<DrainTable>;
  /** The cycle in flight looks at some tables only (see Agenda). */
  private selective = false;
  private readonly fleetView: FleetView;
  private readonly observer: DeliveryObserver | null;
  /** Sqlcommenter comments on the statements sent (trace_comments), or null when off. */
  private readonly comments: TraceComments | null;

  constructor(private readonly options: TargetRunnerOptions) {
    const { target, app, writer } = options;
    const logger = withFields(options.logger, { app: app.name, target: target.name });
    this.name = target.name;
    this.app = app;
    this.logger = logger;
    this.now = options.now;
    this.agenda = new Agenda(Math.max(app.flushIntervalMs, FULL_CYCLE_MS));
    this.dialect = targetDialect(target, writer);
    if (!target.dialect && !writer.dialect) {
      // The drain must convert for some dialect; say which one it picked rather than guess silently.
      logger.warn(`drain: target ${target.name}: the writer has no dialect and none is configured; statements are converted for sqlite (set dialect = "…" in [app.${target.app}.db.${target.db}])`, { target: target.name });
    }
    this.writer = new BoundedWriter(target.name, writer, app.writeTimeoutMs);
    this.rewrites = new RewriteCache(this.dialect, target.compat);
    this.comments = target.traceComments ? new TraceComments(this.dialect) : null;
    const queue = { maxPending: app.maxPending, durability: app.durability, fileMode: app.fileMode };
    const { pool } = options;
    const opener = app.dbFile === null ? (t: DrainTable) => new Outbox(t.file, t.name, queue) : (t: DrainTable) => pool.outbox(t.file, t.name, queue);
    this.observer = options.observer ?? null;
    this.tables = target.tables.map((config) => new DrainTable(config, app, target.name, logger, opener, this.observer));
    if (target.ledger) for (const table of this.tables) table.fencedByLedger();
    this.fleetView = new FleetView(target.name, app.originLabel);
    this.reachability = new Reachability(target.name, app.outageBackoffCapMs, logger);
    this.ledger = target.ledger ? new TargetLedger(this.writer, this.dialect, target.ledgerTable, app.originLabel, app.autoSchema, logger) : null;
    if (!target.ledger) {
      logger.warn(
        `drain: target ${target.name} has ledger = false: delivery is at least once, and a transaction's statements are sent together in one batch but not atomically — a writer without transactions may apply part of one before a statement fails; that part stays applied and the rest is retried from the failed statement`,
        { target: target.name },
      );
    }
  }

  /** Every origin's ledger row for the served tables, as last read (see FleetView). */
  get fleet(): LedgerRow[] {
    return this.fleetView.rows;
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
    const files = new Set(this.tables.map((t) => t.file)).size;
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
    if (this.running && this.selective && only === null) return this.running.then(() => this.cycle());
    this.selective = this.running ? this.selective : only !== null;
    this.running ??= this.runCycle(only)
      .then((out) => {
        // Rows a target applied are confirmed while the next batch is in flight; a cycle after
        // which no batch follows at once (nothing more ready, an outage, outside the loop) confirms
        // them now, so the pending count never holds rows the remote already has.
        if (!(out.more && this.pipelining)) this.confirmApplied();
        this.lastCycleAt = Date.now();
        this.lastBeatAt = this.lastCycleAt;
        return out;
      })
      .finally(() => {
        this.running = null;
      });
    return this.running;
  }

  /** This target as status, metrics and health endpoints show it. */
  view(): TargetView {
    const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
    return {
      target: this.name,
      app: this.app.name,
      state: this.reachability.state,
      failures: this.reachability.failures,
      downSince: iso(this.reachability.downSince),
      lastError: this.reachability.lastError,
      lastSuccessAt: iso(this.lastSuccessAt),
      lastCycleAt: iso(this.lastCycleAt),
      lastBeatAt: iso(this.lastBeatAt),
      setupProblem: this.setupProblem,
      ledger: this.ledger !== null,
      totals: this.totals,
      tables: this.tables.map((t) => t.view()),
      fleet: this.fleet,
      fleetReadAt: this.fleetView.readAt ? iso(this.fleetView.readAt) : null,
      files: this.options.care.conditions().filter((c) => this.tables.some((t) => t.file === c.file)),
    };
  }

  /**
   * Whether the loop is alive: it ran (a cycle, or a poll while idle or backing off) within twice
   * write_timeout plus flush_interval plus 10 s of its last run or of its start — a batch blocked on
   * a dead remote is not a hung loop. Before the loop starts the target is starting, which is alive:
   * a liveness probe must not kill a slow start (startup is bounded by write_timeout).
   */
  liveness(now = Date.now()): { ok: boolean; why?: string } {
    const boundMs = 2 * this.app.writeTimeoutMs + this.app.flushIntervalMs + 10_000;
    if (this.lastBeatAt === null) return { ok: true, why: "starting" };
    const ageMs = now - this.lastBeatAt;
    return ageMs <= boundMs ? { ok: true } : { ok: false, why: `the loop last ran ${Math.round(ageMs / 1000)} s ago (bound ${Math.round(boundMs / 1000)} s)` };
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

  /** The app this target belongs to (its db_dir and tuning). */
  get appConfig(): AppConfig {
    return this.app;
  }

  /** Ends every backoff and timed hold now (`sqloutbox kick`): the operator fixed the cause. */
  retryNow(): void {
    const now = this.now();
    this.agenda.all();
    this.reachability.retryNow();
    this.quietUntil = 0;
    this.setupRetryAt = 0;
    for (const table of this.tables) table.retryNow(now);
    this.waker.wake();
  }

  /**
   * Runs setup once; true when done. Delivery waits for it: the ledger must exist before a fence
   * can run, and compatibility-mode seeding must precede the first delivery.
   */
  prepare(): Promise<boolean> {
    if (this.prepared) return Promise.resolve(true);
    this.preparing ??= this.runSetup()
      .catch((error) => {
        if (!this.stopping) this.reachability.outage(error, "startup (ledger / auto_schema)", this.now()); // a stop during startup closed the writer
        return false;
      })
      .finally(() => {
        this.preparing = null;
      });
    return this.preparing;
  }

  private async runSetup(): Promise<boolean> {
    const now = this.now();
    if (now < this.setupRetryAt) return false;
    this.openTables();
    if (this.ledger) {
      const problem = await this.ledger.setup();
      this.reachability.recovered();
      if (problem) {
        this.setupFailures += 1;
        this.setupRetryAt = now + doublingMs(this.setupFailures, SETUP_RETRY_FIRST_MS, SETUP_RETRY_CAP_MS);
        if (this.setupProblem !== problem) this.logger.error(`drain: target ${this.name} is held (remote schema): ${problem}`, { target: this.name, error_class: "remote schema" });
        this.setupProblem = problem;
        for (const table of this.tables) table.hold({ reason: "remote schema", message: problem }, now);
        return false;
      }
      if (this.setupProblem) for (const table of this.tables) table.release("remote schema");
      this.setupProblem = null;
      this.setupFailures = 0;
    }
    // Compatibility-mode seeding before start() returns, so a producer's next seq is above the remote's.
    await prepareInjected(this.writer, this.dialect, this.tables, this.app.autoSchema, this.logger, now);
    this.reachability.recovered();
    this.prepared = true;
    return true;
  }

  /** Startup bounded by `write_timeout`, for `start()`: a remote that hangs must not hang the service. */
  async startupBounded(): Promise<void> {
    await withTimeout(this.prepare(), this.app.writeTimeoutMs, () => false);
  }

  /** Starts the background loop (idempotent). */
  startLoop(): void {
    if (this.loopDone) return;
    this.stopping = false;
    this.lastBeatAt ??= Date.now(); // from here on, a loop that never runs is a hung loop
    this.pipelining = true;
    this.watch();
    this.loopDone = this.supervise();
  }

  /** Stops scheduling; resolves when the in-flight cycle (if any) has settled. */
  async stopLoop(): Promise<void> {
    this.stopping = true;
    this.waker.wake();
    await this.loopDone;
    await this.running; // a runOnce() cycle in flight settles too
    this.loopDone = null;
    this.pipelining = false;
    await Promise.all(this.tables.map((t) => t.pruning));
    this.confirmApplied();
    this.watcher?.close();
    this.watcher = null;
  }

  /** Closes the writer, bounded: a writer that cannot close (a dead server) must not hold the shutdown hostage. */
  async closeWriter(): Promise<void> {
    try {
      await withTimeout(Promise.resolve(this.options.writer.close?.()), 2000, () => undefined);
    } catch (error) {
      this.logger.warn(`drain: closing the writer of ${this.name} failed: ${describeError(error).message}`, { target: this.name });
    }
  }

  /**
   * Watches every table's file for commits, opened or not (a table whose file opens later is
   * covered already). A commit wakes the loop for the tables of that file, unless the target is
   * backing off or quiet (see quietUntil): those wait for the next cycle, whatever wakes it.
   */
  private watch(): void {
    this.watcher?.close();
    this.watcher = null;
    const byFile = new Map<string, DrainTable[]>();
    for (const table of this.tables) byFile.set(table.file, [...(byFile.get(table.file) ?? []), table]);
    const unwatch = (error: unknown) => {
      // Without the watcher the loop scans every table every flush_interval: it costs CPU per table, it misses nothing.
      this.logger.warn(`drain: cannot watch the files of target ${this.name} for commits, scanning every flush_interval instead: ${describeError(error).message}`, { target: this.name });
      this.watcher?.close();
      this.watcher = null;
      this.agenda.all();
      this.waker.wake();
    };
    try {
      this.watcher = new CommitWatcher([...byFile.keys()], {
        onCommit: (file) => {
          this.agenda.changed(byFile.get(file) ?? []);
          if (Date.now() >= this.gate()) this.waker.wake();
        },
        onCheckDue: () => this.waker.wake(), // the idle loop plans its sleep again
        onError: unwatch,
        // The drain's own connection to the file (any of its tables' in a shared file): no connection of the watcher's own.
        counters: (file) => byFile.get(file)?.find((t) => t.outbox !== null)?.outbox!.commitCounters() ?? null,
      }, { recheckMs: this.options.pollIntervalMs, sweepMs: Math.max(this.app.flushIntervalMs, SWEEP_MS) });
    } catch (error) {
      unwatch(error);
    }
  }

  /** Commits do not wake the loop before this (epoch ms): the target's backoff, or a quiet spell. */
  private gate(): number {
    return Math.max(this.reachability.backoffUntil, this.quietUntil);
  }

  private async supervise(): Promise<void> {
    while (!this.stopping) {
      try {
        await this.loop();
      } catch (error) {
        // loop() guards every step; reaching here is a bug. Say so loudly and keep draining.
        this.logger.error(`drain: the loop of target ${this.name} crashed and is restarted: ${describeError(error).message}`, { target: this.name });
        await this.waker.sleep(1000);
      }
    }
  }

  private async loop(): Promise<void> {
    while (!this.stopping) {
      // Watched, a cycle looks at the tables whose file changed or whose time came; else at all.
      const outcome = await this.cycle(this.watcher ? this.agenda.take(Date.now()) : null);
      if (this.stopping) return;
      // The agenda keeps real time; a table's wakeAt is the drain's clock (tests may shift it).
      this.agenda.after(outcome.wakeAt === null ? null : Date.now() + (outcome.wakeAt - this.now()), outcome.more);
      if (outcome.more) {
        this.watcher?.pause(); // the next cycles look at every table anyway
        await new Promise((resolve) => setImmediate(resolve)); // let producers and other targets in
        continue;
      }
      this.watcher?.resume();
      // Watched, the loop also wakes for the fleet view's next read (a cycle reads it), not only for its tables.
      const fleetAt = this.ledger ? Date.now() + (this.fleetView.dueAt - this.now()) : Number.POSITIVE_INFINITY;
      const until = this.watcher ? Math.min(this.agenda.nextAt(), fleetAt) : Math.min(Date.now() + this.app.flushIntervalMs, outcome.wakeAt ?? Number.POSITIVE_INFINITY);
      await this.idle(until);
    }
  }

  /** Sleeps until `until` (epoch ms) or, while the files are watched, a commit to one of them. */
  private async idle(until: number): Promise<void> {
    while (!this.stopping) {
      const now = Date.now();
      const watcher = this.watcher;
      watcher?.check(now);
      if (watcher && this.agenda.pending && now >= this.gate()) return;
      if (now >= until) return;
      let wakeAt = until;
      if (watcher) {
        wakeAt = Math.min(wakeAt, watcher.checkAt);
        // A commit seen during a backoff or a quiet spell waits for the gate, not for the next deadline.
        if (this.agenda.pending) wakeAt = Math.min(wakeAt, this.gate());
      }
      await this.waker.sleep(wakeAt - now);
      this.lastBeatAt = Date.now();
    }
  }

  private async runCycle(only: ReadonlySet<DrainTable> | null): Promise<TargetCycle> {
    const out: TargetCycle = { target: this.name, delivered: 0, failed: 0, deadLettered: 0, outage: false, more: false, wakeAt: null };
    try {
      const { reachability } = this;
      if (this.now() < reachability.backoffUntil) return { ...out, outage: true, wakeAt: reachability.backoffUntil };
      if (!this.prepared && !(await this.prepare())) {
        return { ...out, outage: reachability.down, wakeAt: reachability.down ? reachability.backoffUntil : this.setupRetryAt };
      }
      const now = this.now();
      this.openTables();
      // A table settled from the ledger now may have rows to send without any new commit: look at every table.
      if (only !== null && this.ledger && this.tables.some((t) => t.unsettled)) only = null;
      try {
        out.delivered += await this.settleAndLook(now);
        await prepareInjected(this.writer, this.dialect, this.tables, this.app.autoSchema, this.logger, now);
      } catch (error) {
        this.reachability.outage(error, "reading the delivery ledger", this.now());
        return { ...out, outage: true, wakeAt: this.reachability.backoffUntil };
      }
      const cycle = noSpin(await this.deliver(now, out, only));
      this.tendFiles(cycle);
      return cycle;
    } catch (error) {
      this.logger.error(`drain: cycle of target ${this.name} failed: ${describeError(error).message}`, { target: this.name });
      return { ...out, wakeAt: this.now() + 1000 };
    }
  }

  /** Settles the tables whose outcome is unknown and refreshes the fleet view when due. An outage throws. */
  private async settleAndLook(now: number): Promise<number> {
    if (!this.ledger) return 0;
    const unsettled = this.tables.filter((t) => t.unsettled && !t.held(now));
    const confirmed = unsettled.length > 0 ? await this.ledger.settle(unsettled, now) : 0;
    await this.fleetView.refresh(this.ledger, this.tables, now);
    return confirmed;
  }

  /** Plans one batch over every ready table (of `only`, when given), sends it, and applies the answer. */
  private async deliver(now: number, out: TargetCycle, only: ReadonlySet<DrainTable> | null): Promise<TargetCycle> {
    const batch = this.planBatch(now, out, only);
    if (batch === null) return out;
    const { slices, stmts } = batch;
    let results: WriteResult[];
    const observed = this.observer === null ? null : this.observed(batch);
    const started = performance.now();
    try {
      const call = this.writer.send(stmts, (abandoned) => this.awaitLateAnswer(batch, abandoned));
      call.catch(() => {}); // awaited below, after the local work that overlaps it
      await this.whileInFlight(slices);
      results = await call;
    } catch (error) {
      for (const slice of slices) {
        slice.table.refundOutage(slice);
        if (slice.fenced) slice.table.unsettle(); // it may have committed: the ledger will say
      }
      this.reachability.outage(error, `a batch of ${stmts.length} statements`, this.now());
      if (observed !== null) {
        const { message, errorClass } = describeError(error);
        this.observer!.batchLost(observed, { message, errorClass }, this.now());
      }
      return { ...out, outage: true, more: false, wakeAt: this.reachability.backoffUntil };
    }
    this.reachability.recovered();
    this.lastSuccessAt = this.now();
    // What an answer did (a cut, a hold, a charge, a confirmation) shows at the table's next plan: the next cycle looks at these.
    this.agenda.changed(slices.map((sl) => sl.table));
    let moved = 0;
    const applied: number[] = [];
    for (const slice of slices) {
      const answer = slice.table.applyAnswer(slice, answersOf(batch, slice, results), this.now());
      applied.push(answer.delivered);
      if (slice.fenced && answer.delivered > 0) this.fleetView.noteThrough(slice.table, this.now());
      out.delivered += answer.delivered;
      out.failed += answer.failed;
      out.deadLettered += answer.deadLettered;
      out.more ||= answer.more;
      moved += answer.delivered + answer.failed + answer.deadLettered;
      if (answer.ledgerMissing) this.prepared = false;
      this.forgetReadAhead(answer.touched);
    }
    this.checkUnits(batch, results);
    if (observed !== null) this.observer!.batchAnswered(observed, applied, this.now());
    const durationMs = performance.now() - started;
    const rows = slices.reduce((n, sl) => n + sl.rows.length, 0);
    this.options.onBatch?.({ app: this.app.name, target: this.name, rows, durationMs });
    this.logger.debug(`drain: batch to ${this.name}: ${rows} rows, ${moved} settled in ${Math.round(durationMs)} ms`, {
      app: this.app.name, target: this.name, rows, duration_ms: Math.round(durationMs),
    });
    if (moved === 0) {
      // The remote answered but nothing moved (every head "skipped"): our own bookkeeping
      // commits would wake the watcher at once, so wait a full flush_interval instead.
      this.quietUntil = this.now() + this.app.flushIntervalMs;
    }
    this.batches += 1;
    if (this.batches % this.app.cleanupEvery === 0) for (const table of this.tables) void table.prune(); // in the background
    // Large rows: give their strings back now, so the next batch does not stack on this one's
    // garbage and the drain's memory stays bounded by batch_max_bytes, not by the backlog.
    if (slices.reduce((n, sl) => n + sl.bytes, 0) > LARGE_BATCH_BYTES) Bun.gc(false);
    return out;
  }

  /** The batch as an observer sees it (told just before it is sent). */
  private observed(batch: SentBatch): ObservedBatch {
    const { target } = this.options;
    let bytes = 0;
    let attempt = 1;
    for (const slice of batch.slices) {
      bytes += slice.bytes;
      // The head was charged when its slice was opened: its stored count is the attempts before this one.
      attempt = Math.max(attempt, slice.rows[0]!.attempts + 1);
    }
    const observed: ObservedBatch = {
      app: this.app.name,
      target: this.name,
      engine: target.writer ?? target.writerClass ?? "custom",
      dialect: this.dialect,
      slices: batch.slices.map((s) => ({ table: s.table.name, rows: s.rows })),
      statements: batch.stmts.length,
      bytes,
      attempt,
      sentAt: this.now(),
    };
    this.observer!.batchSent(observed);
    return observed;
  }

  /**
   * Plans one batch: every ready table's draft within the byte budget; the tables a group that
   * spans tables waits on, ready or not; then the cut of groups that cannot go whole yet
   * (linkDrafts); then each draft opened as a slice (fence, head charged). Tables a transaction
   * links are one unit, sent in commit order (seq order: a file allocates seqs in commit order)
   * behind their fences. Null when nothing is to be sent.
   */
  private planBatch(now: number, out: TargetCycle, only: ReadonlySet<DrainTable> | null): SentBatch | null {
    const drafts: SliceDraft[] = [];
    let budget = this.app.batchMaxBytes;
    const plan = (table: DrainTable, force: boolean) => {
      const { draft, outcome } = table.plan({ now, maxBytes: budget, prepare: (t, row) => this.prepareRow(t, row), force });
      out.deadLettered += outcome.deadLettered;
      out.failed += outcome.failed;
      out.more ||= outcome.more;
      out.wakeAt = minWake(out.wakeAt, outcome.wakeAt);
      this.forgetReadAhead(outcome.touched);
      if (!draft) return;
      drafts.push(draft);
      budget -= draft.bytes;
    };
    for (const table of this.tables) {
      if (only !== null && !only.has(table)) continue;
      if (budget <= 0) {
        out.more = true; // the batch is full: the rest goes in the next cycle, at once
        break;
      }
      plan(table, false);
    }
    // A group that spans tables goes when it heads all of them: a table it waits on that is not
    // ready by its own measure (threshold, max wait) is planned anyway.
    const planned = new Set(drafts.map((d) => d.table));
    for (const table of this.awaitedBy(drafts)) if (!planned.has(table) && budget > 0) plan(table, true);
    if (drafts.length === 0) return null;
    const { keep, units } = linkDrafts(drafts, this.served);
    const fence = this.ledger ? (table: DrainTable, through: number, last: number) => this.ledger!.fence(table, through, last) : null;
    const opened = new Map<SliceDraft, TableSlice>();
    for (const draft of drafts) {
      const kept = keep.get(draft)!;
      if (kept === 0) continue; // its head group waits for the tables it spans
      trimDraft(draft, kept);
      opened.set(draft, draft.table.openSlice(draft, { now, fence }));
    }
    const batch: SentBatch = { slices: [], stmts: [], positions: new Map(), units: [] };
    for (const unit of units) {
      const slices = unit.map((d) => opened.get(d)!);
      batch.slices.push(...slices);
      if (slices.length === 1) {
        const slice = slices[0]!;
        batch.positions.set(slice, slice.stmts.map((_, i) => batch.stmts.length + i));
        batch.stmts.push(...slice.stmts);
        continue;
      }
      batch.units.push(slices);
      sendTogether(batch, slices);
    }
    return batch.stmts.length === 0 ? null : batch;
  }

  /** The tables this target serves by name (linking ignores tables another target serves). */
  private get served(): Set<string> {
    return new Set(this.tables.map((t) => t.name));
  }

  /** Tables of this target that a draft's group spanning tables waits on, and that have no draft. */
  private awaitedBy(drafts: SliceDraft[]): DrainTable[] {
    const names = new Set<string>();
    for (const draft of drafts) for (const tables of draft.spans.values()) for (const t of tables) names.add(t);
    if (names.size === 0) return [];
    const drafted = new Set(drafts.map((d) => d.table.name));
    return this.tables.filter((t) => names.has(t.name) && !drafted.has(t.name));
  }

  /** Another table's rows moved (a dead-lettered group spanning tables): what it read ahead is stale. */
  private forgetReadAhead(tables: string[] | undefined): void {
    if (!tables) return;
    for (const table of this.tables) {
      if (!tables.includes(table.name)) continue;
      table.forgetReadAhead();
      this.agenda.changed([table]); // its rows moved: the next cycle looks at it
    }
  }

  /**
   * A unit of linked tables must have been applied all together or not at all. A writer that
   * applied part of one (one table's slice whole, another's not) broke the contract (Statement.unit):
   * half a transaction is on the remote, and every table of the unit is held, loudly.
   */
  private checkUnits(batch: SentBatch, results: WriteResult[]): void {
    for (const unit of batch.units) {
      const applied = unit.map((slice) => answersOf(batch, slice, results).every((r) => r.ok));
      if (applied.every((a) => a) || applied.every((a) => !a)) continue;
      const names = unit.map((s) => `"${s.table.name}"`).join(", ");
      for (const slice of unit) {
        const message = `the writer of ${this.name} applied part of a transaction spanning ${names}: with ledger = true a writer must apply statements that share a unit (Statement.unit) all together or not at all`;
        slice.table.hold({ reason: "writer contract", message }, this.now());
      }
    }
  }

  /** Looks after the files of the open tables (see FileCare): one that has nothing pending here is idle. */
  private tendFiles(cycle: TargetCycle): void {
    const now = this.now();
    const files = new Map<string, DrainTable[]>();
    for (const table of this.tables) if (table.outbox) files.set(table.file, [...(files.get(table.file) ?? []), table]);
    for (const tables of files.values()) {
      const idle = () => !cycle.more && tables.every((t) => t.outbox!.pendingCount() === 0);
      this.options.care.tend(queueDbOf(tables[0]!.outbox!), now, idle);
    }
  }

  /** Confirms locally what the target applied in the previous batch (see DrainTable.confirmApplied). */
  private confirmApplied(): void {
    const now = this.now();
    for (const table of this.tables) table.confirmApplied(now);
  }

  /**
   * The local work that overlaps the remote's on a batch: the previous batch's confirmation and,
   * under load, reading and converting the rows that follow this one (see DrainTable.readAhead).
   * Before each table's turn the event loop turns, so the batch goes on the wire and the remote's
   * answers keep its pipeline moving while SQLite holds the thread.
   */
  private async whileInFlight(slices: TableSlice[]): Promise<void> {
    for (const table of this.tables) {
      if (!table.hasApplied) continue;
      await Bun.sleep(0);
      table.confirmApplied(this.now());
    }
    const bytes = slices.reduce((n, s) => n + s.bytes, 0);
    // Large rows: two batches in memory at once would double the drain's peak; their cost is the wire, not the local work.
    if (!this.pipelining || bytes > LARGE_BATCH_BYTES) return;
    for (const slice of slices) {
      if (!slice.more || !slice.fenced) continue;
      await Bun.sleep(0);
      slice.table.readAhead(slice, { now: this.now(), maxBytes: this.app.batchMaxBytes - (bytes - slice.bytes), prepare: (t, row) => this.prepareRow(t, row) });
    }
  }

  /** Decodes one row and converts it for the target's dialect (and, in compatibility mode, injects outbox_seq). */
  private prepareRow(table: DrainTable, row: OutboxRow): Statement {
    const args = decodeArgs(row.payload);
    const { sql, args: sent } = this.rewrites.rewrite(row.tag, args, row.seq, table.config.injectOutboxSeq);
    const text = this.comments === null || row.traceparent === null ? sql : this.comments.add(sql, row.traceparent);
    return { sql: text, args: sent, namespace: table.name, seq: row.seq };
  }

  /**
   * A batch given up after `write_timeout` may still commit. With a ledger that is harmless: its
   * fence moved the ledger row, so the next fence fails and settlement (which waits on that row)
   * confirms what it applied. Without one, nothing would stop a late commit from landing after newer
   * rows (an old UPDATE overwriting a newer one), so those tables are held until the call answers;
   * a late well-formed answer confirms the ok prefix it reports per table.
   */
  private awaitLateAnswer(batch: SentBatch, call: Promise<WriteResult[]>): void {
    const { slices } = batch;
    const held = slices.filter((s) => !s.fenced);
    if (held.length === 0) return;
    for (const s of held) s.table.awaitLateAnswer(this.now());
    const names = held.map((s) => `"${s.table.name}"`).join(", ");
    this.logger.warn(`drain: ${names} on ${this.name} held until the timed-out batch answers: without a ledger a late commit must not land after newer rows`, { target: this.name });
    const settle = (results: unknown) => {
      if (resultShapeProblem(results, batch.stmts.length) !== null) return;
      for (const s of held) s.table.applyLateAnswer(s, answersOf(batch, s, results as WriteResult[]));
      this.logger.info(`drain: the timed-out batch to ${this.name} answered late; what it committed of ${names} is confirmed`, { target: this.name });
    };
    call
      .then(settle, () => this.logger.info(`drain: the timed-out batch to ${this.name} failed late; ${names} are redelivered`, { target: this.name }))
      .finally(() => {
        for (const s of held) s.table.lateAnswerCame();
        this.agenda.all();
        this.waker.wake();
      });
  }
}

/** The answers of one slice of a batch, in the slice's order (its fence first). */
function answersOf(batch: SentBatch, slice: TableSlice, results: WriteResult[]): WriteResult[] {
  return batch.positions.get(slice)!.map((i) => results[i]!);
}

/**
 * Adds the slices of tables a transaction links as one unit: every fence first (each takes its
 * ledger row before any row is applied), then every row in seq order — the order the application
 * committed them in — each statement marked with the unit, so the writer applies them together.
 */
function sendTogether(batch: SentBatch, slices: TableSlice[]): void {
  const unit = slices.map((s) => s.table.name).sort().join("+");
  const mark = (stmt: Statement): Statement => ({ ...stmt, unit });
  const entries: Array<{ slice: TableSlice; index: number; seq: number }> = [];
  for (const slice of slices) {
    const offset = slice.fenced ? 1 : 0;
    slice.rows.forEach((row, i) => entries.push({ slice, index: i + offset, seq: row.seq }));
    batch.positions.set(slice, new Array<number>(slice.stmts.length));
  }
  for (const slice of slices) {
    if (!slice.fenced) continue;
    batch.positions.get(slice)![0] = batch.stmts.length;
    batch.stmts.push(mark(slice.stmts[0]!));
  }
  entries.sort((a, b) => a.seq - b.seq);
  for (const { slice, index } of entries) {
    batch.positions.get(slice)![index] = batch.stmts.length;
    batch.stmts.push(mark(slice.stmts[index]!));
  }
}
