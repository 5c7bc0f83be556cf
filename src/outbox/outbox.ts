import { type LaneKey, laneKeyText } from "../lane-key.ts";
import { tenantNameProblem } from "../tenant.ts";
import type { RowContext } from "./append.ts";
import type { DeadLettered } from "./dead-log.ts";
import type { DeadReplays, PurgeOutcome, PurgeRule } from "./dead-letters.ts";
import { fileHealth } from "./health.ts";
import { QueueView, SHARED, type OutboxOptions } from "./queue-view.ts";
import type { QueueDb } from "./queue-db.ts";
import type { ChainGap, DeadLetter, OutboxRow } from "./rows.ts";
import { Confirmation } from "./confirmation.ts";

export type { ChainGap, DeadLetter, DeadReason, OutboxRow } from "./rows.ts";
export type { Resequenced } from "./resequence.ts";
export type { DeadLettered } from "./dead-log.ts";
export type { OutboxOptions } from "./queue-view.ts";

/**
 * The head whose backoff `Outbox.retryHead` ended: its seq, the attempts it had, and when it was due
 * (null: its group's backoff was on another table's head).
 */
export interface RetriedHead {
  seq: number;
  attempts: number;
  nextAttemptAt: string | null;
}

/**
 * The local queue of one namespace in one SQLite file, as producers and operators use it: an
 * ordered, singly linked chain of events (`prev_seq`) that producers append to (append.ts) and
 * the drain delivers head first (its own face: drain-queue.ts), with the operator's work on dead
 * letters (dead-log.ts). Creates the file and schema (idempotent migrations) but not the
 * directory. Every failure throws a typed OutboxError.
 */
export class Outbox extends QueueView {
  /** Made on the first `confirm`: most applications never confirm rows themselves. */
  #confirmation: Confirmation | null = null;

  // ── producers ─────────────────────────────────────────────────────────────────────────────

  /**
   * Appends one event at the namespace tail and returns its seq: one write transaction that holds
   * the write lock from before the tail is read until the row is committed.
   */
  enqueue(tag: string, payload: string, source = "", trace?: RowContext): number {
    this.queueFile.ensureOpen();
    this.#checkItem(tag, payload, source);
    this.#checkTenant(trace?.tenant);
    this.queueFile.checkNotMoved();
    return this.appender.one(tag, payload, source, trace);
  }

  /**
   * Appends events in one transaction, as one group (delivered whole, in one remote transaction):
   * item 0 links to the tail, item i to item i−1's seq. Inside `transaction` they join its group.
   * `{ grouped: false }` commits them together but delivers each on its own (a bulk load of
   * independent events).
   */
  enqueueBatch(
    items: ReadonlyArray<{ tag: string; payload: string }>,
    source = "",
    options: { trace?: RowContext; grouped?: boolean } = {},
  ): number[] {
    this.queueFile.ensureOpen();
    if (!Array.isArray(items)) throw this.queueFile.invalid("enqueueBatch expects an array of { tag, payload }");
    this.#checkSource(source);
    this.#checkTenant(options.trace?.tenant);
    // A tag the item before had already passed: a batch of one statement's rows checks its text once.
    let passed: unknown = NOT_CHECKED;
    for (const item of items) {
      const tag = item?.tag;
      if (tag !== passed) this.#checkTag((passed = tag));
      this.#checkPayload(item?.payload);
    }
    this.queueFile.checkNotMoved();
    if (items.length === 0) return [];
    return this.appender.many(items, source, options.trace, options.grouped ?? true);
  }

  /**
   * Runs `fn` in one local transaction (BEGIN IMMEDIATE) of this outbox's file: everything it
   * enqueues — into any namespace of the file — is one group, committed together and delivered
   * together. `fn` must be synchronous; a nested call joins the open transaction.
   */
  transaction<T>(fn: () => T): T {
    this.queueFile.ensureOpen();
    return this.queueFile.queueDb.transaction(fn);
  }

  // ── reading the queue ─────────────────────────────────────────────────────────────────────

  /**
   * Checks that each row's `prevSeq` is the row before it in `rows`, or exists as a pending,
   * delivered (sync log) or dead-lettered row of this namespace. A null `prevSeq` starts a chain.
   */
  verifyChain(rows: readonly OutboxRow[]): { ok: boolean; gaps: ChainGap[] } {
    this.queueFile.ensureOpen();
    const gaps: ChainGap[] = [];
    this.queueFile.read("cannot verify chain", () => {
      for (let i = 0; i < rows.length; i++) {
        const row = rows[i]!;
        if (row.prevSeq === null || row.prevSeq === undefined) continue;
        if (i > 0 && rows[i - 1]!.seq === row.prevSeq) continue;
        if (!this.queueFile.exists(row.prevSeq)) gaps.push({ seq: row.seq, prevSeq: row.prevSeq });
      }
    });
    return { ok: gaps.length === 0, gaps };
  }

