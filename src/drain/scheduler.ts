import { parseTimestamp } from "../outbox/timestamp.ts";

/** The scheduling knobs of one app, in milliseconds. */
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
 */
export function tableReadiness(head: HeadTiming | null, pending: number, nowMs: number, knobs: ScheduleKnobs): TableReadiness {
  if (!head || pending <= 0) return { ready: false, wakeAt: null };
  if (head.nextAttemptAt) {
    const next = parseTimestamp(head.nextAttemptAt);
    if (next !== null && next > nowMs) return { ready: false, wakeAt: next };
  }
  if (pending >= knobs.threshold) return { ready: true, wakeAt: null };
  const created = parseTimestamp(head.createdAt);
  // An unparsable created_at must not hold the row forever: deliver it now.
  if (created === null) return { ready: true, wakeAt: null };
  const due = created + knobs.maxWaitMs;
  return due <= nowMs ? { ready: true, wakeAt: null } : { ready: false, wakeAt: due };
}
