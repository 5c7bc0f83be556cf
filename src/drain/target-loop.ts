import { describeError } from "../errors.ts";
import type { DrainTable } from "./table/table.ts";
import type { TargetCycle } from "./delivery.ts";
import type { TargetParts } from "./target-parts.ts";
import { Agenda, CommitWatcher, type DirWatch, Waker } from "./wake.ts";

/**
 * While the files are watched: every file's data_version is read at least this often (or every
 * flush_interval, if longer), so a commit the watcher did not report waits no longer than this...
 */
const SWEEP_MS = 1_000;
/** ...and every table is looked at this often, for what changes without a commit. */
const FULL_CYCLE_MS = 60_000;

/** What one target's loop works with. */
export interface LoopParts extends TargetParts {
  /** The tables by queue file. */
  tablesByFile: ReadonlyMap<string, readonly DrainTable[]>;
  /** How long (ms) after a file changed without a visible commit it is looked at again (see CommitWatcher). */
  pollIntervalMs: number;
  /** One cycle, over every table or `only` these. */
  cycle: (only: ReadonlySet<DrainTable> | null) => Promise<TargetCycle>;
  /**
   * When the fleet view is read next (the drain's clock), or null when no cycle would read it (no
   * ledger, the target down or not set up): a due time no cycle can meet would wake the loop at
   * once, again and again.
   */
  fleetDueAt: () => number | null;
  /** How the files' directories are watched for commits (fs.watch by default). */
  watch?: DirWatch;
}

/**
 * One target's background loop: cycles back to back while rows are ready, else sleeps until the
 * next deadline (a table's max wait, a head's retry time, a hold's retry, the target's backoff) —
 * and wakes when a producer commits to one of its files, for the tables of that file (Agenda).
 * A cycle never throws; a loop that crashes anyway is said loudly and restarted.
 */
export class TargetLoop {
  #stopping = false;
  #done: Promise<void> | null = null;
  /** When the loop last ran at all — a cycle, or a poll while idle or backing off (epoch ms): the liveness signal. */
  #lastBeatAt: number | null = null;
  /** After a batch that changed nothing, commits do not wake the loop before this (epoch ms). */
  #quietUntil = 0;
  readonly #waker: Waker;
  #watcher: CommitWatcher | null = null;
  /** Which tables the next cycle looks at, while the files are watched. */
  readonly #agenda: Agenda<DrainTable>;

  constructor(private readonly parts: LoopParts) {
    this.#agenda = new Agenda(Math.max(parts.app.flushIntervalMs, FULL_CYCLE_MS));
    this.#waker = new Waker(parts.scheduler);
  }

  /** When the loop last ran (epoch ms), or null before it started. */
  get lastBeatAt(): number | null {
    return this.#lastBeatAt;
  }

  /** True from stop() until the next start(). */
  get stopping(): boolean {
    return this.#stopping;
  }

  /** A cycle finished at `at` (epoch ms), in the loop or not: the loop is alive. */
  beat(at: number): void {
    this.#lastBeatAt = at;
  }

  /** The next cycle looks at `tables`. */
  changed(tables: DrainTable[]): void {
    this.#agenda.changed(tables);
  }

  /** Commits do not wake the loop before `until` (epoch ms): nothing moved. */
  quiet(until: number): void {
    this.#quietUntil = until;
  }

  /** The next cycle looks at every table, and runs now. */
  wakeForAll(): void {
    this.#agenda.all();
    this.#waker.wake();
  }

  /** Ends the quiet spell and cycles over every table at once (`kick`). */
  retryNow(): void {
    this.#quietUntil = 0;
    this.wakeForAll();
  }

