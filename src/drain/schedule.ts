import { parseTimestamp } from "../outbox/timestamp.ts";
import { realScheduler } from "../scheduler.ts";

/**
 * The delay after `failures` (≥ 1) failures in a row: `firstMs`, doubled for each failure after
 * the first, capped at `capMs`. Every retry schedule of the drain is one of these.
 */
export function doublingMs(failures: number, firstMs: number, capMs: number): number {
  // 2^exponent overflows to Infinity long before it matters; min() keeps the cap exact.
  return Math.max(0, Math.min(firstMs * 2 ** Math.min(Math.max(0, failures - 1), 1000), capMs));
}

/**
 * Delay before a head that has failed `attempts` times is tried again: `2^attempts × unitMs`,
 * capped at `capMs`. `unitMs` is 60 000 in production, tiny in tests.
 */
export function rowBackoffMs(attempts: number, unitMs: number, capMs: number): number {
  return doublingMs(attempts + 1, unitMs, capMs);
}

/** The first retry of a target that just went down comes after one second. */
const FIRST_OUTAGE_RETRY_MS = 1000;

/**
 * Delay before a target that has failed `outages` times in a row (≥ 1) is tried again: one
 * second doubling, capped at `capMs`, then jittered to between half and all of that. A fleet of
 * drains that lost one database must not come back in lock step, and the cap — minutes, not the
 * hour a row may wait — bounds how late delivery resumes after the remote is back. `random`
 * returns [0, 1): the drain's scheduler's (the process's Math.random by default; tests pass a fixed one).
 */
export function outageBackoffMs(outages: number, capMs: number, random: () => number = realScheduler.random): number {
  const ms = doublingMs(outages, FIRST_OUTAGE_RETRY_MS, capMs);
  return ms / 2 + (random() * ms) / 2;
}

/** The scheduling knobs of one app. */
export interface ScheduleKnobs {
  /** Pending rows that make a table ready at once (`table_flush_threshold`). */
  threshold: number;
  /** How long the oldest pending row may wait before its table is flushed anyway (`table_max_wait`). */
  maxWaitMs: number;
}

/** Whether a table should go into this cycle's batch, and if not, when to look again (epoch ms). */
export interface TableReadiness {
  ready: boolean;
  wakeAt: number | null;
}

/** The head fields readiness depends on (timestamps as stored: ISO-8601). */
export interface HeadTiming {
  createdAt: string;
  nextAttemptAt: string | null;
}

/**
 * A table is ready when its head is not backing off and either `pending ≥ threshold` or the
 * head (the oldest pending row) has waited `maxWaitMs`. A head backing off holds the whole table.
 * `awaited`: a group that spans tables waits at this table's head, so neither the threshold nor
 * the wait applies — but its backoff does: the group is the head of every table it spans, and a
 * failure charged in one of them must hold all of it, or the others resend it at once. `lanes`:
 * the table has lanes, and a head backing off holds its lane only (the planner keeps it back).
 */
export function tableReadiness(
  head: HeadTiming | null,
  pending: number,
  nowMs: number,
  knobs: ScheduleKnobs,
  awaited = false,
  lanes = false,
): TableReadiness {
  if (!head || pending <= 0) return { ready: false, wakeAt: null };
  if (head.nextAttemptAt && !lanes) {
    const next = parseTimestamp(head.nextAttemptAt);
    if (next !== null && next > nowMs) return { ready: false, wakeAt: next };
  }
  if (awaited || pending >= knobs.threshold) return { ready: true, wakeAt: null };
  const created = parseTimestamp(head.createdAt);
  // An unparsable created_at must not hold the row forever: deliver it now.
  if (created === null) return { ready: true, wakeAt: null };
  const due = created + knobs.maxWaitMs;
  return due <= nowMs ? { ready: true, wakeAt: null } : { ready: false, wakeAt: due };
}

/** The earlier of two wake times (epoch ms); null: none. */
export function minWake(a: number | null, b: number | null): number | null {
  return a === null ? b : b === null ? a : Math.min(a, b);
}
