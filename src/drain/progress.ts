import { formatDuration } from "../duration.ts";
import type { Logger } from "../logger.ts";

/** How often, at most, a target says how its backlog is going (ms): 10 s. */
export const PROGRESS_EVERY_MS = 10_000;

/**
 * What a target says while it drains a backlog, so an operator watching the journal sees it move
 * rather than a silence until the minute's activity line: at most every `everyMs`, and only while
 * rows are pending and some were delivered since the last line — `drain: backlog of shop.main:
 * R rows/s, N pending, ETA 2m10s`. Fed after each of the target's cycles with its delivered
 * total (from the drain's clock); a spell in which nothing moves (an idle target, an outage) starts
 * the next measure afresh, so its rate is never the backlog's rows spread over the quiet before it.
 */
export class BacklogProgress {
  /** The delivered total after the previous cycle, or null before the first. */
  #previous: number | null = null;
  /** When delivery last moved (epoch ms). */
  #movedAt = 0;
  /** Where the measure the next line reports began, or null while nothing moves. */
  #since: { at: number; delivered: number } | null = null;

  constructor(
    private readonly target: string,
    private readonly logger: Logger,
    private readonly everyMs = PROGRESS_EVERY_MS,
  ) {}

  /** A cycle ended at `now` with `delivered` rows delivered in all; `pending` is asked only when a line is due. */
  cycled(now: number, delivered: number, pending: () => number): void {
    const moved = this.#previous === null ? 0 : delivered - this.#previous;
    this.#previous = delivered;
    if (moved > 0) {
      this.#since ??= { at: now, delivered };
      this.#movedAt = now;
    } else if (now - this.#movedAt >= this.everyMs) this.#since = null;
    const since = this.#since;
    if (since === null || now - since.at < this.everyMs) return;
    const left = pending();
    const rows = delivered - since.delivered;
    this.#since = left > 0 ? { at: now, delivered } : null;
    if (left === 0 || rows <= 0) return;
    const perSecond = (rows * 1000) / (now - since.at);
    this.logger.info(
      `drain: backlog of ${this.target}: ${perSecond >= 10 ? Math.round(perSecond) : perSecond.toFixed(1)} rows/s, ${left} pending, ETA ${formatDuration((left / perSecond) * 1000)}`,
      { target: this.target, rows, pending: left },
    );
  }
}
