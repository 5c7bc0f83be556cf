/** One pending event of a namespace, as stored in `outbox_queue`. */
export interface OutboxRow {
  seq: number;
  namespace: string;
  source: string;
  /** For SQL events: the SQL text. */
  tag: string;
  /** For SQL events: the JSON array of bind arguments (see payload.ts). */
  payload: string;
  /** The namespace's previous row (pending, delivered or dead-lettered); null for a chain start. */
  prevSeq: number | null;
  /** created_at as stored (ISO-8601, `+00:00`). */
  createdAt: string;
  /** Delivery attempts charged to this row (recorded before each delivery). */
  attempts: number;
  lastError: string | null;
  lastErrorClass: string | null;
  lastAttemptAt: string | null;
  nextAttemptAt: string | null;
  /** Set on the head while the batch it was sent in (through this seq) has an unknown outcome. */
  sentThrough: number | null;
}

/** A row whose `prevSeq` exists nowhere: not pending, not delivered (sync log), not dead-lettered. */
export interface ChainGap {
  seq: number;
  prevSeq: number;
}

/** Why a row was dead-lettered; the drain and operators may add their own reasons. */
export type DeadReason = "max_attempts" | "undecodable" | "unsupported_statement" | "skipped" | (string & {});

/** A row moved to `outbox_dead_log`: the original row plus why and when, and its replay, if any. */
export interface DeadLetter {
  seq: number;
  namespace: string;
  source: string;
  tag: string;
  payload: string;
  prevSeq: number | null;
  createdAt: string;
  attempts: number;
  error: string | null;
  errorClass: string | null;
  reason: DeadReason;
  deadAt: string;
  replayedAt: string | null;
  replayedAsSeq: number | null;
}

/** SELECT list producing an OutboxRow from outbox_queue. */
export const QUEUE_ROW_COLUMNS = `seq, namespace, source, tag, payload, prev_seq AS prevSeq, created_at AS createdAt,
  attempts, last_error AS lastError, last_error_class AS lastErrorClass,
  last_attempt_at AS lastAttemptAt, next_attempt_at AS nextAttemptAt, sent_through AS sentThrough`;

/** SELECT list producing a DeadLetter from outbox_dead_log. */
export const DEAD_ROW_COLUMNS = `seq, namespace, source, tag, payload, prev_seq AS prevSeq, created_at AS createdAt,
  attempts, error, error_class AS errorClass, reason, dead_at AS deadAt,
  replayed_at AS replayedAt, replayed_as_seq AS replayedAsSeq`;
