import type { AppConfig } from "../../config/types.ts";
import { formatDuration } from "../../duration.ts";
import { describeError } from "../../errors.ts";
import { laneOf } from "../../lane-key.ts";
import type { Logger } from "../../logger.ts";
import type { DrainQueue } from "../../outbox/drain-queue.ts";
import type { DeadLettered, DeadReason, OutboxRow } from "../../outbox/outbox.ts";
import type { DeliveryObserver } from "../observer.ts";
import { rowBackoffMs } from "../schedule.ts";

/** Who a table's charges are for and who is told: its app's retry schedule, its target, the log, tracing. */
export interface ChargeParts {
  app: AppConfig;
  target: string;
  table: string;
  logger: Logger;
  observer: DeliveryObserver | null;
  /** The drain's clock (epoch ms): a head's retry time is stored from it. */
  now: () => number;
  /**
   * Whether a batch carrying `row` may still commit, or did unanswered: its letters are then in doubt (see
   * TableDoubt).
   */
  inDoubt?: (row: OutboxRow) => boolean;
}

/**
 * What one charge or dead letter did: rows failed and dead-lettered, and other tables whose rows moved with a
 * group.
 */
export interface Charged {
  failed: number;
  deadLettered: number;
  /** Other tables of the file a dead-lettered group also held rows of. */
  touched: string[];
  /** When a charged head is tried again (epoch ms); null when it was dead-lettered, or nothing was charged. */
  retryAt: number | null;
}

/**
 * What happens to a table's head when it fails: a failed attempt backs its group off
 * (`2^attempts` units of `backoff_unit`, capped), or dead-letters it once `max_attempts` is
 * reached; a head that can never go is dead-lettered at once. Each is logged once and told to
 * tracing.
 */
export class HeadCharges {
  /** The table's lanes (`lanes`): with more than one, a line names the failing row's key and lane. */
  readonly #lanes: number;

  constructor(private readonly parts: ChargeParts) {
    const target = parts.app.targets.find((t) => t.name === parts.target);
    this.#lanes = target?.tables.find((t) => t.name === parts.table)?.lanes ?? 1;
  }

