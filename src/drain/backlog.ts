import { formatDuration } from "../duration.ts";
import type { Logger } from "../logger.ts";

/** How often, at most, a target says how its backlog is going (ms): 10 s. */
export const PROGRESS_EVERY_MS = 10_000;

/**
 * What a target says while it drains a backlog, so an operator watching the journal sees it move
 * rather than a silence until the minute's activity line: at most every `everyMs`, and only while
 * rows are pending and some were delivered since the last line — `drain: backlog of shop.main:
 * R rows/s, N pending, ETA 2m10s`. The rate is of rows delivered; the ETA is from how fast the
 * pending count shrinks (new rows arriving count against it; a lane held by a failing head keeps
 * the rows delivered behind it pending until that head goes), and says so when it does not.
 * Fed after each of the target's cycles with its delivered total (from the drain's clock); a
 * spell in which nothing moves (an idle target, an outage) starts the next measure afresh, so its
 * rate is never the backlog's rows spread over the quiet before it.
 */
export class BacklogProgress {
  /** The delivered total after the previous cycle, or null before the first. */
  #previous: number | null = null;
  /** When delivery last moved (epoch ms). */
  #movedAt = 0;
  /** Where the measure the next line reports began, or null while nothing moves. */
  #since: { at: number; delivered: number; pending: number } | null = null;

  constructor(
    private readonly target: string,
    private readonly logger: Logger,
    private readonly everyMs = PROGRESS_EVERY_MS,
  ) {}

  /**
   * A cycle ended at `now` with `delivered` rows delivered in all; `pending` is asked only where a measure
   * starts or a line is due.
   */
  cycled(now: number, delivered: number, pending: () => number): void {
    // The first cycle counts what it delivered itself: against a slow remote one cycle carries a
    // chain of batches, seconds long, and the first measure must not wait for a second cycle.
    const moved = delivered - (this.#previous ?? 0);
    this.#previous = delivered;
    if (moved > 0) {
      this.#since ??= { at: now, delivered, pending: pending() };
      this.#movedAt = now;
    } else if (now - this.#movedAt >= this.everyMs) this.#since = null;
    const since = this.#since;
    if (since === null || now - since.at < this.everyMs) return;
    const left = pending();
    const rows = delivered - since.delivered;
    this.#since = left > 0 ? { at: now, delivered, pending: left } : null;
    if (left === 0 || rows <= 0) return;
    const seconds = (now - since.at) / 1000;
    const perSecond = rows / seconds;
    const shrinking = (since.pending - left) / seconds;
    const eta = shrinking > 0 ? `ETA ${formatDuration((left / shrinking) * 1000)}` : "not shrinking";
    this.logger.info(
      `drain: backlog of ${this.target}: ${perSecond >= 10 ? Math.round(perSecond) : perSecond.toFixed(1)} rows/s, ${left} pending, ${eta}`,
      { target: this.target, rows, pending: left },
    );
  }
}
