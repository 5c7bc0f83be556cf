import { UnsupportedStatementError } from "../errors.ts";
import type { OutboxRow } from "../outbox/outbox.ts";
import { decodeArgs } from "../outbox/payload.ts";
import { parseTimestamp } from "../outbox/timestamp.ts";
import type { Statement } from "../writers/writer.ts";
import { rowBackoffMs } from "./backoff.ts";
import { clearLocalHold, describeError, holdAfterLocalError, type ServedTable, type TargetContext } from "./context.ts";
import { resequenceAboveRemote } from "./resequence.ts";
import { tableReadiness } from "./scheduler.ts";

/** The rows of one namespace in a batch: `stmts[start .. start+rows.length)`; the head was charged. */
export interface NamespaceSlice {
  table: ServedTable;
  rows: OutboxRow[];
  start: number;
}

/** One target's batch for one cycle. */
export interface PlannedBatch {
  stmts: Statement[];
  slices: NamespaceSlice[];
  /** Heads dead-lettered while planning (undecodable, unsupported, attempts exhausted). */
  deadLettered: number;
  /** Rows failed while planning (a rewrite that threw something unexpected). */
  failed: number;
  /** Work is known to be waiting right now (a full batch, a truncated batch): cycle again at once. */
  more: boolean;
  /** The earliest moment a table not ready now becomes ready (epoch ms), if known. */
  wakeAt: number | null;
}

const minWake = (a: number | null, b: number | null) => (a === null ? b : b === null ? a : Math.min(a, b));

/**
 * Collects every ready table of a target into one batch: up to `batch_size` rows per table, head
 * first, each decoded and rewritten for the target's dialect. A bad head (undecodable, unsupported,
 * out of attempts) is dead-lettered on the spot and the next row becomes the head; a bad row
 * behind a good one ends that table's slice so it is dealt with as the head of a later cycle.
 * Each slice's head is charged one attempt before delivery (crash-loop protection).
 */
export function planBatch(ctx: TargetContext): PlannedBatch {
  const plan: PlannedBatch = { stmts: [], slices: [], deadLettered: 0, failed: 0, more: false, wakeAt: null };
  const now = ctx.now();
  for (const table of ctx.tables) {
    if (table.awaitingLateAnswer) continue; // woken when the answer comes
    if (table.holdUntil > now) {
      plan.wakeAt = minWake(plan.wakeAt, table.holdUntil);
      continue;
    }
    try {
      planTable(ctx, table, now, plan);
      clearLocalHold(table);
    } catch (error) {
      // A local SQLite error (busy, disk, corruption) on this table: hold it, keep the others going.
      const ms = holdAfterLocalError(table, now);
      const { message } = describeError(error);
      ctx.logger.error(`drain: local error on namespace "${table.config.name}" (${table.file}), retrying in ${ms} ms: ${message}`);
      plan.wakeAt = minWake(plan.wakeAt, table.holdUntil);
    }
  }
  return plan;
}

function planTable(ctx: TargetContext, table: ServedTable, now: number, plan: PlannedBatch): void {
  const { outbox } = table;
  let head = outbox.head();
  if (!head) return;
  if (resequenceAboveRemote(ctx, table, head) > 0) head = outbox.head()!;
  const readiness = tableReadiness(head, outbox.pendingCount(), now, {
    threshold: ctx.app.tableFlushThreshold,
    maxWaitMs: ctx.app.tableMaxWait * 1000,
  });
  if (!readiness.ready) {
    plan.wakeAt = minWake(plan.wakeAt, readiness.wakeAt);
    return;
  }
  const batchSize = ctx.app.batchSize;
  const fetched = outbox.fetchUnsynced(batchSize);
  const rows = cutAtChainGap(ctx, table, fetched);
  // A full batch means more is waiting; a batch cut at a chain gap does not (the gap holds the table).
  if (fetched.length >= batchSize && rows.length === fetched.length) plan.more = true;

  const slice: NamespaceSlice = { table, rows: [], start: plan.stmts.length };
  const stmts: Statement[] = [];
  for (const row of rows) {
    const isHead = slice.rows.length === 0;
    if (!isHead && row.nextAttemptAt && (parseTimestamp(row.nextAttemptAt) ?? 0) > now) break; // backing off: wait to be head
    if (isHead && ctx.app.maxAttempts !== null && row.attempts >= ctx.app.maxAttempts) {
      // Attempts were recorded but never resolved: the drain died delivering this row, again and again.
      outbox.deadLetter(row.seq, "max_attempts", row.lastError ?? "attempts exhausted without a result (the drain stopped during delivery)", row.lastErrorClass);
      ctx.logger.error(`drain: dead-lettered seq ${row.seq} of namespace "${table.config.name}" after ${row.attempts} attempts`);
      plan.deadLettered += 1;
      plan.more = true;
      continue;
    }
    const stmt = prepareRow(ctx, table, row);
    if ("sql" in stmt) {
      slice.rows.push(row);
      stmts.push(stmt);
      continue;
    }
    plan.more = true;
    if (!isHead) break; // it becomes the head of a later cycle and is handled then
    if (stmt.reason) {
      outbox.deadLetter(row.seq, stmt.reason, stmt.message, stmt.errorClass);
      ctx.logger.error(`drain: dead-lettered seq ${row.seq} of namespace "${table.config.name}" (${stmt.reason}): ${stmt.message}`);
      plan.deadLettered += 1;
      continue;
    }
    chargeUnexpected(ctx, table, row, stmt.message, stmt.errorClass);
    plan.failed += 1;
    break;
  }
  if (slice.rows.length === 0) return;
  // Injected rows leave a high-water mark remotely: mark how far this batch goes, so a lost
  // outcome is settled by reconcileSent instead of a blind redelivery.
  const sentThrough = table.config.injectOutboxSeq ? slice.rows[slice.rows.length - 1]!.seq : null;
  outbox.recordAttempt(slice.rows[0]!.seq, new Date(now), sentThrough);
  plan.slices.push(slice);
  for (const s of stmts) plan.stmts.push(s);
}