  /**
   * Records a failed attempt of the group `row` heads (`attempts` includes this one: it was charged before
   * delivery).
   */
  failed(queue: DrainQueue, row: OutboxRow, attempts: number, message: string, errorClass: string): Charged {
    const { app, target, table, logger, observer } = this.parts;
    const delay = rowBackoffMs(attempts, app.backoffUnitMs, app.backoffCapMs);
    const at = this.parts.now();
    queue.recordFailure(row.seq, message, errorClass, new Date(at + delay), attempts);
    observer?.failed({ target, table, head: row, errorClass, message, at, attempt: attempts, retryAt: at + delay });
    if (app.maxAttempts !== null && attempts >= app.maxAttempts) {
      const dead = this.deadLetter(queue, row, "max_attempts", message, errorClass, {
        attempts,
        why: `on target ${target} after ${attempts} attempts`,
      });
      return { ...dead, failed: 1 };
    }
    const what = row.grp === null ? `seq ${row.seq}` : `the group of seq ${row.seq}`;
    logger.warn(
      `drain: ${what}${this.#laneText(row)} of namespace "${table}" failed on target ${target} (attempt ${attempts}${app.maxAttempts === null ? "" : `/${app.maxAttempts}`}, retry in ${formatDuration(delay)}): ${message}`,
      { target, namespace: table, seq: row.seq, attempt: attempts, error_class: errorClass, ...this.#laneField(row) },
    );
    return { failed: 1, deadLettered: 0, touched: [], retryAt: at + delay };
  }

  /**
   * The head group (`head` carries its attempts) failed at `culprit`: one attempt more, counted on
   * from the most any of its heads carries when it spans tables (`groupAttempts`). The error names
   * the culprit when its group has other rows (among `rows`, or in the tables of `spans`).
   */
  groupFailed(
    queue: DrainQueue,
    failed: { head: OutboxRow; culprit: OutboxRow; failure: { error?: unknown; errorClass?: unknown } },
    group: { rows: readonly OutboxRow[]; spans: ReadonlyMap<number, unknown>; attempts: ReadonlyMap<number, number> },
  ): Charged {
    const { head, culprit, failure } = failed;
    const error = failureText(failure);
    const errorClass = typeof failure.errorClass === "string" && failure.errorClass ? failure.errorClass : "unknown";
    const grp = culprit.grp;
    const grouped = grp !== null && (group.spans.has(grp) || group.rows.some((r) => r.grp === grp && r !== culprit));
    const message = grouped ? `seq ${culprit.seq} of the group of seq ${grp}: ${error}` : error;
    const before = Math.max(head.attempts, head.grp === null ? 0 : (group.attempts.get(head.grp) ?? 0));
    return this.failed(queue, head, before + 1, message, errorClass);
  }

  /**
   * A writer reported `row` applied behind a failure, breaking its contract: nothing is charged, it stays
   * queued, said once.
   */
  okAfterFailure(row: OutboxRow): void {
    const { target, table, logger } = this.parts;
    logger.warn(
      `drain: writer ${target} reported seq ${row.seq} ok after a failure in namespace "${table}"; it stays queued`,
      { target, namespace: table, seq: row.seq },
    );
  }

  /**
   * Undoes the up-front charge of `seq` after a batch that never got an answer (an outage); a local error is
   * logged.
   */
  refund(queue: DrainQueue, seq: number): void {
    try {
      queue.refundAttempt(seq);
    } catch (error) {
      this.parts.logger.error(
        `drain: local error refunding seq ${seq} of namespace "${this.parts.table}": ${describeError(error).message}`,
        { namespace: this.parts.table, seq },
      );
    }
  }

  /**
   * Dead-letters the group `row` heads at once (undecodable, unsupported, out of attempts); the log
   * line says `why` (the reason by default) and the attempts made (the row's by default).
   */
  deadLetter(
    queue: DrainQueue,
    row: OutboxRow,
    reason: DeadReason,
    message: string,
    errorClass: string,
    { attempts = row.attempts, why = `(${reason})` } = {},
  ): Charged {
    const { target, table, logger, observer } = this.parts;
    const moved = queue.deadLetter(row.seq, reason, message, errorClass, this.parts.inDoubt?.(row));
    observer?.deadLettered({
      target,
      table,
      head: row,
      errorClass,
      message,
      at: this.parts.now(),
      reason,
      rows: moved.seqs.length,
    });
    logger.error(
      `drain: dead-lettered ${describeMoved(row.seq, moved)}${this.#laneText(row)} of namespace "${table}" ${why}: ${message}`,
      { target, namespace: table, seq: row.seq, attempt: attempts, error_class: errorClass, ...this.#laneField(row) },
    );
    return { failed: 0, deadLettered: moved.seqs.length, touched: moved.others, retryAt: null };
  }

  /** In a table with lanes, which of them a row holds: ` (key "cust-42", lane 3)`, or ` (no key: every lane)`. */
  #laneText(row: OutboxRow): string {
    if (this.#lanes <= 1) return "";
    const lane = laneOf(row.laneKey, this.#lanes);
    return lane === null ? " (no key: every lane)" : ` (key ${JSON.stringify(row.laneKey)}, lane ${lane})`;
  }

  /** The `lane` field of a JSON log line, in a table with lanes (absent for a row without a key). */
  #laneField(row: OutboxRow): { lane?: number } {
    const lane = this.#lanes <= 1 ? null : laneOf(row.laneKey, this.#lanes);
    return lane === null ? {} : { lane };
  }
}

/** What a writer said of a failed statement, or that it said nothing. */
export function failureText(failure: { error?: unknown }): string {
  return typeof failure.error === "string" && failure.error
    ? failure.error
    : "writer reported a failure without a message";
}

/** "seq 7", or "the group of seq 7 (3 rows, also in tables a, b)". */
function describeMoved(head: number, moved: DeadLettered): string {
  if (moved.seqs.length <= 1) return `seq ${head}`;
  return `the group of seq ${head} (${moved.seqs.length} rows${moved.others.length > 0 ? `, also in ${moved.others.map((t) => `"${t}"`).join(", ")}` : ""})`;
}
