import { describeError } from "../../errors.ts";
import type { Logger } from "../../logger.ts";
import type { DrainQueue } from "../../outbox/drain-queue.ts";
import type { Scheduler } from "../../scheduler.ts";

/** The least pause between two chunks of a prune. */
const PRUNE_PAUSE_MS = 5;

/** What a table's prune keeps: how long, and whose queue. */
export interface PruneParts {
  table: string;
  file: string;
  retainLogDays: number;
  retainReplayedDays: number;
  logger: Logger;
  /** The drain's clock (epoch ms): what is old is measured from it. */
  now: () => number;
  /** The pauses between chunks, and how long a chunk took. */
  scheduler: Scheduler;
  /** The table's queue while it is open. */
  queue: () => DrainQueue | null;
}

/**
 * One table's background prune of its delivered log (`retain_log_days`) and of its replayed dead
 * letters (`retain_replayed_days`): one chunk at a time with a pause between of three times the
 * chunk's own time (PRUNE_PAUSE_MS at least), so producers of the file take its write lock between
 * chunks — SQLite's lock is not fair, and chunks back to back would keep a producer waiting for
 * the whole prune. A prune still running is not started twice; it stops when the queue closes.
 */
export class BackgroundPrune {
  #running: Promise<void> | null = null;

  constructor(private readonly parts: PruneParts) {}

  /** The prune in progress, if any (closing the table waits for it). */
  get running(): Promise<void> | null {
    return this.#running;
  }

  /** Starts a prune unless one runs; resolves when it is done (it never rejects: a failure is logged). */
  start(): Promise<void> {
    this.#running ??= this.#prune().finally(() => {
      this.#running = null;
    });
    return this.#running;
  }

  async #prune(): Promise<void> {
    const { table, logger, queue } = this.parts;
    let removed = 0;
    try {
      for (;;) {
        const q = queue();
        if (!q || q.closed) return;
        const { scheduler } = this.parts;
        const started = scheduler.elapsed();
        const step = q.pruneSyncLogStep(this.parts.retainLogDays, new Date(this.parts.now()));
        removed += step.removed;
        if (step.done) break;
        // At most a quarter of the time: a producer retrying in SQLite's busy handler (1, 2, 5, 10 … ms)
        // then finds the lock free within a retry or two.
        await scheduler.sleep(Math.max(PRUNE_PAUSE_MS, 3 * (scheduler.elapsed() - started)));
      }
      if (removed > 0)
        logger.debug(`drain: pruned ${removed} delivered-log entries of "${table}"`, {
          namespace: table,
          rows: removed,
        });
      const replayed = queue()?.pruneReplayedDead(this.parts.retainReplayedDays, new Date(this.parts.now())) ?? 0;
      if (replayed > 0)
        logger.debug(`drain: pruned ${replayed} replayed dead letters of "${table}"`, {
          namespace: table,
          rows: replayed,
        });
    } catch (error) {
      logger.error(
        `drain: pruning the logs of "${table}" (${this.parts.file}) failed: ${describeError(error).message}`,
        {
          namespace: table,
        },
      );
    }
  }
}
