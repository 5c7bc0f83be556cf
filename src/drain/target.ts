import { describeError, type TargetContext } from "./context.ts";
import { targetBackoffMs } from "./backoff.ts";
import { planBatch } from "./batch.ts";
import { holdForLateAnswer } from "./late.ts";
import { refundBatch, settleBatch } from "./settle.ts";
import { reconcileSent } from "./reconcile.ts";
import { prepareTarget } from "./startup.ts";
import { CommitWatcher, Waker } from "./wake.ts";
import { timedWriteBatch } from "./write.ts";

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

/**
 * "Cycle again at once" only after progress: a writer that keeps answering `skipped` for a head
 * (or any other no-op outcome) must not turn the loop into a hot spin against the remote.
 */
function noSpin(out: TargetCycle): TargetCycle {
  if (out.more && out.delivered + out.failed + out.deadLettered === 0) out.more = false;
  return out;
}

/**
 * Drives one target: startup (auto_schema + seeding, retried until the remote answers), then
 * cycles of plan → one `writeBatch` → settle. Between cycles it sleeps until the next deadline
 * (flush_interval, a table's max wait, a head's backoff, the target's outage backoff) but wakes
 * as soon as a producer commits to one of its files. A cycle never throws.
 */
export class TargetRunner {
  prepared = false;
  private outages = 0;
  private backoffUntil = 0;
  /** After a batch that changed nothing, commits do not wake the loop before this (epoch ms). */
  private quietUntil = 0;
  private batches = 0;
  /** Rows delivered, failed and dead-lettered since the service started. */
  readonly totals = { delivered: 0, failed: 0, deadLettered: 0 };
  private running: Promise<TargetCycle> | null = null;
  private preparing: Promise<boolean> | null = null;
  private stopping = false;
  private loopDone: Promise<void> | null = null;
  private readonly waker = new Waker();
  private watcher: CommitWatcher | null = null;

  constructor(
    readonly ctx: TargetContext,
    private readonly pollIntervalMs: number,
  ) {}

  get name(): string {
    return this.ctx.target.name;
  }

  /** Runs one cycle; concurrent callers share the cycle already in flight. */
  cycle(): Promise<TargetCycle> {
    this.running ??= this.runCycle()
      .then((out) => {
        this.totals.delivered += out.delivered;
        this.totals.failed += out.failed;
        this.totals.deadLettered += out.deadLettered;
        return out;
      })
      .finally(() => {
        this.running = null;
      });
    return this.running;
  }

  /** True while the target is backing off after an outage. */
  get down(): boolean {
    return this.outages > 0;
  }

  /**
   * Runs startup (auto_schema + seeding) once; true when done. Delivery waits for it: seeding
   * must precede the first delivery, or a fresh queue could reuse seqs the remote already holds.
   */
  prepare(): Promise<boolean> {
    if (this.prepared) return Promise.resolve(true);
    this.preparing ??= prepareTarget(this.ctx)
      .then(() => {
        this.prepared = true;
        this.recovered();
        return true;
      })
      .catch((error) => {
        if (!this.stopping) this.outage(error, "startup (auto_schema / seeding)"); // a stop during startup closed the writer
        return false;
      })
      .finally(() => {
        this.preparing = null;
      });
    return this.preparing;
  }

