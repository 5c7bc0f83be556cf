import { describeError, isMisconfigured } from "../errors.ts";
import type { Logger } from "../logger.ts";
import { outageBackoffMs } from "./schedule.ts";
import type { TargetState } from "./views.ts";
import { formatDuration } from "../duration.ts";

/**
 * Whether one target answers: ok, down (retried after a backoff of one second doubling, jittered,
 * capped) or misconfigured (retried on the same schedule, but a person must act) — since when,
 * why, and until when the drain waits. The log says each cause once, not at every retry.
 */
export class Reachability {
  #state: TargetState = "starting";
  #failures = 0;
  #downSince: number | null = null;
  #lastError: string | null = null;
  #backoffUntil = 0;

  constructor(
    private readonly target: string,
    private readonly backoffCapMs: number,
    private readonly logger: Logger,
    /** [0, 1): the jitter of the backoff (the drain's scheduler's). */
    private readonly random: () => number,
  ) {}

  /** Starting until the first answer or failure; then ok, outage or misconfigured. */
  get state(): TargetState {
    return this.#state;
  }

  /** Consecutive failed attempts to reach the target (0 when it answers). */
  get failures(): number {
    return this.#failures;
  }

  /** When the current outage began (epoch ms), if down. */
  get downSince(): number | null {
    return this.#downSince;
  }

  /** The last failure's message (credential-free), while down or misconfigured. */
  get lastError(): string | null {
    return this.#lastError;
  }

  /** No call to the target before this (epoch ms; 0: none pending). */
  get backoffUntil(): number {
    return this.#backoffUntil;
  }

  /** True while the target is backing off after an outage (or is misconfigured). */
  get down(): boolean {
    return this.#state === "outage" || this.#state === "misconfigured";
  }

  /** Ends the backoff now (`sqloutbox kick`): the operator fixed the cause. */
  retryNow(): void {
    this.#backoffUntil = 0;
  }

  /**
   * Records a failed attempt to reach the target (`what` says what was tried) and backs off. A
   * misconfigured target (authentication, an unknown database) is said once; an outage at its
   * first failure, at every change of cause, and every tenth retry.
   */
  outage(error: unknown, what: string, now: number): void {
    const misconfigured = isMisconfigured(error);
    const { message, errorClass } = describeError(error);
    const repeated = this.#lastError === message;
    this.#failures += 1;
    this.#downSince ??= now;
    this.#state = misconfigured ? "misconfigured" : "outage";
    const delay = outageBackoffMs(this.#failures, this.backoffCapMs, this.random);
    this.#backoffUntil = now + delay;
    this.#lastError = message;
    const fields = { target: this.target, attempt: this.#failures, error_class: errorClass };
    if (misconfigured) {
      if (repeated)
        this.logger.debug(
          `drain: target ${this.target} is still misconfigured (attempt ${this.#failures}), retrying in ${formatDuration(delay)}`,
          fields,
        );
      else
        this.logger.error(
          `drain: target ${this.target} is misconfigured (${what}); retrying in ${formatDuration(delay)}, then less often, up to ${formatDuration(this.backoffCapMs)} apart (outage_backoff_cap_minutes): ${message}`,
          fields,
        );
      return;
    }
    // The same cause again is said at debug, and every tenth retry at warn so a long outage stays
    // visible in the journal.
    const level = !repeated || this.#failures % 10 === 0 ? "warn" : "debug";
    this.logger[level](
      `drain: target ${this.target} is unavailable (${what}; attempt ${this.#failures}, nothing charged), retrying in ${formatDuration(delay)}: ${message}`,
      fields,
    );
  }

  /** The target answered. */
  recovered(): void {
    if (this.#failures > 0) {
      this.logger.info(`drain: target ${this.target} is reachable again after ${this.#failures} failed attempts`, {
        target: this.target,
        attempt: this.#failures,
      });
    }
    this.#failures = 0;
    this.#backoffUntil = 0;
    this.#downSince = null;
    this.#lastError = null;
    this.#state = "ok";
  }
}
