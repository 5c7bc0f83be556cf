import type { OutboxRow } from "../../outbox/outbox.ts";
import type { WriteResult } from "../../writers/writer.ts";
import { startOfGroup } from "./row-groups.ts";

/** A failed result as the writer gave it. */
export type Failure = Extract<WriteResult, { ok: false }>;

/**
 * What a target's answer for one table's slice says, decided from the answer alone. Indexes are
 * into the slice's rows. `okAfterFailure`: a row the writer reported applied behind a failure —
 * impossible for a writer that keeps its contract; it stays queued, and is worth a warning.
 */
export type Answer =
  /** Every row applied (and the fence, if any, moved): confirm them all. */
  | { kind: "applied" }
  /**
   * The fence failed: another transaction moved the ledger row (a late commit, another drain). Settle from
   * the ledger.
   */
  | { kind: "fence-moved"; fence: Failure }
  /** The fence failed because the ledger table is missing or unusable: hold the table for the schema. */
  | { kind: "ledger-unusable"; fence: Failure }
  /** Fenced, yet a fence or rows `[0, applied)` applied and the rest failed: the writer broke the ledger's contract. */
  | { kind: "contract-broken"; applied: number }
  /**
   * Without a ledger, rows `[0, applied)` applied (a writer committing statement by statement):
   * confirm them. `failedAt` is the row that failed right behind them, the head now, or null when
   * the rest was skipped (sent again next cycle).
   */
  | {
      kind: "prefix-applied";
      applied: number;
      failedAt: number | null;
      failure: Failure | null;
      okAfterFailure: number | null;
    }
  /**
   * The head group (of its lanes: it starts at row `groupStart`) failed at row `failedAt` (its whole group
   * rolled back): charge the group.
   */
  | { kind: "head-failed"; groupStart: number; failedAt: number; failure: Failure; okAfterFailure: number | null }
  /**
   * A group behind the head failed (starting at row `groupStart`): the groups before it go first, nothing is
   * charged.
   */
  | { kind: "failed-behind-head"; groupStart: number; okAfterFailure: number | null }
  /** Nothing was tried: every statement skipped (another unit's failure rolled them back). */
  | { kind: "not-tried" };

/**
 * Classifies the answer `results` for a slice of `rows`: when `fenced`, its first result is the
 * ledger's fence, the rows' follow. `leads(groupStart)`: whether the
 * group that starts at that row is the first of its lanes in the slice — the head, whose failure
 * is charged; by default only the slice's first group is (a table of one lane). Pure: the same
 * slice and answer always give the same Answer.
 */
export function classifyAnswer(
  rows: ReadonlyArray<Pick<OutboxRow, "grp">>,
  fenced: boolean,
  results: readonly WriteResult[],
  leads: (groupStart: number) => boolean = (groupStart) => groupStart === 0,
): Answer {
  const fence = fenced ? results[0]! : null;
  if (fence !== null && !fence.ok && !fence.skipped)
    return fence.remoteSchema ? { kind: "ledger-unusable", fence } : { kind: "fence-moved", fence };
  const answers = fenced ? results.slice(1) : results;
  let applied = 0;
  while (applied < answers.length && answers[applied]!.ok) applied++;
  if (applied === rows.length) return { kind: "applied" };
  // Fenced, a failed namespace must come back with its fence rolled back (skipped) too: a fence
  // reported applied beside a row that was not may have committed the ledger past that row.
  if (fence !== null && (applied > 0 || fence.ok)) return { kind: "contract-broken", applied };
  const failedAt = answers.findIndex((r) => !r.ok && !r.skipped);
  const okAfterFailure = failedAt < 0 ? null : indexOrNull(answers.findIndex((r, i) => i > failedAt && r.ok));
  const failure = failedAt < 0 ? null : (answers[failedAt] as Failure);
  if (applied > 0) {
    const headNow = failedAt === applied;
    return {
      kind: "prefix-applied",
      applied,
      failedAt: headNow ? failedAt : null,
      failure: headNow ? failure : null,
      okAfterFailure,
    };
  }
  if (failedAt < 0) return { kind: "not-tried" };
  // The group the failed row belongs to fails whole: its rows were rolled back with it.
  const groupStart = startOfGroup(rows, failedAt);
  if (!leads(groupStart)) return { kind: "failed-behind-head", groupStart, okAfterFailure };
  return { kind: "head-failed", groupStart, failedAt, failure: failure!, okAfterFailure };
}

function indexOrNull(i: number): number | null {
  return i < 0 ? null : i;
}

/**
 * How many of a slice's rows (of `count`) an answer says committed, for what the remote did with
 * its dead letters: all or none with a ledger, a first part without; null when the answer cannot
 * say (a writer that broke its contract: its fence may have committed).
 */
export function committedRows(answer: Answer, count: number): number | null {
  switch (answer.kind) {
    case "applied":
      return count;
    case "prefix-applied":
      return answer.applied;
    case "contract-broken":
      return null;
    default:
      return 0;
  }
}