  /** Startup bounded by `write_timeout`, for `start()`: a remote that hangs must not hang the service. */
  async startupBounded(): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const limit = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, this.ctx.app.writeTimeout * 1000);
    });
    await Promise.race([this.prepare(), limit]);
    clearTimeout(timer);
  }

  /** Starts the background loop (idempotent). */
  startLoop(): void {
    if (this.loopDone) return;
    this.stopping = false;
    try {
      this.watcher = new CommitWatcher(this.ctx.tables.map((t) => t.file));
    } catch (error) {
      // Without the watcher the loop still scans every flush_interval: slower to react, never idle.
      this.ctx.logger.warn(`drain: cannot watch the files of target ${this.name} for commits, scanning every flush_interval instead: ${describeError(error).message}`);
    }
    this.loopDone = this.supervise();
  }

  /** Stops scheduling; resolves when the in-flight cycle (if any) has settled. */
  async stopLoop(): Promise<void> {
    this.stopping = true;
    this.waker.wake();
    await this.loopDone;
    await this.running; // a runOnce() cycle in flight settles too
    this.loopDone = null;
    this.watcher?.close();
    this.watcher = null;
  }

  private async supervise(): Promise<void> {
    while (!this.stopping) {
      try {
        await this.loop();
      } catch (error) {
        // loop() guards every step; reaching here is a bug. Say so loudly and keep draining.
        this.ctx.logger.error(`drain: the loop of target ${this.name} crashed and is restarted: ${describeError(error).message}`);
        await this.waker.sleep(1000);
      }
    }
  }

  private async loop(): Promise<void> {
    const flushMs = this.ctx.app.flushInterval * 1000;
    while (!this.stopping) {
      const outcome = await this.cycle();
      if (this.stopping) return;
      if (outcome.more) {
        await new Promise((resolve) => setImmediate(resolve)); // let producers and other targets in
        continue;
      }
      const now = Date.now();
      const until = Math.min(now + flushMs, outcome.wakeAt ?? Number.POSITIVE_INFINITY);
      await this.idle(until);
    }
  }

  /** Sleeps until `until` (epoch ms) or a commit to one of the target's files. */
  private async idle(until: number): Promise<void> {
    while (!this.stopping) {
      const left = until - Date.now();
      if (left <= 0) return;
      await this.waker.sleep(Math.min(this.pollIntervalMs, left));
      if (this.stopping) return;
      try {
        if (this.watcher?.changed() && Date.now() >= Math.max(this.backoffUntil, this.quietUntil)) return;
      } catch (error) {
        this.ctx.logger.warn(`drain: commit watcher of target ${this.name} failed, falling back to flush_interval: ${describeError(error).message}`);
        this.watcher?.close();
        this.watcher = null;
      }
    }
  }

  private async runCycle(): Promise<TargetCycle> {
    const out: TargetCycle = { target: this.name, delivered: 0, failed: 0, deadLettered: 0, outage: false, more: false, wakeAt: null };
    const { ctx } = this;
    try {
      if (ctx.now() < this.backoffUntil) return { ...out, outage: true, wakeAt: this.backoffUntil };
      if (!this.prepared && !(await this.prepare())) return { ...out, outage: true, wakeAt: this.backoffUntil };
      try {
        out.delivered += await reconcileSent(ctx);
      } catch (error) {
        this.outage(error, "reading MAX(outbox_seq) to settle an interrupted batch");
        return { ...out, outage: true, wakeAt: this.backoffUntil };
      }
      const plan = planBatch(ctx);
      out.deadLettered += plan.deadLettered;
      out.failed += plan.failed;
      out.more = plan.more;
      out.wakeAt = plan.wakeAt;
      if (plan.stmts.length === 0) return noSpin(out);
      let results;
      try {
        results = await timedWriteBatch(ctx, plan.stmts, (abandoned) => holdForLateAnswer(ctx, plan, abandoned, () => this.waker.wake()));
      } catch (error) {
        refundBatch(ctx, plan);
        this.outage(error, `a batch of ${plan.stmts.length} rows`);
        return { ...out, outage: true, more: false, wakeAt: this.backoffUntil };
      }
      this.recovered();
      const settled = settleBatch(ctx, plan, results);
      out.delivered += settled.delivered;
      out.failed += settled.failed;
      out.deadLettered += settled.deadLettered;
      if (out.delivered + out.failed + out.deadLettered === 0) {
        // The remote answered but nothing moved (every head "skipped"): our own bookkeeping
        // commits would wake the watcher at once, so wait a full flush_interval instead.
        this.quietUntil = ctx.now() + ctx.app.flushInterval * 1000;
      }
      if (settled.failed > 0 || settled.deadLettered > 0) out.more = true; // re-plan: the next head may be ready
      this.batches += 1;
      if (this.batches % ctx.app.cleanupEvery === 0) this.prune();
      return noSpin(out);
    } catch (error) {
      ctx.logger.error(`drain: cycle of target ${this.name} failed: ${describeError(error).message}`);
      return { ...out, wakeAt: ctx.now() + 1000 };
    }
  }

  private outage(error: unknown, what: string): void {
    const { app, logger } = this.ctx;
    this.outages += 1;
    const delay = targetBackoffMs(this.outages, app.backoffUnitSeconds, app.backoffCapMinutes);
    this.backoffUntil = this.ctx.now() + delay;
    logger.warn(
      `drain: target ${this.name} is unavailable (${what}; outage #${this.outages}, nothing charged), retrying in ${Math.round(delay)} ms: ${describeError(error).message}`,
    );
  }

  private recovered(): void {
    if (this.outages > 0) this.ctx.logger.info(`drain: target ${this.name} is reachable again after ${this.outages} failed attempts`);
    this.outages = 0;
    this.backoffUntil = 0;
  }

  /** Prunes each table's sync log per its `retain_log_days`. */
  private prune(): void {
    for (const table of this.ctx.tables) {
      try {
        const removed = table.outbox.pruneSyncLog(table.config.retainLogDays);
        if (removed > 0) this.ctx.logger.debug(`drain: pruned ${removed} sync-log entries of "${table.config.name}"`);
      } catch (error) {
        this.ctx.logger.error(`drain: pruning the sync log of "${table.config.name}" (${table.file}) failed: ${describeError(error).message}`);
      }
    }
  }
}
