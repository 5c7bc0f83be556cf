import type { AppConfig, TableConfig } from "../config/types.ts";
import { describeError, InvalidArgumentError, UnsupportedStatementError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import { Outbox, type OutboxRow } from "../outbox/outbox.ts";
import { parseTimestamp } from "../outbox/timestamp.ts";
import type { Statement, WriteResult } from "../writers/writer.ts";
import { rowBackoffMs, tableReadiness } from "./schedule.ts";
import { TableHolds } from "./table-hold.ts";
import type { TableView } from "./views.ts";

/**
 * One table's part of a target's batch: the fence (when the target keeps a ledger), then its rows.
 * The rows keep their bookkeeping only; SQL text and payload live on in `stmts` alone, so a large
 * row is held in memory once, not twice.
 */
export interface TableSlice {
  table: DrainTable;
  rows: OutboxRow[];
  stmts: Statement[];
  fenced: boolean;
  /** SQL text and payload of the rows, in characters: what the batch's byte budget counts. */
  bytes: number;
  /** More rows were ready behind this slice when it was read. */
  more: boolean;
}

/** Rows read and converted for a slice, before its fence and its head's charge. */
interface SliceRows {
  rows: OutboxRow[];
  stmts: Statement[];
  bytes: number;
  /** More rows were ready behind them. */
  more: boolean;
}

/** Rows read and converted ahead of their batch (see DrainTable.readAhead). */
interface ReadAhead extends SliceRows {
  /** The last seq of the slice in flight when they were read: they follow it. */
  after: number;
}

/** What planning or settling one table did, for the cycle's report. */
export interface TableOutcome {
  delivered: number;
  failed: number;
  deadLettered: number;
  /** More rows are ready right now (cycle again at once). */
  more: boolean;
  /** When this table becomes ready next (epoch ms), if known. */
  wakeAt: number | null;
}

/** What the runner lends a table to plan its slice. */
export interface PlanContext {
  now: number;
  /** Bytes of SQL text and payload this table may still add to the batch. */
  maxBytes: number;
  /** Decodes and converts one row into the statement sent for it; throws InvalidArgumentError (undecodable) or UnsupportedStatementError. */
  prepare(table: DrainTable, row: OutboxRow): Statement;
  /** The fence statement that opens this table's slice, moving its ledger row from `through` to `last`; null without a ledger. */
  fence: ((table: DrainTable, through: number, last: number) => Statement) | null;
}


const minWake = (a: number | null, b: number | null) => (a === null ? b : b === null ? a : Math.min(a, b));
const none = (): TableOutcome => ({ delivered: 0, failed: 0, deadLettered: 0, more: false, wakeAt: null });

/**
 * One served table as the drain sees it, and the single owner of its drain state: its queue file,
 * what this drain last saw of its ledger row (`through`), what holds it back (`holds`), a cut that
 * lets the rows before a failed row go first, and the pipeline's applied-but-unconfirmed rows and
 * read-ahead. The target's runner asks it to settle from the ledger, to plan its slice of a batch
 * and to apply the answer.
 */
export class DrainTable {
  readonly name: string;
  /** Absolute path of `{db_dir}/{table}.db`. */
  readonly file: string;
  #outbox: Outbox | null = null;
  /** The file's origin id, once opened (kept after close, for the final drain state). */
  #origin: string | null = null;
  /** What holds this table back, if anything. */
  readonly holds: TableHolds;
  /** The ledger's `through` for this queue as this drain last saw or set it; null: settle first. */
  #through: number | null = null;
  /** A row behind the head failed: the next slice stops before it, so the rows before it go first. */
  #cutBefore: number | null = null;
  /**
   * The last seq of a fenced slice the remote applied (its fence moved the ledger there) whose rows
   * are not confirmed locally yet: they are confirmed while the next batch is in flight, and the
   * next slice starts above it. Null when nothing waits.
   */
  #applied: number | null = null;
  /** The next slice, read while the batch before it was in flight; used only if that batch was applied whole. */
  #ahead: ReadAhead | null = null;
  /** The queue had no history when opened: in compatibility mode, rows at or below the remote's
   *  MAX(outbox_seq) can then only be another queue's seqs (see compat.ts). */
  freshQueue = false;
  /** Compatibility mode only: the remote outbox_seq schema and the local seeding are done (see compat.ts); nothing is sent before. */
  compatReady: boolean;
  /** A timed-out batch carrying this table (no ledger) may still commit: not planned until it answers. */
  awaitingLateAnswer = false;
  /** Rows of this table delivered (settled from the ledger included), failed and dead-lettered since the drain started. */
  readonly counts = { delivered: 0, failed: 0, deadLettered: 0 };

  constructor(
    readonly config: TableConfig,
    dbDir: string,
    private readonly app: AppConfig,
    private readonly target: string,
    private readonly logger: Logger,
  ) {
    this.name = config.name;
    this.file = `${dbDir}/${config.name}.db`;
    this.compatReady = !config.injectOutboxSeq;
    this.holds = new TableHolds({ table: this.name, target, file: this.file }, logger);
  }

  /** The open queue, or null while its file cannot be opened. */
  get outbox(): Outbox | null {
    return this.#outbox;
  }

  /** The ledger's `through` this drain last saw (null: not settled yet). */
  get through(): number | null {
    return this.#through;
  }

  /** Adds an outcome to this table's counts: every count is made here, where the outcome is decided. */
  #tally(outcome: Partial<TableOutcome>): void {
    this.counts.delivered += outcome.delivered ?? 0;
    this.counts.failed += outcome.failed ?? 0;
    this.counts.deadLettered += outcome.deadLettered ?? 0;
  }

  /** This table as status and metrics show it. */
  view(): TableView {
    return { namespace: this.name, origin: this.#origin, through: this.#through, held: this.holds.view() };
  }

  /** True while held at `now` (or unopened). */
  held(now: number): boolean {
    return this.#outbox === null || this.holds.active(now);
  }

  /** Settlement is needed before this table's next fenced batch. */
  get unsettled(): boolean {
    return this.#through === null;
  }

  /** Forgets the ledger view: the next batch settles from the ledger first (after an outage, a fence that failed). */
  unsettle(): void {
    this.#through = null;
  }

  /**
   * Opens the queue file unless open; a file that cannot be opened (corrupt, not an outbox file, a
   * newer format, no permission) holds this table only, is reported once and retried later.
   */
  open(now: number): boolean {
    if (this.#outbox) return true;
    if (this.holds.active(now)) return false;
    try {
      this.#outbox = new Outbox(this.file, this.name, { maxPending: this.app.maxPending, durability: this.app.durability, fileMode: this.app.fileMode });
      if (this.config.injectOutboxSeq) this.freshQueue = !this.#outbox.hasHistory(); // only the compatibility mode asks (compat.ts)
      this.#origin = this.#outbox.origin;
      this.holds.release("file");
      return true;
    } catch (error) {
      this.holds.file(error, now);
      return false;
    }
  }

  /** Closes the queue file (confirming first what a target applied). */
  close(): void {
    this.confirmApplied(Date.now());
    this.#outbox?.close();
    this.#outbox = null;
  }

  /**
   * Applies what the ledger says this queue has applied (`remote`; null when it has no row yet):
   * rows at or below it that were sent (the sent mark) are confirmed; rows at or below it that were
   * never sent (a file restored from a backup) are moved above it before delivery, never confirmed
   * unsent; the local sequence is raised above it. Returns how many rows were confirmed. With
   * `adopted` (migration from `outbox_seq` delivery), every pending row at or below it is first
   * confirmed as applied by the earlier drain.
   */
  settle(remote: number | null, options: { adopted?: number } = {}): number {
    const outbox = this.#outbox!;
    const through = Math.max(remote ?? 0, options.adopted ?? 0);
    let confirmed = options.adopted ? outbox.confirmThrough(options.adopted) : 0;
    this.#tally({ delivered: confirmed });
    // Rows a target applied whose local confirmation failed were counted when applied.
    if (this.#applied !== null) outbox.confirmThrough(Math.min(this.#applied, through));
    // The sent mark is never lowered here: a batch the ledger does not show yet may still commit
    // (an uncommitted INSERT of the ledger row is invisible to a locking read on PostgreSQL).
    const settled = outbox.confirmThrough(Math.min(outbox.sentMark(), through));
    this.#tally({ delivered: settled });
    confirmed += settled;
    const head = outbox.head();
    if (head && head.seq <= through) {
      const moved = outbox.resequenceAbove(through);
      if (moved) {
        this.logger.warn(
          `drain: "${this.name}" on ${this.target}: the ledger says this queue applied up to seq ${through}, but pending rows ${moved.oldFirst}..${moved.oldLast} were never sent (a queue file restored from an older copy?); moved them, in order, to ${moved.newFirst}..${moved.newLast} so they are delivered, not mistaken for applied`,
          { target: this.target, namespace: this.name, seq: moved.oldFirst, rows: moved.count },
        );
      }
    }
    if (through > 0) outbox.seedSequence(through);
    this.#through = through;
    this.#applied = null; // the sent mark covers every row a fence moved the ledger past: confirmed above
    this.#ahead = null;
    return confirmed;
  }

  /**
   * Plans this table's slice of the batch: when ready, up to `batch_size` rows head first within
   * the byte budget, each converted by `ctx.prepare`, opened by the fence. A head that cannot be
   * sent (undecodable, unsupported, out of attempts) is dead-lettered on the spot and the next row
   * becomes the head; such a row behind the head ends the slice. The head is charged one attempt
   * and marked sent before delivery (crash-loop protection; settlement reads the mark).
   */
  plan(ctx: PlanContext): { slice: TableSlice | null; outcome: TableOutcome } {
    const planned = this.#plan(ctx);
    this.#tally(planned.outcome);
    return planned;
  }

  #plan(ctx: PlanContext): { slice: TableSlice | null; outcome: TableOutcome } {
    const out = none();
    const { now } = ctx;
    const ahead = this.#ahead;
    this.#ahead = null;
    if (this.awaitingLateAnswer || !this.compatReady) return { slice: null, outcome: out };
    if (this.held(now)) {
      out.wakeAt = this.holds.current?.until ?? null;
      return { slice: null, outcome: out };
    }
    if (ctx.fence && this.#through === null) return { slice: null, outcome: out };
    try {
      // Read ahead for exactly this: the slice before it was applied whole (and confirmation waits).
      const slice = ahead !== null && ahead.after === this.#applied && ahead.bytes <= ctx.maxBytes ? this.#sliceOf(ahead, ctx, out) : this.#planRows(ctx, out);
      this.holds.release("local");
      return { slice, outcome: out };
    } catch (error) {
      this.holds.local(error, now, "planning");
      out.wakeAt = this.holds.current?.until ?? null;
      return { slice: null, outcome: out };
    }
  }

  #planRows(ctx: PlanContext, out: TableOutcome): TableSlice | null {
    const outbox = this.#outbox!;
    const { now } = ctx;
    let wakeAt: number | null = null;
    const read = outbox.readForDelivery(this.app.batchSize, ctx.maxBytes, (head, pending) => {
      const readiness = tableReadiness(head, pending, now, { threshold: this.app.tableFlushThreshold, maxWaitMs: this.app.tableMaxWaitMs });
      wakeAt = readiness.wakeAt;
      return readiness.ready;
    }, this.#applied);
    out.wakeAt = wakeAt;
    if (read.head === null) {
      this.#cutBefore = null;
      return null;
    }
    if (read.rows.length === 0) {
      if (read.gap) this.holds.gap(read.gap.seq, read.gap.prevSeq, now);
      return null;
    }
    this.holds.release("chain gap");

    const rows: OutboxRow[] = [];
    const stmts: Statement[] = [];
    let bytes = 0;
    for (const row of read.rows) {
      const isHead = rows.length === 0;
      if (this.#cutBefore !== null && row.seq >= this.#cutBefore) {
        if (!isHead) break;
        this.#cutBefore = null; // the rows before it went: it is the head now
      }
      if (!isHead && row.nextAttemptAt && (parseTimestamp(row.nextAttemptAt) ?? 0) > now) break; // backing off: wait to be head
      if (isHead && this.app.maxAttempts !== null && row.attempts >= this.app.maxAttempts) {
        // Attempts were recorded but never resolved: the drain died delivering this row, again and again.
        this.#deadLetter(row, "max_attempts", row.lastError ?? "attempts exhausted without a result (the drain stopped during delivery)", row.lastErrorClass ?? "max_attempts");
        out.deadLettered += 1;
        out.more = true;
        continue;
      }
      let stmt: Statement;
      try {
        stmt = ctx.prepare(this, row);
      } catch (error) {
        out.more = true;
        if (!isHead) break; // it becomes the head of a later cycle and is handled then
        const { message, errorClass } = describeError(error);
        if (error instanceof UnsupportedStatementError || error instanceof InvalidArgumentError) {
          this.#deadLetter(row, error instanceof UnsupportedStatementError ? "unsupported_statement" : "undecodable", message, errorClass);
          out.deadLettered += 1;
          continue;
        }
        // A head that failed for a reason we did not foresee counts as a failed attempt, never silently.
        outbox.recordAttempt(row.seq);
        if (this.#charge(row, row.attempts + 1, message, errorClass)) out.deadLettered += 1;
        out.failed += 1;
        break;
      }
      bytes += row.tag.length + row.payload.length;
      row.tag = row.payload = ""; // the row is ours (read for this slice): its text lives on in stmt only
      rows.push(row);
      stmts.push(stmt);
    }
    if (rows.length === 0) return null;
    return this.#sliceOf({ rows, stmts, bytes, more: read.truncated }, ctx, out);
  }

  /** The slice of `rows`: opened by the fence, its head charged one attempt and the sent mark raised (before delivery). */
  #sliceOf({ rows, stmts, bytes, more }: SliceRows, ctx: PlanContext, out: TableOutcome): TableSlice {
    const last = rows[rows.length - 1]!.seq;
    const fenced = ctx.fence !== null;
    if (fenced) stmts.unshift(ctx.fence!(this, this.#through!, last));
    this.#outbox!.recordAttempt(rows[0]!.seq, new Date(ctx.now), last);
    out.more ||= more;
    return { table: this, rows, stmts, fenced, bytes, more };
  }

  /**
   * While `slice` is in flight, reads and converts the rows that follow it, so the next cycle need
   * not: used only if the slice is applied whole (see plan). Rows with a history (attempts, a
   * backoff) or that cannot be converted end it: they are planned as usual, where they are dealt
   * with. A failure here only means the next cycle reads them itself.
   */
  readAhead(slice: TableSlice, ctx: Omit<PlanContext, "fence">): void {
    this.#ahead = null;
    const outbox = this.#outbox;
    if (!outbox || !slice.fenced || !slice.more || this.#cutBefore !== null) return;
    const after = slice.rows[slice.rows.length - 1]!.seq;
    try {
      const read = outbox.readForDelivery(this.app.batchSize, ctx.maxBytes, () => true, after);
      const ahead: ReadAhead = { after, rows: [], stmts: [], bytes: 0, more: read.truncated };
      for (const row of read.rows) {
        if (row.attempts > 0 || row.nextAttemptAt) break;
        let stmt: Statement;
        try {
          stmt = ctx.prepare(this, row);
        } catch {
          break;
        }
        ahead.bytes += row.tag.length + row.payload.length;
        row.tag = row.payload = "";
        ahead.rows.push(row);
        ahead.stmts.push(stmt);
      }
      ahead.more ||= ahead.rows.length < read.rows.length || read.gap !== null;
      if (ahead.rows.length > 0) this.#ahead = ahead;
    } catch {
      this.#ahead = null;
    }
  }

  /**
   * Applies the target's answer for this table's slice: all applied → confirmed (one local
   * transaction) and `through` moves to the slice's last seq; a failed head → charged (backoff or
   * dead letter); a failed row behind the head → nothing charged, the next slice stops before it;
   * a remote schema fault → the table is held, nothing charged; a fence that failed → settle from
   * the ledger next.
   */
  applyAnswer(slice: TableSlice, results: WriteResult[], now: number): TableOutcome & { ledgerMissing: boolean } {
    const out = this.#applyAnswer(slice, results, now);
    this.#tally(out);
    return out;
  }

  #applyAnswer(slice: TableSlice, results: WriteResult[], now: number): TableOutcome & { ledgerMissing: boolean } {
    const out = { ...none(), ledgerMissing: false };
    const outbox = this.#outbox!;
    const { rows, fenced } = slice;
    const head = rows[0]!;
    const answers = fenced ? results.slice(1) : results;
    try {
      const fence = fenced ? results[0]! : null;
      if (fence && !fence.ok && !fence.skipped) {
        outbox.refundAttempt(head.seq);
        this.#through = null;
        if (fence.remoteSchema) {
          out.ledgerMissing = true;
          this.holds.schema(`the ledger is not usable: ${fence.error}`, now);
        } else {
          this.logger.info(`drain: "${this.name}" on ${this.target}: its ledger row moved under this drain (a late commit or another drain); settling from the ledger`, {
            target: this.target, namespace: this.name, error_class: fence.errorClass ?? null,
          });
        }
        out.more = true;
        return out;
      }
      let okPrefix = 0;
      while (okPrefix < answers.length && answers[okPrefix]!.ok) okPrefix++;
      const failedAt = answers.findIndex((r) => !r.ok && !(r as { skipped?: boolean }).skipped);
      if (okPrefix === rows.length) {
        const last = rows[rows.length - 1]!.seq;
        // Fenced: the ledger now says the remote applied them, so the local confirmation can wait
        // for the next batch to be in flight (confirmApplied); a crash before it is settled.
        if (fenced) this.#through = this.#applied = last;
        else outbox.confirmThrough(last);
        this.holds.release("remote schema");
        out.delivered = rows.length;
        return out;
      }
      if (fenced && okPrefix > 0) {
        // A namespace partly applied: the writer broke the contract the ledger relies on. Its
        // fence may have committed for rows that were not: stop, loudly, rather than guess.
        this.#through = null;
        this.holds.contract(`the writer of ${this.target} applied part of a namespace (seq ${rows[0]!.seq}..${rows[okPrefix - 1]!.seq}) and failed the rest: with ledger = true a writer must apply a namespace whole or not at all (set ledger = false for a writer that cannot)`, now);
        return out;
      }
      const after = failedAt >= 0 ? answers.findIndex((r, i) => i > failedAt && r.ok) : -1;
      if (after >= 0) {
        this.logger.warn(`drain: writer ${this.target} reported seq ${rows[after]!.seq} ok after a failure in namespace "${this.name}"; it stays queued`, {
          target: this.target, namespace: this.name, seq: rows[after]!.seq,
        });
      }
      if (okPrefix > 0) {
        // No ledger: a writer that commits statement by statement applied these rows; confirm them.
        outbox.confirmThrough(rows[okPrefix - 1]!.seq);
        out.delivered = okPrefix;
        if (failedAt !== okPrefix) return out; // the rest was skipped: sent again next cycle
        outbox.recordAttempt(rows[failedAt]!.seq); // the failed row is the head now
        return this.#failed(rows[failedAt]!, answers[failedAt]!, now, out);
      }
      if (failedAt !== 0) {
        // Nothing of this table was tried (skipped), or a row behind the head failed: not the head's fault.
        outbox.refundAttempt(head.seq);
        if (failedAt > 0) {
          this.#cutBefore = rows[failedAt]!.seq;
          out.more = true;
        }
        return out;
      }
      return this.#failed(head, answers[0]!, now, out);
    } catch (error) {
      // Local error while settling: the rows stay queued; settlement from the ledger decides later.
      this.#through = null;
      this.holds.local(error, now, `settling a batch delivered to ${this.target}`);
      return out;
    }
  }

  /** The head `row` failed (the row's fault, or the remote schema's): charge it, or hold the table. */
  #failed<T extends TableOutcome>(row: OutboxRow, answer: WriteResult, now: number, out: T): T {
    const result = answer as Extract<WriteResult, { ok: false }>;
    const message = typeof result.error === "string" && result.error ? result.error : "writer reported a failure without a message";
    const errorClass = typeof result.errorClass === "string" && result.errorClass ? result.errorClass : "unknown";
    if (result.remoteSchema) {
      this.#outbox!.refundAttempt(row.seq);
      this.holds.schema(message, now);
      return out;
    }
    out.failed = 1;
    if (this.#charge(row, row.attempts + 1, message, errorClass)) out.deadLettered = 1;
    out.more = true; // re-plan: the next head may be ready
    return out;
  }

  /** Rows a target applied wait for their local confirmation. */
  get hasApplied(): boolean {
    return this.#applied !== null;
  }

  /**
   * Confirms locally the rows a target applied (see `#applied`): sync log + delete, one transaction.
   * A local failure holds the table and keeps them waiting: the next try, or settlement from the
   * ledger, confirms them (without counting them again).
   */
  confirmApplied(now: number): void {
    const bound = this.#applied;
    if (bound === null || !this.#outbox) return;
    try {
      this.#outbox.confirmThrough(bound);
      this.#applied = null;
    } catch (error) {
      this.#through = null;
      this.holds.local(error, now, `confirming rows applied by ${this.target}`);
    }
  }

  /**
   * The late answer of a timed-out batch without a ledger (see TargetRunner): the rows of this
   * slice it reports applied, from the head on, are confirmed and counted; the rest are delivered
   * again.
   */
  applyLateAnswer(slice: TableSlice, answers: WriteResult[]): void {
    let ok = 0;
    while (ok < slice.rows.length && answers[ok]!.ok) ok++;
    if (ok === 0 || !this.#outbox) return;
    try {
      this.#outbox.confirmThrough(slice.rows[ok - 1]!.seq);
      this.#tally({ delivered: ok });
    } catch (error) {
      this.logger.error(`drain: confirming the late answer for "${this.name}" failed; its rows are redelivered: ${describeError(error).message}`, { namespace: this.name });
    }
  }

  /** Undoes the head's up-front charge after a batch that never got an answer (an outage); its sent mark stays for settlement. */
  refundOutage(slice: TableSlice): void {
    try {
      this.#outbox!.refundAttempt(slice.rows[0]!.seq);
    } catch (error) {
      this.logger.error(`drain: local error refunding seq ${slice.rows[0]!.seq} of namespace "${this.name}": ${describeError(error).message}`, { namespace: this.name, seq: slice.rows[0]!.seq });
    }
  }

  /** Prunes the sync log per `retain_log_days` and replayed dead letters per `retain_replayed_days`. */
  prune(): void {
    if (!this.#outbox) return;
    try {
      const removed = this.#outbox.pruneSyncLog(this.config.retainLogDays);
      if (removed > 0) this.logger.debug(`drain: pruned ${removed} sync-log entries of "${this.name}"`, { namespace: this.name, rows: removed });
      const replayed = this.#outbox.pruneReplayedDead(this.app.retainReplayedDays);
      if (replayed > 0) this.logger.debug(`drain: pruned ${replayed} replayed dead letters of "${this.name}"`, { namespace: this.name, rows: replayed });
    } catch (error) {
      this.logger.error(`drain: pruning the logs of "${this.name}" (${this.file}) failed: ${describeError(error).message}`, { namespace: this.name });
    }
  }

  /**
   * Records a failed attempt of `row` (already charged: `attempts` includes it): backs it off
   * `2^attempts` units, or dead-letters it once `max_attempts` is reached. Returns true if dead-lettered.
   */
  #charge(row: OutboxRow, attempts: number, message: string, errorClass: string): boolean {
    const { app } = this;
    const delay = rowBackoffMs(attempts, app.backoffUnitMs, app.backoffCapMs);
    this.#outbox!.recordFailure(row.seq, message, errorClass, new Date(Date.now() + delay));
    const fields = { target: this.target, namespace: this.name, seq: row.seq, attempt: attempts, error_class: errorClass };
    if (app.maxAttempts !== null && attempts >= app.maxAttempts) {
      this.#outbox!.deadLetter(row.seq, "max_attempts", message, errorClass);
      this.logger.error(`drain: dead-lettered seq ${row.seq} of namespace "${this.name}" on target ${this.target} after ${attempts} attempts: ${message}`, fields);
      return true;
    }
    this.logger.warn(`drain: seq ${row.seq} of namespace "${this.name}" failed on target ${this.target} (attempt ${attempts}${app.maxAttempts === null ? "" : `/${app.maxAttempts}`}, retry in ${Math.round(delay)} ms): ${message}`, fields);
    return false;
  }

  #deadLetter(row: OutboxRow, reason: string, message: string, errorClass: string): void {
    this.#outbox!.deadLetter(row.seq, reason, message, errorClass);
    this.logger.error(`drain: dead-lettered seq ${row.seq} of namespace "${this.name}" (${reason}): ${message}`, {
      target: this.target, namespace: this.name, seq: row.seq, attempt: row.attempts, error_class: errorClass,
    });
  }
}

export { minWake };
