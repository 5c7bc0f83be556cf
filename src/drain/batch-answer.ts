import type { AppConfig, TargetConfig } from "../config/types.ts";
import { describeError } from "../errors.ts";
import type { Scheduler } from "../scheduler.ts";
import type { Dialect } from "../vocabulary.ts";
import type { WriteResult } from "../writers/writer.ts";
import {
  answersOf,
  attemptsOfGroups,
  batchBytes,
  LARGE_BATCH_BYTES,
  type PlanReport,
  type SentBatch,
} from "./batch-plan.ts";
import type { DeliveryObserver, ObservedBatch } from "./observer.ts";
import type { DrainTable } from "./table/table.ts";

/** What one cycle of one target did. */
export interface TargetCycle extends PlanReport {
  target: string;
  delivered: number;
  /** The target was down this cycle (or is still backing off from an outage). */
  outage: boolean;
}

/** A batch the target answered and whose answer was applied: what it carried, how long it took, what moved. */
export interface AnsweredBatch {
  /** Each slice's table, whether the ledger fenced it, and how many of its rows were delivered. */
  slices: ReadonlyArray<{ table: DrainTable; fenced: boolean; delivered: number }>;
  rows: number;
  /** Rows delivered, failed or dead-lettered by the answer. */
  moved: number;
  /** From being sent to being answered (ms). */
  durationMs: number;
}

/**
 * What a batch's answer means beyond its tables, for whoever runs the loop, the setup, the fleet
 * view and the metrics (the target's runner).
 */
export interface DeliveryHooks {
  /** The next cycle looks at these tables (an answer changed them, or their rows moved). */
  changed(tables: DrainTable[]): void;
  /** Nothing moved: commits do not wake the loop before this (epoch ms, the drain's clock). */
  quiet(until: number): void;
  /** A fence found the ledger missing: setup runs again before the next batch. */
  ledgerMissing(): void;
  /** A timed-out batch answered or failed late: its tables may go again, at once. */
  lateAnswered(): void;
  /** A batch was answered and applied (the fleet view, the metrics, the log, the prune follow it). */
  answered(batch: AnsweredBatch): void;
}

/** Who a batch's answer is told to: the target's name, the observer, the hooks, and the batch planner's read-ahead. */
export interface AnswerParts {
  /** The target's name (with a tenant template, `target[tenant]`). */
  name: string;
  app: AppConfig;
  target: TargetConfig;
  dialect: Dialect;
  observer: DeliveryObserver | null;
  hooks: DeliveryHooks;
  now: () => number;
  /** The elapsed clock a batch's `started` is read from. */
  scheduler: Scheduler;
  /** Another table's rows moved (a dead-lettered group spanning tables): what it read ahead is stale. */
  forgetReadAhead(tables: string[] | undefined): void;
}

/** The batch as an observer sees it, told just before it is sent (null: nobody listens). */
export function observeSent(batch: SentBatch, parts: AnswerParts): ObservedBatch | null {
  const { app, target, name, dialect, observer, now } = parts;
  if (observer === null) return null;
  // The head was charged when its slice was opened: its stored count is the attempts before this one.
  const attempt = Math.max(1, ...batch.slices.map((s) => s.rows[0]!.attempts + 1));
  const observed: ObservedBatch = {
    app: app.name,
    target: name,
    engine: target.writer ?? target.writerClass ?? "custom",
    dialect,
    slices: batch.slices.map((s) => ({ table: s.table.name, rows: s.rows })),
    statements: batch.stmts.length,
    bytes: batchBytes(batch),
    attempt,
    sentAt: now(),
  };
  observer.batchSent(observed);
  return observed;
}

/**
 * A batch that got no answer: its heads are refunded, and fenced tables settle from the ledger (it may have
 * committed).
 */
export function batchLost(batch: SentBatch, observed: ObservedBatch | null, error: unknown, parts: AnswerParts): void {
  for (const slice of batch.slices) {
    slice.table.refundOutage(slice);
    if (slice.fenced) slice.table.unsettle(slice.rows[0]!.tenant); // it may have committed: the ledger will say
  }
  if (observed !== null) parts.observer!.batchLost(observed, describeError(error), parts.now());
}

