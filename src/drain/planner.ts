import { describeError, InvalidArgumentError, UnsupportedStatementError } from "../errors.ts";
import type { DeadReason, OutboxRow } from "../outbox/outbox.ts";
import { parseTimestamp } from "../outbox/timestamp.ts";
import type { Statement } from "../writers/writer.ts";
import { groupStarts } from "./row-groups.ts";

/** What a table's slice is planned from: the rows read for it and what holds them back. */
export interface PlanInput {
  /** Pending rows read for delivery, whole groups, in seq order; the planner takes them over (their text moves into `stmts`). */
  rows: OutboxRow[];
  /** The groups among `rows` that span tables: group → the tables it touches. */
  spans: ReadonlyMap<number, readonly string[]>;
  /** More rows are pending behind `rows` (the read stopped at its limit, its byte budget or a chain gap). */
  more: boolean;
  /**
   * `head`: `rows` start at the table's head, whose group is dealt with here (dead-lettered when
   * it can never go, charged when it fails to convert). `after`: they follow a slice in flight
   * (read ahead), so none is the head and a group with a history ends the plan (it is decided
   * when it heads the table).
   */
  position: "head" | "after";
  /** A row behind the head failed last time: the slice stops before it, unless it heads the table. */
  cutBefore: number | null;
  nowMs: number;
  /** A head that has had this many attempts is dead-lettered (null: never). */
  maxAttempts: number | null;
  /** Converts one row into the statement sent for it; throws UnsupportedStatementError, InvalidArgumentError or anything else. */
  prepare(row: OutboxRow): Statement;
}

/** A table's slice as planned: its rows and statements, whole groups, head first. */
export interface SlicePlan {
  rows: OutboxRow[];
  stmts: Statement[];
  /** SQL text and payload of each row, in characters: what the batch's byte budget counts. */
  rowBytes: number[];
  /** Their sum. */
  bytes: number;
  /** More rows were ready behind them. */
  more: boolean;
  /** The groups among `rows` that span tables: group → the tables it touches (this one included). */
  spans: Map<number, string[]>;
}

/** A head group that can never go: dead-lettered whole before the slice (the next group heads the table then). */
export interface HeadDeadLetter {
  row: OutboxRow;
  reason: DeadReason;
  message: string;
  errorClass: string;
  /** It ran out of attempts that were charged but never answered (the drain died delivering it). */
  exhausted: boolean;
}

/** What planning decided: the slice (null: nothing to send), and what happens to the head. */
export interface Plan {
  slice: SlicePlan | null;
  /** Head groups to dead-letter first, in order. */
  deadLetters: HeadDeadLetter[];
  /** The head group failed to convert for a reason nobody foresaw: charged one attempt, never silently. */
  charge: { row: OutboxRow; message: string; errorClass: string } | null;
  /** The cut was reached at the head: the group there heads the table now (forget the cut). */
  cutPassed: boolean;
  /** Plan again at once: a head was dealt with, a group refused to convert, or more is ready behind the slice. */
  more: boolean;
}

/**
 * Plans one table's slice from the rows read for it: group by group, whole groups only, until a
 * group must wait — one behind the cut, one backing off (the head's backoff was read already:
 * readiness), one that cannot be converted — while a head group that can never go (out of
 * attempts, undecodable, an unsupported statement) is dead-lettered and the next one heads the
 * table. Pure: no I/O, the same input gives the same plan; the table carries it out.
 */
export function planSlice(input: PlanInput): Plan {
  const { rows, nowMs, maxAttempts } = input;
  const plan: Plan = { slice: null, deadLetters: [], charge: null, cutPassed: false, more: false };
  const slice: SlicePlan = { rows: [], stmts: [], rowBytes: [], bytes: 0, more: input.more, spans: new Map() };
  const atHead = () => input.position === "head" && slice.rows.length === 0;
  const starts = groupStarts(rows);
  for (let g = 0; g < starts.length; g++) {
    const group = rows.slice(starts[g], starts[g + 1] ?? rows.length);
    const first = group[0]!;
    const isHead = atHead();
    if (input.cutBefore !== null && first.seq >= input.cutBefore && !plan.cutPassed) {
      if (!isHead) break;
      plan.cutPassed = true; // the groups before it went: it heads the table now
    }
    if (input.position === "after" && (first.attempts > 0 || first.nextAttemptAt)) {
      slice.more = true; // it follows: the next plan sees it at the head
      break;
    }
    if (!isHead && backingOff(first, nowMs)) break; // it waits to be head
    if (isHead && maxAttempts !== null && first.attempts >= maxAttempts) {
      const message = first.lastError ?? "attempts exhausted without a result (the drain stopped during delivery)";
      const errorClass = first.lastErrorClass ?? "max_attempts";
      plan.deadLetters.push({ row: first, reason: "max_attempts", message, errorClass, exhausted: true });
      plan.more = true;
      continue;
    }
    const converted = convert(group, input.prepare);
    if ("refused" in converted) {
      slice.more = plan.more = true;
      if (!isHead) break; // it heads a later plan, and is dealt with then
      const { row, error } = converted.refused;
      const { message, errorClass } = describeError(error);
      const text = `${group.length > 1 ? `seq ${row.seq} of the group of seq ${first.seq}: ` : ""}${message}`;
      if (error instanceof UnsupportedStatementError || error instanceof InvalidArgumentError) {
        const reason = error instanceof UnsupportedStatementError ? "unsupported_statement" : "undecodable";
        plan.deadLetters.push({ row: first, reason, message: text, errorClass, exhausted: false });
        continue;
      }
      plan.charge = { row: first, message: text, errorClass };
      break;
    }
    take(slice, group, converted.stmts, input.spans);
  }
  if (slice.rows.length > 0) plan.slice = slice;
  plan.more ||= slice.more && plan.slice !== null;
  return plan;
}

/** Whether `row`'s retry time is still to come. */
function backingOff(row: OutboxRow, nowMs: number): boolean {
  return row.nextAttemptAt !== null && (parseTimestamp(row.nextAttemptAt) ?? 0) > nowMs;
}

/** A group's statements, or the row that refused to convert and why. */
function convert(
  group: OutboxRow[],
  prepare: PlanInput["prepare"],
): { stmts: Statement[] } | { refused: { row: OutboxRow; error: unknown } } {
  const stmts: Statement[] = [];
  for (const row of group) {
    try {
      stmts.push(prepare(row));
    } catch (error) {
      return { refused: { row, error } };
    }
  }
  return { stmts };
}

/** Adds a converted group to the slice; a row's text lives on in its statement only, so a large row is held once. */
function take(
  slice: SlicePlan,
  group: OutboxRow[],
  stmts: Statement[],
  spans: ReadonlyMap<number, readonly string[]>,
): void {
  for (let i = 0; i < group.length; i++) {
    const row = group[i]!;
    const bytes = row.tag.length + row.payload.length;
    row.tag = row.payload = "";
    slice.rows.push(row);
    slice.stmts.push(stmts[i]!);
    slice.rowBytes.push(bytes);
    slice.bytes += bytes;
    const span = row.grp === null ? undefined : spans.get(row.grp);
    if (span !== undefined) slice.spans.set(row.grp!, [...span]);
  }
}