  /**
   * Records delivered rows in the sync log and deletes them from the queue, in ONE transaction:
   * any set of pending seqs, not only a prefix (unknown ones are ignored). For an application
   * that delivers rows itself; the drain confirms prefixes with `confirmThrough`.
   */
  confirm(seqs: readonly number[]): void {
    this.queueFile.ensureOpen();
    if (seqs.length === 0) return;
    this.#confirmation ??= new Confirmation(this.queueFile);
    this.#confirmation.seqs(seqs);
  }

  // ── dead letters ──────────────────────────────────────────────────────────────────────────

  /**
   * Operator action: ends the backoff of this namespace's head (and of its group, in every table it
   * spans), so the drain retries it at its next look — in place, with its attempts; `skipHead`
   * moves it away instead. Null when nothing was backing off. With `key` (a table with lanes): the
   * backoff of that key's rows only — the head of its lane, when its lane is held.
   */
  retryHead(key?: LaneKey): RetriedHead | null {
    this.queueFile.ensureOpen();
    const lane = key === undefined ? null : laneKeyText(key, `table "${this.namespace}"`);
    const file = this.queueFile;
    return file.write("cannot end the head's backoff", () => {
      // With a key: the first pending row of that key (the head of its lane, when its lane is held).
      const head = file.db
        .query<RetriedHead & { grp: number | null }, [string, string | null]>(
          "SELECT seq, grp, attempts, next_attempt_at AS nextAttemptAt FROM outbox_queue WHERE namespace = ?1 AND synced = 0 AND (?2 IS NULL OR lane_key = ?2) ORDER BY seq LIMIT 1",
        )
        .get(file.namespace, lane);
      if (!head) return null;
      // The head's group may carry its backoff on another table's head (a transaction across tables
      // is charged where it failed).
      const ended = file.db
        .query(
          "UPDATE outbox_queue SET next_attempt_at = NULL WHERE synced = 0 AND next_attempt_at IS NOT NULL AND ((namespace = ?1 AND (?3 IS NULL OR lane_key = ?3)) OR grp = ?2)",
        )
        .run(file.namespace, head.grp, lane).changes;
      return ended === 0 ? null : { seq: head.seq, attempts: head.attempts, nextAttemptAt: head.nextAttemptAt };
    });
  }

  /**
   * Operator action: moves the head (and its group) aside into the dead letters, reason "skipped",
   * each letter keeping its own error. Safe while the drain runs; a head that was ever sent may be
   * on its way in a batch, so its letter is "in doubt" (see LetterRemote) until the drain settles
   * it, and is replayed only then.
   */
  skipHead(seq: number): DeadLettered {
    return this.deadLetter(seq, "skipped");
  }

  /**
   * Re-enqueues a dead letter at the tail (once) and records replayed_at / replayed_as_seq; returns
   * the new seq. A letter the remote applied, or may have (in doubt), throws ReplayRefusedError;
   * `force` replays one in doubt (once the remote was checked), never one applied.
   */
  replayDead(seq: number, source?: string, options: { force?: boolean } = {}): number {
    this.queueFile.ensureOpen();
    return this.deadLog.replay(seq, source, options.force === true);
  }

  /**
   * Re-enqueues many dead letters at the tail in ONE transaction, in ascending seq order whatever
   * the order given, each linked to the one before (as replayDead, from the same tail and append);
   * letters replayed or discarded before are left unchanged, never replayed twice, and letters the
   * remote applied or may have are refused (`refused`; `force` replays those in doubt). A seq that is
   * no dead letter of this namespace throws NotFoundError and nothing is replayed. `source` defaults
   * to each letter's.
   */
  replayDeadMany(seqs: readonly number[], source?: string, options: { force?: boolean } = {}): DeadReplays {
    this.queueFile.ensureOpen();
    if (!Array.isArray(seqs) || !seqs.every((s) => Number.isSafeInteger(s) && s > 0))
      throw this.queueFile.invalid("replayDeadMany expects an array of positive integer seqs");
    const ordered = [...new Set(seqs)].sort((a, b) => a - b);
    if (ordered.length === 0) return { replayed: [], unchanged: [], refused: [] };
    return this.deadLog.replayMany(ordered, source, undefined, options.force === true);
  }

