import type { DrainQueue } from "../../outbox/drain-queue.ts";
import type { OutboxRow } from "../../outbox/outbox.ts";
import type { WriteResult } from "../../writers/writer.ts";
import { classifyAnswer, committedRows, type Failure } from "./answer.ts";
import { failureText, type HeadCharges } from "./charges.ts";
import type { TableDoubt } from "./doubt.ts";
import type { TableHolds } from "./holds.ts";
import type { TableLanes } from "./lanes.ts";
import { addCharged, type TableOutcome } from "./planning.ts";
import type { TableProgress } from "./progress.ts";
import type { GroupAttempts, TableSliceOf } from "./slice.ts";

/** What applying a table's answer works with: the table's parts (see wing.ts), and how it unsettles. */
export interface AnsweredParts {
  queue: () => DrainQueue;
  progress: TableProgress;
  lanes: TableLanes;
  charges: HeadCharges;
  holds: TableHolds;
  /** What the remote may have done with the rows of the table's dead letters (see TableDoubt). */
  doubt: TableDoubt;
  now: () => number;
  /**
   * Forgets the ledger view (of `tenant`, with a tenant template): the next batch settles first (see
   * DrainTable.unsettle).
   */
  unsettle: (tenant: string | null) => void;
  /** A tenant template's: `tenant`'s database lacks what a statement needs — that tenant is held, not the table. */
  tenantFault?: (tenant: string, message: string) => void;
}

/** The slice of a table an answer is for. */
type AnsweredSlice = Pick<TableSliceOf<unknown>, "rows" | "fenced" | "behind" | "lanes" | "spans">;

/**
 * Applies the target's answer for one table's slice, as answer.ts reads it: applied → progress
 * moves; a failed head → charged; a failed row behind the head → the next slice stops before it;
 * a remote schema fault → held, nothing charged; a fence that failed → settle from the ledger.
 * With lanes, anything but a slice applied whole sends the next read (of its tenant's rows) back
 * to the head. A local failure throws (the table holds itself for it).
 */
export function applyTableAnswer(
  parts: AnsweredParts,
  slice: AnsweredSlice,
  results: WriteResult[],
  now: number,
  groupAttempts: GroupAttempts,
  out: TableOutcome & { ledgerMissing: boolean },
  deadElsewhere = false,
): void {
  const { progress, lanes, holds } = parts;
  const queue = parts.queue();
  const { rows } = slice;
  const head = rows[0]!;
  const notApplied = () => {
    if (slice.lanes !== undefined) lanes.restart(head.tenant);
  };
  // Another table's answer to this batch dead-lettered the head's group, with its rows here: nothing to settle.
  if (deadElsewhere && head.grp !== null && !queue.holdsGroup(head.grp)) {
    notApplied();
    return;
  }
  const answer = classifyAnswer(rows, slice.fenced, results, lanes.count === 1 ? undefined : lanes.leads(rows));
  // Whatever follows, what it carried is known now: a dead letter it carried was applied or not.
  parts.doubt.answered(slice, committedRows(answer, rows.length));
  if (slice.behind !== undefined && !progress.asExpected(slice.behind)) {
    // The slice ahead of it did not leave the ledger where its fence expects (it failed, was
    // lost, or could not be confirmed): it committed only if the ledger says so.
    notApplied();
    queue.refundAttempt(head.seq);
    parts.unsettle(head.tenant);
    out.more = true;
    return;
  }
  if (answer.kind !== "applied") notApplied();
  if ("okAfterFailure" in answer && answer.okAfterFailure !== null)
    parts.charges.okAfterFailure(rows[answer.okAfterFailure]!);
  switch (answer.kind) {
    case "applied":
      if (slice.fenced && slice.lanes !== undefined) progress.appliedLanes(rows, slice.lanes);
      else if (slice.fenced) progress.appliedWhole(rows);
      else progress.confirm(rows[rows.length - 1]!.seq);
      holds.release("remote schema");
      out.delivered = rows.length;
      return;
    case "ledger-unusable":
      queue.refundAttempt(head.seq);
      parts.unsettle(head.tenant);
      out.ledgerMissing = out.more = true;
      schemaFault(parts, head, `the ledger is not usable: ${answer.fence.error}`, now);
      return;
    case "fence-moved":
      queue.refundAttempt(head.seq);
      progress.fenceMoved(slice.behind !== undefined, answer.fence);
      parts.unsettle(head.tenant);
      out.more = true;
      return;
    case "contract-broken":
      // Its fence may have committed for rows that were not applied: stop, loudly, rather than guess.
      parts.unsettle(head.tenant);
      holds.partlyApplied(answer.applied === 0 ? null : [head.seq, rows[answer.applied - 1]!.seq], now);
      return;
    case "prefix-applied": {
      // Without a ledger a writer may commit statement by statement: part of a group, perhaps.
      progress.confirm(rows[answer.applied - 1]!.seq);
      out.delivered = answer.applied;
      if (answer.failedAt === null) return; // the rest was skipped: sent again next cycle
      const failed = rows[answer.failedAt]!;
      queue.recordAttempt(failed.seq, new Date(now)); // the failed row is the head now
      headFailed(parts, slice, failed, failed, answer.failure!, out, groupAttempts);
      return;
    }
    case "failed-behind-head":
      // Not the head's fault: the groups before the failed one go first, then it heads the table.
      queue.refundAttempt(head.seq);
      progress.cut(lanes.ofGroup(rows, answer.groupStart), rows[answer.groupStart]!.seq, head.tenant);
      out.more = out.readOn = true; // the rows before the cut go next, at once
      return;
    case "not-tried":
      queue.refundAttempt(head.seq);
      return;
    case "head-failed": {
      // With lanes the failed group may lead its lanes behind another's: that one's up-front charge goes back.
      const leader = rows[answer.groupStart]!;
      if (leader !== head) queue.refundAttempt(head.seq);
      headFailed(parts, slice, leader, rows[answer.failedAt]!, answer.failure, out, groupAttempts);
      return;
    }
  }
}

/**
 * The remote lacks what `head`'s statement needs (a table, a column, the ledger): the table is held — with a
 * tenant template, the head's tenant.
 */
function schemaFault(parts: AnsweredParts, head: OutboxRow, message: string, now: number): void {
  if (head.tenant !== null && parts.tenantFault) parts.tenantFault(head.tenant, message);
  else parts.holds.schema(message, now);
}

/**
 * The head group failed at `culprit`: charged (see HeadCharges.groupFailed), or the table held for the remote
 * schema.
 */
function headFailed(
  parts: AnsweredParts,
  slice: AnsweredSlice,
  head: OutboxRow,
  culprit: OutboxRow,
  failure: Failure,
  out: TableOutcome,
  attempts: GroupAttempts,
): void {
  const queue = parts.queue();
  if (failure.remoteSchema) {
    queue.refundAttempt(head.seq);
    schemaFault(parts, head, failureText(failure), parts.now());
    return;
  }
  const group = { rows: slice.rows, spans: slice.spans, attempts };
  addCharged(out, parts.charges.groupFailed(queue, { head, culprit, failure }, group));
  out.more = true; // re-plan: the next head may be ready
}