  /** Starts the loop (idempotent). */
  start(): void {
    if (this.#done) return;
    this.#stopping = false;
    this.#lastBeatAt ??= this.parts.now(); // from here on, a loop that never runs is a hung loop
    this.#watch();
    this.#done = this.#supervise();
  }

  /** Stops scheduling; resolves when the loop's cycle in flight (if any) has settled. */
  async stop(): Promise<void> {
    this.#stopping = true;
    this.#waker.wake();
    await this.#done;
    this.#done = null;
    this.#watcher?.close();
    this.#watcher = null;
  }

  /**
   * Watches every table's file for commits, opened or not (a table whose file opens later is
   * covered already). A commit wakes the loop for the tables of that file, unless the target is
   * backing off or quiet (see quiet): those wait for the next cycle, whatever wakes it.
   */
  #watch(): void {
    const { parts } = this;
    this.#watcher?.close();
    this.#watcher = null;
    const byFile = parts.tablesByFile;
    const unwatch = (error: unknown) => {
      // Without the watcher the loop scans every table every flush_interval: it costs CPU per table, it misses nothing.
      parts.logger.warn(
        `drain: cannot watch the files of target ${parts.name} for commits, scanning every flush_interval instead: ${describeError(error).message}`,
        { target: parts.name },
      );
      this.#watcher?.close();
      this.#watcher = null;
      this.wakeForAll();
    };
    try {
      this.#watcher = new CommitWatcher(
        [...byFile.keys()],
        {
          onCommit: (file) => {
            this.#agenda.changed(byFile.get(file) ?? []);
            if (parts.now() >= this.#gate()) this.#waker.wake();
          },
          onCheckDue: () => this.#waker.wake(), // the idle loop plans its sleep again
          onError: unwatch,
          // The drain's own connection to the file (any of its tables' in a shared file): no connection of
          // the watcher's own.
          counters: (file) =>
            byFile
              .get(file)
              ?.find((t) => t.isOpen)
              ?.commitCounters() ?? null,
        },
        {
          recheckMs: parts.pollIntervalMs,
          sweepMs: Math.max(parts.app.flushIntervalMs, SWEEP_MS),
          now: parts.now,
          elapsed: () => parts.scheduler.elapsed(),
          ...(parts.watch === undefined ? {} : { watch: parts.watch }),
        },
      );
    } catch (error) {
      unwatch(error);
    }
  }

  /** Commits do not wake the loop before this (epoch ms): the target's backoff, or a quiet spell. */
  #gate(): number {
    return Math.max(this.parts.reachability.backoffUntil, this.#quietUntil);
  }

  async #supervise(): Promise<void> {
    while (!this.#stopping) {
      try {
        await this.#loop();
      } catch (error) {
        // #loop() guards every step; reaching here is a bug. Say so loudly and keep draining.
        this.parts.logger.error(
          `drain: the loop of target ${this.parts.name} crashed and is restarted: ${describeError(error).message}`,
          { target: this.parts.name },
        );
        await this.#waker.sleep(1000);
      }
    }
  }

  async #loop(): Promise<void> {
    const { parts } = this;
    while (!this.#stopping) {
      // Watched, a cycle looks at the tables whose file changed or whose time came; else at all.
      const outcome = await parts.cycle(this.#watcher ? this.#agenda.take(parts.now()) : null);
      if (this.#stopping) return;
      this.#agenda.after(outcome.wakeAt, outcome.more);
      if (outcome.more) {
        this.#watcher?.pause(); // the next cycles look at every table anyway
        await parts.scheduler.turn(); // let producers and other targets in
        continue;
      }
      this.#watcher?.resume();
      // Watched, the loop also wakes for the fleet view's next read (a cycle reads it), not only for its tables.
      const fleetAt = parts.fleetDueAt() ?? Number.POSITIVE_INFINITY;
      const until = this.#watcher
        ? Math.min(this.#agenda.nextAt(), fleetAt)
        : Math.min(parts.now() + parts.app.flushIntervalMs, outcome.wakeAt ?? Number.POSITIVE_INFINITY);
      await this.#idle(until);
    }
  }

  /**
   * Sleeps until `until` (epoch ms) or, while the files are watched, a commit to one of them; at
   * least one turn of the event loop either way. A writer that answers without waiting on I/O (a
   * SQLite file) makes a cycle microtasks only: a loop that found a commit after every cycle and
   * went on at once would never let a timer run — the background prune's pauses, the state file,
   * the metrics server and stop would wait for the backlog.
   */
  async #idle(until: number): Promise<void> {
    let slept = false;
    while (!this.#stopping) {
      const now = this.parts.now();
      const watcher = this.#watcher;
      watcher?.check(now);
      if ((watcher && this.#agenda.pending && now >= this.#gate()) || now >= until) {
        if (!slept) await this.parts.scheduler.turn();
        return;
      }
      let wakeAt = until;
      if (watcher) {
        wakeAt = Math.min(wakeAt, watcher.checkAt);
        // A commit seen during a backoff or a quiet spell waits for the gate, not for the next deadline.
        if (this.#agenda.pending) wakeAt = Math.min(wakeAt, this.#gate());
      }
      await this.#waker.sleep(wakeAt - now);
      slept = true;
      this.#lastBeatAt = this.parts.now();
    }
  }
}
