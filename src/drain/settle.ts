import type { WriteResult } from "../writers/writer.ts";
import { chargeFailure, type NamespaceSlice, type PlannedBatch } from "./batch.ts";
import { describeError, holdAfterLocalError, type TargetContext } from "./context.ts";

/** What settling one delivered batch did. */
export interface SettleOutcome {
  delivered: number;
  failed: number;
  deadLettered: number;
}

/**
 * Applies a well-formed answer: per namespace, confirms the prefix of ok rows (one local
 * transaction), charges the first failed row (backoff or dead-letter), and refunds the head's
 * charge when it was skipped rather than tried. Rows behind a failure are never charged.
 */
export function settleBatch(ctx: TargetContext, plan: PlannedBatch, results: WriteResult[]): SettleOutcome {
  const outcome: SettleOutcome = { delivered: 0, failed: 0, deadLettered: 0 };
  for (const slice of plan.slices) {
    try {
      settleSlice(ctx, slice, results, outcome);
    } catch (error) {
      // Local error while confirming: the rows stay queued and are redelivered (idempotently) later.
      const ms = holdAfterLocalError(slice.table, ctx.now());
      ctx.logger.error(
        `drain: local error settling namespace "${slice.table.config.name}" (${slice.table.file}) after delivery to ${ctx.target.name}; will redeliver in ${ms} ms: ${describeError(error).message}`,
      );
    }
  }
  return outcome;
}

function settleSlice(ctx: TargetContext, slice: NamespaceSlice, results: WriteResult[], outcome: SettleOutcome): void {
  const { rows, start, table } = slice;
  const confirmed: number[] = [];
  let stopAt = -1; // index of the first row not ok
  for (let i = 0; i < rows.length; i++) {
    if (results[start + i]!.ok) {
      if (stopAt < 0) confirmed.push(rows[i]!.seq);
      else {
        // The writer applied a row after an earlier one of its namespace failed: a contract breach.
        ctx.logger.warn(`drain: writer ${ctx.target.name} reported seq ${rows[i]!.seq} ok after a failure in namespace "${table.config.name}"; it stays queued`);
        break;
      }
    } else if (stopAt < 0) stopAt = i;
  }
  if (confirmed.length > 0) {
    try {
      table.outbox.confirm(confirmed);
    } catch (error) {
      // Delivered but not confirmed: the rows are redelivered (absorbed) later. Not the head's
      // fault, so its up-front charge is undone — a flaky local disk must not dead-letter rows.
      try {
        table.outbox.refundAttempt(rows[0]!.seq);
      } catch {}
      throw error;
    }
    outcome.delivered += confirmed.length;
  }
  if (stopAt < 0) return;
  const result = results[start + stopAt]! as Extract<WriteResult, { ok: false }>;
  const row = rows[stopAt]!;
  if (result.skipped) {
    // Not attempted: charge nothing. Only the head was charged up front.
    if (stopAt === 0) {
      table.outbox.refundAttempt(row.seq);
      table.outbox.clearSent(row.seq);
    }
    return;
  }
  const attempts = row.attempts + 1;
  if (stopAt > 0) table.outbox.recordAttempt(row.seq); // the prefix was confirmed: this row is the head now
  const message = typeof result.error === "string" && result.error ? result.error : "writer reported a failure without a message";
  const errorClass = typeof result.errorClass === "string" && result.errorClass ? result.errorClass : "unknown";
  outcome.failed += 1;
  if (chargeFailure(ctx, table, row.seq, attempts, message, errorClass)) outcome.deadLettered += 1;
}

/** Undoes the up-front charge of every head in a batch that never reached the remote (an outage). */
export function refundBatch(ctx: TargetContext, plan: PlannedBatch): void {
  for (const slice of plan.slices) {
    try {
      slice.table.outbox.refundAttempt(slice.rows[0]!.seq);
    } catch (error) {
      ctx.logger.error(`drain: local error refunding seq ${slice.rows[0]!.seq} of namespace "${slice.table.config.name}": ${describeError(error).message}`);
    }
  }
}
