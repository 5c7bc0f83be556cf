import { existsSync } from "node:fs";
import type { AppConfig, TableConfig } from "../config/types.ts";
import { describeError, InvalidArgumentError, UnsupportedStatementError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import type { NamespaceHealth } from "../outbox/health.ts";
import type { DeadLettered, Outbox, OutboxRow } from "../outbox/outbox.ts";
import { parseTimestamp } from "../outbox/timestamp.ts";
import type { Statement, WriteResult } from "../writers/writer.ts";
import { classifyAnswer, type Failure } from "./answer.ts";
import { endOfGroup, groupStarts } from "./row-groups.ts";
import type { DeliveryObserver } from "./observer.ts";
import { rowBackoffMs, tableReadiness } from "./schedule.ts";
import { TableHolds } from "./table-hold.ts";
import type { HoldReason, TableView } from "./views.ts";

/**
 * A table's rows read and converted for a batch, before its fence and its head's charge: whole
 * groups only, which the runner may still trim at a group boundary (a group that spans tables goes
 * only when it heads every table it touches). The rows keep their bookkeeping only; SQL text and
 * payload live on in `stmts` alone, so a large row is held in memory once, not twice.
 */
export interface SliceDraft {
  table: DrainTable;
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

/** One table's part of a target's batch: the fence (when the target keeps a ledger), then its rows. */
export interface TableSlice extends SliceDraft {
  fenced: boolean;
}

/** A draft read and converted ahead of its batch (see DrainTable.readAhead). */
interface ReadAhead extends Omit<SliceDraft, "table"> {
  /** The last seq of the slice in flight when they were read: they follow it. */
  after: number;
}

/** The first `count` rows of a draft (a group boundary): the rest goes in a later batch. */
export function trimDraft(draft: SliceDraft, count: number): void {
  if (count >= draft.rows.length) return;
  draft.rows.length = count;
  draft.stmts.length = count;
  draft.rowBytes.length = count;
  draft.bytes = draft.rowBytes.reduce((a, b) => a + b, 0);
  draft.more = true;
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
  /** Other tables of the file whose rows moved too (a dead-lettered group that spans tables). */
  touched?: string[];
}

/** What the runner lends a table to plan its slice. */
export interface PlanContext {
  now: number;
  /** Bytes of SQL text and payload this table may still add to the batch. */
  maxBytes: number;
  /** Decodes and converts one row into the statement sent for it; throws InvalidArgumentError (undecodable) or UnsupportedStatementError. */
  prepare(table: DrainTable, row: OutboxRow): Statement;
  /** Deliver whatever is pending, threshold and wait or not (a group that spans tables waits at this table's head); a backoff still holds it. */
  force?: boolean;
}

/** What the runner lends a table to open its slice: the fence, or null without a ledger. */
export interface OpenContext {
  now: number;
  /** The fence statement that opens this table's slice, moving its ledger row from `through` to `last`. */
  fence: ((table: DrainTable, through: number, last: number) => Statement) | null;
}

/** Opens one table's queue: its own file (db_dir), or its namespace of the app's db_file. */
export type QueueOpener = (table: DrainTable) => Outbox;

/** What the runner of the target that serves a table gives it. */
export interface TableParts {
  app: AppConfig;
  /** The target's name. */
  target: string;
  logger: Logger;
  opener: QueueOpener;
  /** Told of failures, dead letters and holds (tracing); null: nobody listens. */
  observer: DeliveryObserver | null;
  /** The drain's clock (epoch ms): every time a table stores (a head's retry time) or compares is from it. */
  now: () => number;
}

/**
 * The attempts each group that spans tables has had, by group: the most any of its heads carries
 * (before this batch's charge). A failure is charged to the head in the table whose row failed;
 * when that is not always the same table, the count still goes on from the group's, not restart
 * from that head's own.
 */
export type GroupAttempts = ReadonlyMap<number, number>;
const NO_GROUP_ATTEMPTS: GroupAttempts = new Map();

/** The pause between two chunks of a background prune (see DrainTable.prune). */
const PRUNE_PAUSE_MS = 5;

/** A hold found outside the table's own work, with what its message needs (see DrainTable.hold). */
export type HoldCause =
  | { reason: "file"; error: unknown }
  | { reason: "local"; error: unknown; what: string }
  | { reason: "remote schema"; message: string }
  | { reason: "origin"; message: string }
  | { reason: "writer contract"; message: string };

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
  /** Absolute path of `{db_dir}/{table}.db`, or of the app's `db_file`. */
  readonly file: string;
  #outbox: Outbox | null = null;
  /** The file's origin id, once opened (kept after close, for the final drain state). */
  #origin: string | null = null;
  /** What holds this table back, if anything: changed only here, through the methods below. */
  readonly #holds: TableHolds;
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
  #freshQueue = false;
  /** Rows of this table delivered (settled from the ledger included), failed and dead-lettered since the drain started. */
  readonly counts = { delivered: 0, failed: 0, deadLettered: 0 };

  private readonly app: AppConfig;
  private readonly target: string;
  private readonly logger: Logger;
  private readonly opener: QueueOpener;
  private readonly observer: DeliveryObserver | null;
  private readonly now: () => number;

  constructor(
    readonly config: TableConfig,
    parts: TableParts,
  ) {
    ({
      app: this.app,
      target: this.target,
      logger: this.logger,
      opener: this.opener,
      observer: this.observer,
      now: this.now,
    } = parts);
    this.name = config.name;
    this.file = this.app.dbFile ?? `${this.app.dbDir}/${config.name}.db`;
    this.#holds = new TableHolds(
      { table: this.name, target: this.target, file: this.file },
      this.logger,
      this.observer,
    );
    // Compatibility mode: nothing is sent before the remote outbox_seq schema and the local seeding are done (compat.ts).
    if (config.injectOutboxSeq)
      this.#holds.wait(
        "compat setup",
        `the compatibility mode's setup on ${this.target} (the outbox_seq column and index, the local sequence seeded above the remote's) is not done yet`,
        this.now(),
      );
  }

  /** A cause found outside the table's own work: by the target (its setup, the open-file limit, a unit's answer), the ledger, the fleet view, the compatibility setup. */
  hold(cause: HoldCause, now: number): void {
    switch (cause.reason) {
      case "file":
        this.#holds.file(cause.error, now);
        return;
      case "local":
        this.#holds.local(cause.error, now, cause.what);
        return;
      case "remote schema":
        this.#holds.schema(cause.message, now);
        return;
      case "origin":
        this.#holds.origin(cause.message, now);
        return;
      case "writer contract":
        this.#holds.contract(cause.message, now);
        return;
    }
  }

  /** The cause of `reason` is gone. */
  release(reason: HoldReason): void {
    this.#holds.release(reason);
  }

  /** Ends every timed hold now, so the table is tried at once (`kick`: the operator fixed the cause). */
  retryNow(now: number): void {
    this.#holds.retryNow(now);
  }

  /** Compatibility mode: whether the setup is still to do, and can be done now (the file open, no fault holding the table). */
  needsCompatSetup(now: number): boolean {
    return this.#holds.waitsFor("compat setup") && this.#outbox !== null && !this.#holds.active(now);
  }

  /** The compatibility mode's setup is done: the table may be sent. */
  compatReady(): void {
    this.#holds.release("compat setup");
  }

  /** The queue had no history when opened (see compat.ts). */
  get freshQueue(): boolean {
    return this.#freshQueue;
  }

  /** A timed-out batch carrying this table (no ledger) may still commit: the table waits for its answer. */
  awaitLateAnswer(now: number): void {
    this.#holds.wait(
      "late answer",
      `a timed-out batch to ${this.target} may still commit: without a ledger a late commit must not land after newer rows`,
      now,
    );
  }

  /** The timed-out batch answered, or failed: the table may be sent again. */
  lateAnswerCame(): void {
    this.#holds.release("late answer");
  }

  /** Whether the file is to be opened (not open, and no hold says wait). */
  wantsOpening(now: number): boolean {
    return this.#outbox === null && !this.#holds.active(now);
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

  /** This table as status and metrics show it; with `health`, its queue's health read from the file. */
  view(options: { health?: boolean } = {}): TableView {
    const view: TableView = {
      namespace: this.name,
      origin: this.#origin,
      through: this.#through,
      held: this.#holds.view(),
      counts: { ...this.counts },
    };
    if (options.health) view.health = this.#health();
    return view;
  }

  #health(): NamespaceHealth | null {
    const outbox = this.#outbox;
    if (!outbox || outbox.closed) return null;
    try {
      return outbox.health();
    } catch {
      return null; // a file that cannot be read now holds its table; the hold is what is shown
    }
  }

  /** True while held at `now`, waiting, or unopened. */
  held(now: number): boolean {
    return this.#outbox === null || this.#holds.active(now) || this.#holds.waiting;
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
    if (this.#holds.active(now)) return false;
    if (this.app.dbFile !== null && !existsSync(this.file)) {
      this.#holds.missing(now);
      return false;
    }
    try {
      this.#outbox = this.opener(this);
      if (this.config.injectOutboxSeq) this.#freshQueue = !this.#outbox.hasHistory(); // only the compatibility mode asks (compat.ts)
      this.#origin = this.#outbox.origin;
      this.#holds.release("file");
      return true;
    } catch (error) {
      this.#holds.file(error, now);
      return false;
    }
  }

  /** A background prune, while one runs (see prune): the close waits for it. */
  get pruning(): Promise<void> | null {
    return this.#pruning;
  }

  /** Closes the queue file (confirming first what a target applied). */
  close(): void {
    this.confirmApplied(this.now());
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
   * Plans this table's part of the batch: when ready (or `force`d), up to `batch_size` rows head
   * first within the byte budget, whole groups only, each row converted by `ctx.prepare`. A head
   * group that cannot be sent (a row undecodable or unsupported, out of attempts) is dead-lettered
   * whole on the spot and the next group becomes the head; such a group behind the head ends the
   * draft. The runner then `openSlice`s it (or trims it first).
   */
  plan(ctx: PlanContext): { draft: SliceDraft | null; outcome: TableOutcome } {
    const planned = this.#plan(ctx);
    this.#tally(planned.outcome);
    // A hold this plan found or set (a chain gap, a local error) is retried on time, even if no commit brings the table back.
    planned.outcome.wakeAt = minWake(planned.outcome.wakeAt, this.#holds.retryAt(ctx.now));
    return planned;
  }

  #plan(ctx: PlanContext): { draft: SliceDraft | null; outcome: TableOutcome } {
    const out = none();
    const { now } = ctx;
    const ahead = this.#ahead;
    this.#ahead = null;
    if (this.held(now)) return { draft: null, outcome: out };
    if (this.#applyingFenced && this.#through === null) return { draft: null, outcome: out };
    try {
      // Read ahead for exactly this: the slice before it was applied whole (and confirmation waits).
      const draft =
        ahead !== null && ahead.after === this.#applied && ahead.bytes <= ctx.maxBytes
          ? { table: this, ...ahead }
          : this.#planRows(ctx, out);
      if (draft !== null) out.more ||= draft.more;
      this.#holds.release("local");
      return { draft, outcome: out };
    } catch (error) {
      this.#holds.local(error, now, "planning");
      return { draft: null, outcome: out };
    }
  }

  /** Whether this table is delivered through a ledger (its slices are fenced); set by the runner that serves it. */
  #applyingFenced = false;

  /** The runner's target keeps a ledger: slices are fenced, and nothing is planned before settlement. */
  fencedByLedger(): void {
    this.#applyingFenced = true;
  }

  #planRows(ctx: PlanContext, out: TableOutcome): SliceDraft | null {
    const outbox = this.#outbox!;
    const { now } = ctx;
    let wakeAt: number | null = null;
    const read = outbox.readForDelivery(
      this.app.batchSize,
      ctx.maxBytes,
      (head, pending) => {
        const knobs = { threshold: this.app.tableFlushThreshold, maxWaitMs: this.app.tableMaxWaitMs };
        const readiness = tableReadiness(head, pending, now, knobs, ctx.force);
        wakeAt = readiness.wakeAt;
        return readiness.ready;
      },
      this.#applied,
    );
    out.wakeAt = wakeAt;
    if (read.head === null) {
      this.#cutBefore = null;
      return null;
    }
    if (read.rows.length === 0) {
      if (read.gap) this.#holds.gap(read.gap.seq, read.gap.prevSeq, now);
      return null;
    }
    this.#holds.release("chain gap");

    const draft: SliceDraft = {
      table: this,
      rows: [],
      stmts: [],
      rowBytes: [],
      bytes: 0,
      more: read.truncated,
      spans: new Map(),
    };
    const starts = groupStarts(read.rows);
    for (let g = 0; g < starts.length; g++) {
      const group = read.rows.slice(starts[g], starts[g + 1] ?? read.rows.length);
      const first = group[0]!;
      const isHead = draft.rows.length === 0;
      if (this.#cutBefore !== null && first.seq >= this.#cutBefore) {
        if (!isHead) break;
        this.#cutBefore = null; // the groups before it went: it heads the table now
      }
      if (!isHead && first.nextAttemptAt && (parseTimestamp(first.nextAttemptAt) ?? 0) > now) break; // backing off: wait to be head
      if (isHead && this.app.maxAttempts !== null && first.attempts >= this.app.maxAttempts) {
        // Attempts were recorded but never resolved: the drain died delivering this group, again and again.
        this.#deadLetter(
          first,
          "max_attempts",
          first.lastError ?? "attempts exhausted without a result (the drain stopped during delivery)",
          first.lastErrorClass ?? "max_attempts",
          out,
        );
        out.more = true;
        continue;
      }
      const stmts: Statement[] = [];
      let refused: { row: OutboxRow; error: unknown } | null = null;
      for (const row of group) {
        try {
          stmts.push(ctx.prepare(this, row));
        } catch (error) {
          refused = { row, error };
          break;
        }
      }
      if (refused !== null) {
        out.more = true;
        draft.more = true;
        if (!isHead) break; // it heads a later cycle and is handled then
        const { message, errorClass } = describeError(refused.error);
        const culprit = group.length > 1 ? `seq ${refused.row.seq} of the group of seq ${first.seq}: ` : "";
        if (refused.error instanceof UnsupportedStatementError || refused.error instanceof InvalidArgumentError) {
          this.#deadLetter(
            first,
            refused.error instanceof UnsupportedStatementError ? "unsupported_statement" : "undecodable",
            `${culprit}${message}`,
            errorClass,
            out,
          );
          continue;
        }
        // A head that failed for a reason we did not foresee counts as a failed attempt, never silently.
        outbox.recordAttempt(first.seq);
        this.#charge(first, first.attempts + 1, `${culprit}${message}`, errorClass, out);
        break;
      }
      for (let i = 0; i < group.length; i++) {
        const row = group[i]!;
        const bytes = row.tag.length + row.payload.length;
        row.tag = row.payload = ""; // the row is ours (read for this slice): its text lives on in stmt only
        draft.rows.push(row);
        draft.stmts.push(stmts[i]!);
        draft.rowBytes.push(bytes);
        draft.bytes += bytes;
        const span = row.grp === null ? undefined : read.spans.get(row.grp);
        if (span !== undefined) draft.spans.set(row.grp!, span);
      }
    }
    return draft.rows.length === 0 ? null : draft;
  }

  /** Opens a draft as this table's slice of the batch: its fence first, its head charged one attempt and the sent mark raised to its last row (before delivery). */
  openSlice(draft: SliceDraft, ctx: OpenContext): TableSlice {
    const last = draft.rows[draft.rows.length - 1]!.seq;
    const fenced = ctx.fence !== null;
    const stmts = fenced ? [ctx.fence!(this, this.#through!, last), ...draft.stmts] : draft.stmts;
    this.#outbox!.recordAttempt(draft.rows[0]!.seq, new Date(ctx.now), last);
    return { ...draft, stmts, fenced };
  }

  /** The read-ahead no longer describes the queue (another table's group moved rows of this one). */
  forgetReadAhead(): void {
    this.#ahead = null;
  }

  /**
   * While `slice` is in flight, reads and converts the groups that follow it, so the next cycle need
   * not: used only if the slice is applied whole (see plan). A group with a history (attempts, a
   * backoff) or a row that cannot be converted ends it: it is planned as usual, where it is dealt
   * with. A failure here only means the next cycle reads them itself.
   */
  readAhead(slice: TableSlice, ctx: PlanContext): void {
    this.#ahead = null;
    const outbox = this.#outbox;
    if (!outbox || !slice.fenced || !slice.more || this.#cutBefore !== null) return;
    const after = slice.rows[slice.rows.length - 1]!.seq;
    try {
      const read = outbox.readForDelivery(this.app.batchSize, ctx.maxBytes, () => true, after);
      const ahead: ReadAhead = {
        after,
        rows: [],
        stmts: [],
        rowBytes: [],
        bytes: 0,
        more: read.truncated,
        spans: read.spans,
      };
      const rows = read.rows;
      let end = 0;
      while (end < rows.length) {
        const next = endOfGroup(rows, end); // one group at a time, whole
        const stmts = this.#preparedAhead(rows, end, next, ctx);
        if (stmts === null) break;
        for (let i = end; i < next; i++) {
          const row = rows[i]!;
          const bytes = row.tag.length + row.payload.length;
          row.tag = row.payload = "";
          ahead.rows.push(row);
          ahead.stmts.push(stmts[i - end]!);
          ahead.rowBytes.push(bytes);
          ahead.bytes += bytes;
        }
        end = next;
      }
      ahead.more ||= end < read.rows.length || read.gap !== null;
      if (ahead.rows.length > 0) this.#ahead = ahead;
    } catch {
      this.#ahead = null;
    }
  }

  /** The statements of rows [from, to) read ahead, or null when one is charged already (its plan decides) or cannot be prepared. */
  #preparedAhead(rows: OutboxRow[], from: number, to: number, ctx: PlanContext): Statement[] | null {
    const stmts: Statement[] = [];
    for (let i = from; i < to; i++) {
      const row = rows[i]!;
      if (row.attempts > 0 || row.nextAttemptAt) return null;
      try {
        stmts.push(ctx.prepare(this, row));
      } catch {
        return null;
      }
    }
    return stmts;
  }

  /**
   * Applies the target's answer for this table's slice: all applied → confirmed (one local
   * transaction) and `through` moves to the slice's last seq; a failed head → charged (backoff or
   * dead letter); a failed row behind the head → nothing charged, the next slice stops before it;
   * a remote schema fault → the table is held, nothing charged; a fence that failed → settle from
   * the ledger next.
   */
  applyAnswer(
    slice: TableSlice,
    results: WriteResult[],
    now: number,
    groupAttempts: GroupAttempts = NO_GROUP_ATTEMPTS,
  ): TableOutcome & { ledgerMissing: boolean } {
    const out = this.#applyAnswer(slice, results, now, groupAttempts);
    this.#tally(out);
    return out;
  }

  #applyAnswer(
    slice: TableSlice,
    results: WriteResult[],
    now: number,
    groupAttempts: GroupAttempts,
  ): TableOutcome & { ledgerMissing: boolean } {
    const out = { ...none(), ledgerMissing: false };
    const outbox = this.#outbox!;
    const { rows } = slice;
    const head = rows[0]!;
    const answer = classifyAnswer(rows, slice.fenced, results);
    if ("okAfterFailure" in answer && answer.okAfterFailure !== null) {
      const seq = rows[answer.okAfterFailure]!.seq;
      this.logger.warn(
        `drain: writer ${this.target} reported seq ${seq} ok after a failure in namespace "${this.name}"; it stays queued`,
        { target: this.target, namespace: this.name, seq },
      );
    }
    try {
      switch (answer.kind) {
        case "applied": {
          const last = rows[rows.length - 1]!.seq;
          // Fenced: the ledger now says the remote applied them, so the local confirmation can wait
          // for the next batch to be in flight (confirmApplied); a crash before it is settled.
          if (slice.fenced) this.#through = this.#applied = last;
          else outbox.confirmThrough(last);
          this.#holds.release("remote schema");
          out.delivered = rows.length;
          return out;
        }
        case "ledger-unusable":
          outbox.refundAttempt(head.seq);
          this.#through = null;
          out.ledgerMissing = true;
          this.#holds.schema(`the ledger is not usable: ${answer.fence.error}`, now);
          out.more = true;
          return out;
        case "fence-moved":
          outbox.refundAttempt(head.seq);
          this.#through = null;
          this.logger.info(
            `drain: "${this.name}" on ${this.target}: its ledger row moved under this drain (a late commit or another drain); settling from the ledger`,
            {
              target: this.target,
              namespace: this.name,
              error_class: answer.fence.errorClass ?? null,
            },
          );
          out.more = true;
          return out;
        case "contract-broken":
          // Its fence may have committed for rows that were not applied: stop, loudly, rather than guess.
          this.#through = null;
          this.#holds.contract(
            `the writer of ${this.target} applied part of a namespace (seq ${head.seq}..${rows[answer.applied - 1]!.seq}) and failed the rest: with ledger = true a writer must apply a namespace whole or not at all (set ledger = false for a writer that cannot)`,
            now,
          );
          return out;
        case "prefix-applied": {
          // Part of a group, perhaps: without transactions a group cannot be kept whole.
          outbox.confirmThrough(rows[answer.applied - 1]!.seq);
          out.delivered = answer.applied;
          if (answer.failedAt === null) return out; // the rest was skipped: sent again next cycle
          const failed = rows[answer.failedAt]!;
          outbox.recordAttempt(failed.seq); // the failed row is the head now
          return this.#failed(slice, failed, failed, answer.failure!, now, out, groupAttempts);
        }
        case "failed-behind-head":
          // Not the head's fault: the groups before the failed one go first, then it heads the table.
          outbox.refundAttempt(head.seq);
          this.#cutBefore = rows[answer.groupStart]!.seq;
          out.more = true;
          return out;
        case "not-tried":
          outbox.refundAttempt(head.seq);
          return out;
        case "head-failed":
          return this.#failed(slice, head, rows[answer.failedAt]!, answer.failure, now, out, groupAttempts);
      }
    } catch (error) {
      // Local error while settling: the rows stay queued; settlement from the ledger decides later.
      this.#through = null;
      this.#holds.local(error, now, `settling a batch delivered to ${this.target}`);
      return out;
    }
  }

  /**
   * The head group failed at `culprit` (the row's fault, or the remote schema's): charge the group
   * (its head carries its attempts), or hold the table. The error names the culprit when its group
   * has other rows (in this slice, or in other tables).
   */
  #failed<T extends TableOutcome>(
    slice: TableSlice,
    head: OutboxRow,
    culprit: OutboxRow,
    result: Failure,
    now: number,
    out: T,
    groupAttempts: GroupAttempts,
  ): T {
    const error =
      typeof result.error === "string" && result.error ? result.error : "writer reported a failure without a message";
    const errorClass = typeof result.errorClass === "string" && result.errorClass ? result.errorClass : "unknown";
    if (result.remoteSchema) {
      this.#outbox!.refundAttempt(head.seq);
      this.#holds.schema(error, now);
      return out;
    }
    const grp = culprit.grp;
    const grouped = grp !== null && (slice.spans.has(grp) || slice.rows.some((r) => r.grp === grp && r !== culprit));
    const message = grouped ? `seq ${culprit.seq} of the group of seq ${grp}: ${error}` : error;
    const before = Math.max(head.attempts, head.grp === null ? 0 : (groupAttempts.get(head.grp) ?? 0));
    this.#charge(head, before + 1, message, errorClass, out);
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
      this.#holds.local(error, now, `confirming rows applied by ${this.target}`);
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
      this.logger.error(
        `drain: confirming the late answer for "${this.name}" failed; its rows are redelivered: ${describeError(error).message}`,
        { namespace: this.name },
      );
    }
  }

  /** Undoes the head's up-front charge after a batch that never got an answer (an outage); its sent mark stays for settlement. */
  refundOutage(slice: TableSlice): void {
    try {
      this.#outbox!.refundAttempt(slice.rows[0]!.seq);
    } catch (error) {
      this.logger.error(
        `drain: local error refunding seq ${slice.rows[0]!.seq} of namespace "${this.name}": ${describeError(error).message}`,
        { namespace: this.name, seq: slice.rows[0]!.seq },
      );
    }
  }

  /**
   * Prunes the delivered log per `retain_log_days` and replayed dead letters per
   * `retain_replayed_days`, in the background: one chunk at a time with a pause between of three
   * times the chunk's own time (PRUNE_PAUSE_MS at least), so producers of the file take its write
   * lock between chunks (SQLite's lock is not fair: chunks back to back would keep a producer
   * waiting for the whole prune; measured, a 4 M-row log pruned back to back kept one waiting
   * 1.4 s). A prune still running is not started twice.
   */
  prune(): Promise<void> {
    this.#pruning ??= this.#prune().finally(() => {
      this.#pruning = null;
    });
    return this.#pruning;
  }

  #pruning: Promise<void> | null = null;

  async #prune(): Promise<void> {
    let removed = 0;
    try {
      for (;;) {
        const outbox = this.#outbox;
        if (!outbox || outbox.closed) return;
        const started = performance.now();
        const step = outbox.pruneSyncLogStep(this.config.retainLogDays);
        removed += step.removed;
        if (step.done) break;
        // At most a quarter of the time: a producer retrying in SQLite's busy handler (1, 2, 5, 10 … ms)
        // then finds the lock free within a retry or two.
        await Bun.sleep(Math.max(PRUNE_PAUSE_MS, 3 * (performance.now() - started)));
      }
      if (removed > 0)
        this.logger.debug(`drain: pruned ${removed} delivered-log entries of "${this.name}"`, {
          namespace: this.name,
          rows: removed,
        });
      const replayed = this.#outbox?.pruneReplayedDead(this.app.retainReplayedDays) ?? 0;
      if (replayed > 0)
        this.logger.debug(`drain: pruned ${replayed} replayed dead letters of "${this.name}"`, {
          namespace: this.name,
          rows: replayed,
        });
    } catch (error) {
      this.logger.error(
        `drain: pruning the logs of "${this.name}" (${this.file}) failed: ${describeError(error).message}`,
        { namespace: this.name },
      );
    }
  }

  /**
   * Records a failed attempt of the group `row` heads (already charged: `attempts` includes it):
   * backs it off `2^attempts` units, or dead-letters the whole group once `max_attempts` is reached.
   */
  #charge(row: OutboxRow, attempts: number, message: string, errorClass: string, out: TableOutcome): void {
    const { app } = this;
    const delay = rowBackoffMs(attempts, app.backoffUnitMs, app.backoffCapMs);
    const at = this.now();
    this.#outbox!.recordFailure(row.seq, message, errorClass, new Date(at + delay), attempts);
    out.failed += 1;
    this.observer?.failed({
      target: this.target,
      table: this.name,
      head: row,
      errorClass,
      message,
      at,
      attempt: attempts,
      retryAt: at + delay,
    });
    if (app.maxAttempts !== null && attempts >= app.maxAttempts) {
      this.#deadLetter(row, "max_attempts", message, errorClass, out, {
        attempts,
        why: `on target ${this.target} after ${attempts} attempts`,
      });
      return;
    }
    const fields = {
      target: this.target,
      namespace: this.name,
      seq: row.seq,
      attempt: attempts,
      error_class: errorClass,
    };
    const what = row.grp === null ? `seq ${row.seq}` : `the group of seq ${row.seq}`;
    this.logger.warn(
      `drain: ${what} of namespace "${this.name}" failed on target ${this.target} (attempt ${attempts}${app.maxAttempts === null ? "" : `/${app.maxAttempts}`}, retry in ${Math.round(delay)} ms): ${message}`,
      fields,
    );
  }

  /**
   * Dead-letters the group `row` heads at once (undecodable, unsupported, out of attempts); the
   * log line says `why` (the reason by default) and the attempts made (the row's by default).
   */
  #deadLetter(
    row: OutboxRow,
    reason: string,
    message: string,
    errorClass: string,
    out: TableOutcome,
    { attempts = row.attempts, why = `(${reason})` } = {},
  ): void {
    const moved = this.#outbox!.deadLetter(row.seq, reason, message, errorClass);
    this.#counted(moved, out);
    this.observer?.deadLettered({
      target: this.target,
      table: this.name,
      head: row,
      errorClass,
      message,
      at: this.now(),
      reason,
      rows: moved.seqs.length,
    });
    this.logger.error(
      `drain: dead-lettered ${describeMoved(row.seq, moved)} of namespace "${this.name}" ${why}: ${message}`,
      { target: this.target, namespace: this.name, seq: row.seq, attempt: attempts, error_class: errorClass },
    );
  }

  /** Counts what a dead-lettering moved; the other tables of the file it touched are reported to the runner. */
  #counted(moved: DeadLettered, out: TableOutcome): void {
    out.deadLettered += moved.seqs.length;
    if (moved.others.length > 0) out.touched = [...(out.touched ?? []), ...moved.others];
  }
}

/** "seq 7", or "the group of seq 7 (3 rows, also in tables a, b)". */
function describeMoved(head: number, moved: DeadLettered): string {
  if (moved.seqs.length <= 1) return `seq ${head}`;
  return `the group of seq ${head} (${moved.seqs.length} rows${moved.others.length > 0 ? `, also in ${moved.others.map((t) => `"${t}"`).join(", ")}` : ""})`;
}

export { minWake };