type Prepared = Statement | { reason: "undecodable" | "unsupported_statement" | null; message: string; errorClass: string };

/** Decodes and rewrites one row; a refusal says whether it is final (dead-letter) or unexpected (charge). */
function prepareRow(ctx: TargetContext, table: ServedTable, row: OutboxRow): Prepared {
  let args;
  try {
    args = decodeArgs(row.payload);
  } catch (error) {
    return { reason: "undecodable", ...describeError(error) };
  }
  try {
    const out = ctx.rewrites.rewrite(row.tag, args, row.seq, table.config.injectOutboxSeq);
    return { sql: out.sql, args: out.args, namespace: table.config.name, seq: row.seq };
  } catch (error) {
    const described = describeError(error);
    if (error instanceof UnsupportedStatementError) return { reason: "unsupported_statement", ...described };
    return { reason: null, ...described };
  }
}

/** A head that failed for a reason we did not foresee counts as a failed attempt, never silently. */
function chargeUnexpected(ctx: TargetContext, table: ServedTable, row: OutboxRow, message: string, errorClass: string): void {
  const attempts = row.attempts + 1;
  table.outbox.recordAttempt(row.seq);
  chargeFailure(ctx, table, row.seq, attempts, message, errorClass);
}

/**
 * Records a failed attempt of the head `seq` (already charged: `attempts` includes it): backs it
 * off `2^attempts` units, or dead-letters it once `max_attempts` is reached. Returns true if dead-lettered.
 */
export function chargeFailure(ctx: TargetContext, table: ServedTable, seq: number, attempts: number, message: string, errorClass: string): boolean {
  const { app } = ctx;
  const now = ctx.now();
  const delay = rowBackoffMs(attempts, app.backoffUnitSeconds, app.backoffCapMinutes);
  table.outbox.recordFailure(seq, message, errorClass, new Date(now + delay));
  const name = table.config.name;
  if (app.maxAttempts !== null && attempts >= app.maxAttempts) {
    table.outbox.deadLetter(seq, "max_attempts", message, errorClass);
    ctx.logger.error(`drain: dead-lettered seq ${seq} of namespace "${name}" on target ${ctx.target.name} after ${attempts} attempts: ${message}`);
    return true;
  }
  ctx.logger.warn(`drain: seq ${seq} of namespace "${name}" failed on target ${ctx.target.name} (attempt ${attempts}${app.maxAttempts === null ? "" : `/${app.maxAttempts}`}, retry in ${Math.round(delay)} ms): ${message}`);
  return false;
}

/** Keeps the rows before the first local chain gap; a gap at the head holds the namespace (logged once). */
function cutAtChainGap(ctx: TargetContext, table: ServedTable, rows: OutboxRow[]): OutboxRow[] {
  if (rows.length === 0) return rows;
  const chain = table.outbox.verifyChain(rows);
  if (chain.ok) {
    table.reportedGap = null;
    return rows;
  }
  const first = Math.min(...chain.gaps.map((g) => g.seq));
  const kept = rows.filter((r) => r.seq < first);
  if (kept.length === 0 && table.reportedGap !== first) {
    table.reportedGap = first;
    const gap = chain.gaps.find((g) => g.seq === first)!;
    ctx.logger.error(
      `drain: namespace "${table.config.name}" (${table.file}) is held: seq ${gap.seq} links to prev_seq ${gap.prevSeq}, which is neither pending, delivered nor dead-lettered (a lost row). Run \`sqloutbox verify\`; see Recovery.`,
    );
  }
  return kept;
}