/**
 * Applies a batch's answer to each of its tables (`out` counts what moved), checks that units were
 * applied whole, and tells the observer and the hooks; a batch that moved nothing quiets the loop.
 */
export function applyAnswered(
  batch: SentBatch,
  results: WriteResult[],
  observed: ObservedBatch | null,
  started: number,
  out: TargetCycle,
  parts: AnswerParts,
): AnsweredBatch {
  const { hooks, now } = parts;
  // What an answer did (a cut, a hold, a charge, a confirmation) shows at the table's next plan: the next
  // cycle looks at these.
  hooks.changed(batch.slices.map((sl) => sl.table));
  const attempts = attemptsOfGroups(batch.units);
  const slices: Array<AnsweredBatch["slices"][number]> = [];
  const answered: AnsweredBatch = { slices, rows: 0, moved: 0, durationMs: parts.scheduler.elapsed() - started };
  /** Tables whose rows an answer before dead-lettered, with a group that spans tables. */
  const touched = new Set<string>();
  for (const slice of batch.slices) {
    const answers = answersOf(batch, slice, results);
    const answer = slice.table.applyAnswer(slice, answers, now(), attempts, touched.has(slice.table.name));
    for (const t of answer.touched ?? []) touched.add(t);
    slices.push({ table: slice.table, fenced: slice.fenced, delivered: answer.delivered });
    answered.rows += slice.rows.length;
    answered.moved += answer.delivered + answer.failed + answer.deadLettered;
    out.delivered += answer.delivered;
    out.failed += answer.failed;
    out.deadLettered += answer.deadLettered;
    out.more ||= answer.more;
    if (answer.readOn) out.readOn = true;
    if (answer.ledgerMissing) hooks.ledgerMissing();
    parts.forgetReadAhead(answer.touched);
  }
  checkUnits(batch, results, parts);
  if (observed !== null)
    parts.observer!.batchAnswered(
      observed,
      slices.map((s) => s.delivered),
      now(),
    );
  hooks.answered(answered);
  // The remote answered but nothing moved (every head "skipped"): our own bookkeeping commits
  // would wake the watcher at once, so wait a full flush_interval instead.
  if (answered.moved === 0) hooks.quiet(now() + parts.app.flushIntervalMs);
  // Large rows: give their strings back now, so the next batch does not stack on this one's
  // garbage and the drain's memory stays bounded by batch_max_bytes, not by the backlog. A full
  // collection: strings that large live in the old generation, which a minor one leaves alone.
  if (batchBytes(batch) > LARGE_BATCH_BYTES) Bun.gc(true);
  return answered;
}

/**
 * A unit of linked tables must have been applied all together or not at all. A writer that
 * applied part of one (one table's slice whole, another's not) broke the contract (Statement.unit):
 * half a transaction is on the remote, and every table of the unit is held, loudly.
 */
function checkUnits(batch: SentBatch, results: WriteResult[], parts: AnswerParts): void {
  for (const unit of batch.units) {
    const applied = unit.map((slice) => answersOf(batch, slice, results).every((r) => r.ok));
    if (applied.every((a) => a) || applied.every((a) => !a)) continue;
    const names = unit.map((s) => `"${s.table.name}"`).join(", ");
    const message = `the writer of ${parts.name} applied part of a transaction spanning ${names}: with ledger = true a writer must apply statements that share a unit (Statement.unit) all together or not at all`;
    for (const slice of unit) slice.table.hold({ reason: "writer contract", message }, parts.now());
  }
}

/**
 * "Cycle again at once" only after progress: a writer that keeps answering `skipped` for a head
 * (or any other no-op outcome) must not turn the loop into a hot spin against the remote. A read
 * that moved on past held lanes is progress too (it never moves back without a new cause).
 */
export function noSpin(out: TargetCycle): TargetCycle {
  if (out.more && out.delivered + out.failed + out.deadLettered === 0 && !out.readOn) out.more = false;
  return out;
}