  /**
   * Deletes this namespace's dead letters that `rule` selects (see PurgeRule) in ONE transaction,
   * except those the chain still needs: one a queued row links to, and the namespace's newest
   * (see PurgeOutcome). Returns what was deleted and what was kept.
   */
  purgeDead(rule: PurgeRule): PurgeOutcome {
    this.queueFile.ensureOpen();
    if (!(rule?.before instanceof Date) || Number.isNaN(rule.before.getTime()))
      throw this.queueFile.invalid("purgeDead needs a valid `before` Date");
    return this.deadLog.purge(rule);
  }

  /** Every dead letter of this namespace, ascending seq (replayed ones included). */
  listDead(): DeadLetter[] {
    this.queueFile.ensureOpen();
    return this.deadLog.list();
  }

  /** One dead letter of this namespace, or null. */
  getDead(seq: number): DeadLetter | null {
    this.queueFile.ensureOpen();
    return this.deadLog.get(seq);
  }

  /**
   * The letters dead-lettered with the letter `seq` of this namespace, seq order, itself included:
   * its group, in every namespace of the file (itself alone when it has none). Empty when `seq` is
   * no dead letter here.
   */
  listDeadGroup(seq: number): DeadLetter[] {
    this.queueFile.ensureOpen();
    return this.deadLog.groupOf(seq);
  }

  /** Dead letters of this namespace not yet replayed. */
  deadCount(): number {
    this.queueFile.ensureOpen();
    return this.deadLog.count();
  }

  #checkItem(tag: unknown, payload: unknown, source: unknown): void {
    this.#checkTag(tag);
    this.#checkPayload(payload);
    this.#checkSource(source);
  }

  // A lone surrogate would be silently replaced when SQLite stores the text as UTF-8.
  #checkTag(tag: unknown): void {
    if (typeof tag !== "string" || tag === "" || !tag.isWellFormed())
      throw this.queueFile.invalid("tag must be a non-empty, well-formed string");
  }

  #checkPayload(payload: unknown): void {
    if (typeof payload !== "string" || !payload.isWellFormed())
      throw this.queueFile.invalid("payload must be a well-formed string");
  }

  /** A tenant given with a row must be a tenant name (see tenant.ts): it becomes a database or file name. */
  #checkTenant(tenant: unknown): void {
    if (tenant == null) return;
    const problem = tenantNameProblem(tenant);
    if (problem !== null) throw this.queueFile.invalid(problem);
  }

  #checkSource(source: unknown): void {
    if (typeof source !== "string" || !source.isWellFormed())
      throw this.queueFile.invalid("source must be a well-formed string");
  }
}

/** No tag yet: the first item's is always checked. */
const NOT_CHECKED = Symbol("not checked");

/**
 * The queue of `namespace` in an open file shared with its other namespaces (one connection, one transaction
 * across them).
 */
export function outboxOn(queueDb: QueueDb, namespace: string, options: OutboxOptions = {}): Outbox {
  return new Outbox(queueDb.path, namespace, { ...options, [SHARED]: queueDb });
}

/** Opens the queue of `namespace` in `path`, runs `fn` on it and closes it, whatever `fn` does. */
export function withOutbox<T>(path: string, namespace: string, fn: (outbox: Outbox) => T): T {
  const outbox = new Outbox(path, namespace);
  try {
    return fn(outbox);
  } finally {
    outbox.close();
  }
}

/**
 * Ends the backoff of each backed-off head of one queue file, each in its namespace's file state,
 * and returns them. Read-only first: only namespaces with a backoff are opened for writing — or,
 * with `namespace`, that one, whose head may be a group charged on another table's head. With
 * `key`, only that key's lane of a table with lanes.
 */
export function retryBackedOffHeads(
  file: string,
  options: { namespace?: string; key?: string } = {},
): Array<RetriedHead & { namespace: string }> {
  const { namespace: only, key } = options;
  const retried: Array<RetriedHead & { namespace: string }> = [];
  for (const { namespace } of fileHealth(file).filter((h) =>
    only === undefined ? h.nextAttemptAt !== null : h.namespace === only,
  )) {
    const head = withOutbox(file, namespace, (outbox) => outbox.retryHead(key));
    if (head !== null) retried.push({ namespace, ...head });
  }
  return retried;
}
