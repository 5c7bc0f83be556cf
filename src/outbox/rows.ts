/** The columns an event keeps wherever it is: pending in `outbox_queue` or moved to `outbox_dead_log`. */
export interface StoredEvent {
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
  /**
   * The row's group: the seq of the first row of the local transaction that wrote it (a
   * `pushMany`, an `outbox.transaction`); null for a row enqueued alone (and every row of the
   * reference's). A group is delivered whole, in one remote transaction, or not at all.
   */
  grp: number | null;
  /** The W3C trace context the row was pushed in, if any. */
  traceparent: string | null;
  tracestate: string | null;
  /** The key the row was pushed with (its text, see lane-key.ts); null when none. */
  laneKey: string | null;
  /**
   * The tenant the row was pushed for (see src/tenant.ts): its database on a tenant template target; null
   * when none.
   */
  tenant: string | null;
}

/** One pending event of a namespace, as stored in `outbox_queue`. */
export interface OutboxRow extends StoredEvent {
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

/**
 * What the remote may have done with a dead letter's row. "not applied": it never applied it, and
 * no batch that carried it can still commit — a replay is safe. "in doubt": a batch that carried it
 * got no answer (a timeout, a connection lost after COMMIT, a crash) and may have committed, or may
 * still; the drain settles it when it can, and a replay waits for that (or is forced). "applied":
 * the remote applied it after it was dead-lettered — a replay would apply it twice: it is never
 * replayed, only discarded or purged.
 */
export type LetterRemote = "not applied" | "in doubt" | "applied";

/** A row moved to `outbox_dead_log`: the original row plus why and when, and its replay, if any. */
export interface DeadLetter extends StoredEvent {
  error: string | null;
  errorClass: string | null;
  reason: DeadReason;
  deadAt: string;
  replayedAt: string | null;
  replayedAsSeq: number | null;
  /** What the remote may have done with it (see LetterRemote). */
  remote: LetterRemote;
}

/** SELECT list of a StoredEvent, the same in outbox_queue and outbox_dead_log. */
const EVENT_COLUMNS =
  "seq, namespace, source, tag, payload, prev_seq AS prevSeq, created_at AS createdAt, attempts, grp, traceparent, tracestate, lane_key AS laneKey, tenant";

/** SELECT list producing an OutboxRow from outbox_queue. */
export const QUEUE_ROW_COLUMNS = `${EVENT_COLUMNS}, last_error AS lastError, last_error_class AS lastErrorClass,
  last_attempt_at AS lastAttemptAt, next_attempt_at AS nextAttemptAt, sent_through AS sentThrough`;

/**
 * A letter's LetterRemote as a SELECT expression: stored NULL (not applied), 'in doubt' or
 * 'applied'; a file of an earlier version, read without migrating it, has no such column and no
 * letter that says otherwise (`stored` false).
 */
export function remoteColumn(stored = true): string {
  return `${stored ? "coalesce(remote, 'not applied')" : "'not applied'"} AS remote`;
}

/** SELECT list producing a DeadLetter from outbox_dead_log (`remote` stored: see remoteColumn). */
export function deadRowColumns(remote = true): string {
  return `${EVENT_COLUMNS}, error, error_class AS errorClass, reason, dead_at AS deadAt,
  replayed_at AS replayedAt, replayed_as_seq AS replayedAsSeq, ${remoteColumn(remote)}`;
}

/** SELECT list producing a DeadLetter from outbox_dead_log, in a file opened for writing (migrated). */
export const DEAD_ROW_COLUMNS = deadRowColumns();
