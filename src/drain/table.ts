import { existsSync } from "node:fs";
import type { AppConfig, TableConfig } from "../config/types.ts";
import { describeError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import type { Scheduler } from "../scheduler.ts";
import type { DrainQueue } from "../outbox/drain-queue.ts";
import type { NamespaceHealth } from "../outbox/health.ts";
import type { QueueDb } from "../outbox/queue-db.ts";
import { NotCreatedError } from "../outbox/sqlite-open.ts";
import type { OutboxRow, Resequenced } from "../outbox/outbox.ts";
import type { Statement, WriteResult } from "../writers/writer.ts";
import { classifyAnswer, type Failure } from "./answer.ts";
import { type Charged, HeadCharges } from "./charges.ts";
import type { DeliveryObserver } from "./observer.ts";
import { type Lane, type Plan, planSlice, type SlicePlan } from "./planner.ts";
import { BackgroundPrune } from "./prune.ts";
import { tableReadiness } from "./schedule.ts";
import { TableHolds } from "./table-hold.ts";
import { type LanesAfter, TableLanes } from "./table-lanes.ts";
import type { HoldReason, TableView } from "./views.ts";

/**
 * A table's rows read and converted for a batch, before its fence and its head's charge: whole
 * groups only, which the runner may still trim at a group boundary (a group that spans tables goes
 * only when it heads every table it touches). The rows keep their bookkeeping only; SQL text and
 * payload live on in `stmts` alone, so a large row is held in memory once, not twice.
 */
export interface SliceDraft extends SlicePlan {
  table: DrainTable;
  /** With lanes: where the table's next read starts and its confirmation stops, once this slice is applied whole. */
  lanes?: LanesAfter;
}

/** One table's part of a target's batch: the fence (when the target keeps a ledger), then its rows. */
export interface TableSlice extends SliceDraft {
  /** Its first statement is the fence that moves every ledger row its rows move (the target keeps a ledger). */
  fenced: boolean;
  /**
   * Sent behind another slice of this table still in flight (see openBehind): the through its fence
   * expects, where that one moves the ledger — with lanes, every slot's (see LaneMap), where the
   * ledger is once that one is applied.
   */
  behind?: number | readonly number[];
}

/** A slice the remote applied, as the table read it: its first and last seq, its rows, the first one's link. */
interface AppliedSlice {
  first: number;
  last: number;
  rows: number;
  firstPrev: number | null;
}

/** A draft read and converted ahead of its batch (see DrainTable.readAhead). */
interface ReadAhead extends SlicePlan {
  /** The last seq of the slice in flight when they were read: they follow it. */
  after: number;
  /** With lanes: what is known once it is applied (it is every pending row it read). */
  lanes?: LanesAfter;
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
  /** The fence statement that opens this table's slice, moving each of its ledger rows. */
  fence: ((table: DrainTable, moves: readonly LedgerMove[]) => Statement) | null;
}

/** One ledger row a slice moves (the table's name, or `name#lane`): from `through`, as this drain last saw it, to `last`. */
export interface LedgerMove {
  ledgerRow: string;
  through: number;
  last: number;
}

/** Opens one table's queue: its own file (db_dir), or its namespace of the app's db_file. */
export type QueueOpener = (table: DrainTable) => DrainQueue;

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
  /** Where the background prune's pauses come from. */
  scheduler: Scheduler;
}

/**
 * The attempts each group that spans tables has had, by group: the most any of its heads carries
 * (before this batch's charge). A failure is charged to the head in the table whose row failed;
 * when that is not always the same table, the count still goes on from the group's, not restart
 * from that head's own.
 */
export type GroupAttempts = ReadonlyMap<number, number>;
const NO_GROUP_ATTEMPTS: GroupAttempts = new Map();

/** No lane held back, no lane cut: what a plan of one lane starts from. */
const NO_LANES: ReadonlyMap<Lane, number> = new Map();
const NO_CUTS: ReadonlyMap<Lane, number> = new Map();

/** How many rows one page of settlement's scan for the applied prefix reads (with lanes), within the batch byte budget. */
const CONFIRM_SCAN_ROWS = 2_000;

/** Rows a table read, head first, in parts of at most `size` rows: what each of their confirmation transactions takes. */
function partsOf(rows: readonly OutboxRow[], size: number): AppliedSlice[] {
  const parts: AppliedSlice[] = [];
  for (let i = 0; i < rows.length; i += size) {
    const end = Math.min(rows.length, i + size) - 1;
    parts.push({ first: rows[i]!.seq, last: rows[end]!.seq, rows: end - i + 1, firstPrev: rows[i]!.prevSeq });
  }
  return parts;
}

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
 * One served table as the drain sees it, and the single owner of its drain state: its queue (the
 * only way the drain reaches the file), what this drain last saw of its ledger row (`through`),
 * what holds it back (`holds`), a cut that lets the rows before a failed row go first, and the
 * pipeline's applied-but-unconfirmed rows and read-ahead. The target's runner asks it to settle
 * from the ledger, to plan its slice of a batch (planner.ts decides, the table carries it out) and
 * to apply the answer (answer.ts decides); rows are confirmed in one place, `#confirm`.
 */
export class DrainTable {
  readonly name: string;
  /** Absolute path of `{db_dir}/{table}.db`, or of the app's `db_file`. */
  readonly file: string;
  #queue: DrainQueue | null = null;
  /** The file's origin id, once opened (kept after close, for the final drain state). */
  #origin: string | null = null;
  /** What holds this table back, if anything: changed only here, through the methods below. */
  readonly #holds: TableHolds;
  /** The ledger's `through` for this queue as this drain last saw or set it; null: settle first. */
  #through: number | null = null;
  /** Per lane, a row behind its head failed: the next slice stops before it in that lane, so the rows before it go first. */
  readonly #cuts = new Map<Lane, number>();
  /** A row's lane, and with lanes what this drain knows of each (see TableLanes). */
  readonly #laneState: TableLanes;
  /** With lanes: every pending row up to here is confirmed locally (no need to confirm to it again). */
  #confirmedUpTo = 0;
  /**
   * The last seq of a fenced slice the remote applied (its fence moved the ledger there) whose rows
   * are not confirmed locally yet: they are confirmed while the next batch is in flight, and the
   * next slice starts above it. Null when nothing waits.
   */
  #applied: number | null = null;
  /**
   * The slice `#applied` ends, as the table read it (every pending row from its first through
   * `#applied`), so its confirmation need not read it again: in parts of at most the queue's
   * confirmChunkRows rows, one confirmation transaction each, the next one to confirm first.
   * Null: confirmed by its bound.
   */
  #appliedParts: AppliedSlice[] | null = null;
  /** The next slice, read while the batch before it was in flight; used only if that batch was applied whole. */
  #ahead: ReadAhead | null = null;
  /** The queue had no history when opened: in compatibility mode, rows at or below the remote's
   *  MAX(outbox_seq) can then only be another queue's seqs (see compat.ts). */
  #freshQueue = false;
  /** Whether this table is delivered through a ledger (its slices are fenced); set by the runner that serves it. */
  #applyingFenced = false;
  /** Rows of this table delivered (settled from the ledger included), failed and dead-lettered since the drain started. */
  readonly counts = { delivered: 0, failed: 0, deadLettered: 0 };
  readonly #charges: HeadCharges;
  readonly #prune: BackgroundPrune;
  private readonly app: AppConfig;
  private readonly target: string;
  private readonly logger: Logger;
  private readonly opener: QueueOpener;
  private readonly now: () => number;

  constructor(
    readonly config: TableConfig,
    parts: TableParts,
  ) {
    ({ app: this.app, target: this.target, logger: this.logger, opener: this.opener, now: this.now } = parts);
    this.name = config.name;
    this.file = this.app.dbFile ?? `${this.app.dbDir}/${config.name}.db`;
    this.#laneState = new TableLanes(this.name, config.lanes);
    const { observer } = parts;
    this.#holds = new TableHolds({ table: this.name, target: this.target, file: this.file }, this.logger, observer);
    this.#charges = new HeadCharges({ ...parts, table: this.name });
    this.#prune = new BackgroundPrune({
      table: this.name,
      file: this.file,
      retainLogDays: config.retainLogDays,
      retainReplayedDays: this.app.retainReplayedDays,
      logger: this.logger,
      now: this.now,
      scheduler: parts.scheduler,
      queue: () => this.#queue,
    });
    // Compatibility mode: nothing is sent before the remote outbox_seq schema and the local seeding are done (compat.ts).
    if (config.injectOutboxSeq)
      this.#holds.wait(
        "compat setup",
        `the compatibility mode's setup on ${this.target} (the outbox_seq column and index, the local sequence seeded above the remote's) is not done yet`,
        this.now(),
      );
  }

  // ── holds ───────────────────────────────────────────────────────────────────────────────

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

  /**
   * Ends every timed hold now, so the table is tried at once (`kick`: the operator fixed the
   * cause); with lanes, the next read starts at the head, where each lane's hold is read again
   * (a head skipped or no longer backing off lets its lane go).
   */
  retryNow(now: number): void {
    this.#holds.retryNow(now);
    this.#laneState.restart();
  }

  /** Compatibility mode: whether the setup is still to do, and can be done now (the file open, no fault holding the table). */
  needsCompatSetup(now: number): boolean {
    return this.#holds.waitsFor("compat setup") && this.#queue !== null && !this.#holds.active(now);
  }

  /** The compatibility mode's setup is done: the table may be sent. */
  compatReady(): void {
    this.#holds.release("compat setup");
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

  /** True while held at `now`, waiting, or unopened. */
  held(now: number): boolean {
    return this.#queue === null || this.#holds.active(now) || this.#holds.waiting;
  }

  // ── the queue file ──────────────────────────────────────────────────────────────────────

  /** Whether the file is to be opened (not open, and no hold says wait). */
  wantsOpening(now: number): boolean {
    return this.#queue === null && !this.#holds.active(now);
  }

  /** Whether the queue file is open. */
  get isOpen(): boolean {
    return this.#queue !== null;
  }

  /** The file's origin id, once opened (kept after close). */
  get origin(): string | null {
    return this.#origin;
  }

  /** Pending rows of this table (0 while its file is not open). */
  pendingCount(): number {
    return this.#queue?.pendingCount() ?? 0;
  }

  /** What the drain's connection has seen of the file's commits (see CommitWatcher), or null while not open. */
  commitCounters(): { version: number; writes: number } | null {
    return this.#queue?.commitCounters() ?? null;
  }

  /** The open file, for the drain's checkpoints and the space it gives back (file-care.ts); null while not open. */
  openFile(): QueueDb | null {
    return this.#queue?.openFile() ?? null;
  }

  /** The queue delivered before: a delivered log, dead letters, a head linked back, or rows sent in a batch of unknown outcome. */
  hasDelivered(): boolean {
    const queue = this.#queue!;
    return queue.hasHistory() || queue.sentMark() > 0;
  }

  /**
   * Compatibility mode: raises the local sequence above the remote's MAX(outbox_seq) `max`; a fresh
   * queue whose head is at or below it, never sent, moves above it in order (rows under those seqs
   * would be absorbed as another queue's). Returns what moved, if anything.
   */
  raiseAbove(max: number): Resequenced | null {
    const queue = this.#queue!;
    queue.seedSequence(max);
    const head = queue.head();
    if (!head || head.seq > max || queue.sentMark() >= head.seq || !this.#freshQueue) return null;
    return queue.resequenceAbove(max);
  }

  /**
   * Opens the queue file unless open; a file that cannot be opened (corrupt, not an outbox file, a
   * newer format, no permission) holds this table only, is reported once and retried later.
   */
  open(now: number): boolean {
    if (this.#queue) return true;
    if (this.#holds.active(now)) return false;
    if (this.app.dbFile !== null && !existsSync(this.file)) {
      this.#holds.missing(now);
      return false;
    }
    try {
      this.#queue = this.opener(this);
      if (this.config.injectOutboxSeq) this.#freshQueue = !this.#queue.hasHistory(); // only the compatibility mode asks (compat.ts)
      this.#origin = this.#queue.origin;
      this.#holds.release("file");
      this.#checkLaneCount(this.#queue, now);
      return true;
    } catch (error) {
      if (error instanceof NotCreatedError) this.#holds.missing(now, error.state);
      else this.#holds.file(error, now);
      return false;
    }
  }

  /**
   * A key's lane depends on the lane count: rows sent under one count must not be delivered under
   * another — their ledger rows would not account for them, so rows a lane delivered ahead of a
   * held one, or a batch of unknown outcome, would land twice. While such rows are pending (at or
   * below the sent mark) the table is held; a queue whose pending rows were never sent takes the
   * new count.
   */
  #checkLaneCount(queue: DrainQueue, now: number): void {
    const recorded = queue.laneCount() ?? 1;
    if (recorded === this.lanes) return;
    const head = queue.head();
    if (head === null || head.seq > queue.sentMark()) {
      queue.recordLaneCount(this.lanes);
      return;
    }
    const pending = queue.pendingCount();
    this.#holds.lanesChanged(
      `lanes of "${this.name}" changed from ${recorded} to ${this.lanes} while ${pending} rows delivered with ${recorded} are pending: set lanes = ${recorded} again until the table is empty (sqloutbox status shows its depth), then change it and restart`,
      now,
    );
  }

  /** Closes the queue file (confirming first what a target applied). */
  close(): void {
    while (this.confirmApplied(this.now()));
    this.#queue?.close();
    this.#queue = null;
  }

  // ── views ───────────────────────────────────────────────────────────────────────────────

  /** The ledger's `through` this drain last saw (null: not settled yet). */
  get through(): number | null {
    return this.#through;
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
    if (this.lanes > 1) view.lanes = { count: this.lanes, held: this.#laneState.heldView(this.now()) };
    if (options.health) view.health = this.#health();
    return view;
  }

  #health(): NamespaceHealth | null {
    const queue = this.#queue;
    if (!queue || queue.closed) return null;
    try {
      return queue.health();
    } catch {
      return null; // a file that cannot be read now holds its table; the hold is what is shown
    }
  }

  /** Adds an outcome to this table's counts: every count is made here, where the outcome is decided. */
  #tally(outcome: Partial<TableOutcome>): void {
    this.counts.delivered += outcome.delivered ?? 0;
    this.counts.failed += outcome.failed ?? 0;
    this.counts.deadLettered += outcome.deadLettered ?? 0;
  }

  // ── settling from the ledger ────────────────────────────────────────────────────────────

  /** Settlement is needed before this table's next fenced batch. */
  get unsettled(): boolean {
    return this.#through === null;
  }

  /** Forgets the ledger view: the next batch settles from the ledger first (after an outage, a fence that failed). */
  unsettle(): void {
    this.#through = null;
    this.#laneState.unsettle();
  }

  /** How many lanes the table has (`lanes`): 1 is one strict order; more, one per key's lane (see lane-key.ts). */
  get lanes(): number {
    return this.#laneState.count;
  }

  /**
   * With lanes: applies what the ledger says of each of this queue's rows (`throughs`, by ledger
   * row; a row it lacks is at 0). The pending rows it applied from the head on are confirmed —
   * those that were sent (the sent mark): one at or below its lane's through that never was (a
   * file restored from a backup) moves every pending row above the highest through instead, never
   * confirmed unsent; the local sequence is raised above it. Returns how many rows were confirmed.
   * With `adopted` (migration from `outbox_seq` delivery), every pending row at or below it is
   * first confirmed as applied by the earlier drain.
   */
  settleLanes(throughs: ReadonlyMap<string, number>, options: { adopted?: number } = {}): number {
    const queue = this.#queue!;
    let confirmed = options.adopted ? this.#confirm(options.adopted) : 0;
    this.#tally({ delivered: confirmed });
    const lanes = this.#laneState;
    lanes.settle(throughs);
    const sent = queue.sentMark();
    let bound = 0;
    let restored = false;
    for (let after: number | null = null; ; ) {
      const read = queue.readForDelivery(CONFIRM_SCAN_ROWS, this.app.batchMaxBytes, () => true, after);
      let stopped = false;
      for (const row of read.rows) {
        if (!lanes.isApplied(row)) {
          stopped = true;
          break;
        }
        if (row.seq > sent) {
          restored = true;
          stopped = true;
          break;
        }
        bound = row.seq;
      }
      if (stopped || !read.truncated || read.rows.length === 0) break;
      after = read.rows[read.rows.length - 1]!.seq;
    }
    const settled = this.#confirm(bound);
    this.#tally({ delivered: settled });
    confirmed += settled;
    let highest = options.adopted ?? 0;
    for (const through of throughs.values()) highest = Math.max(highest, through);
    if (restored) {
      const moved = queue.resequenceAbove(highest);
      if (moved)
        this.logger.warn(
          `drain: "${this.name}" on ${this.target}: the ledger says this queue's lanes applied rows up to seq ${highest} that were never sent (a queue file restored from an older copy?); moved pending rows ${moved.oldFirst}..${moved.oldLast}, in order, to ${moved.newFirst}..${moved.newLast} so they are delivered, not mistaken for applied`,
          { target: this.target, namespace: this.name, seq: moved.oldFirst, rows: moved.count },
        );
    }
    if (highest > 0) queue.seedSequence(highest);
    this.#through = throughs.get(this.name) ?? 0;
    this.#applied = this.#appliedParts = null;
    this.#ahead = null;
    // The cuts stay: a row that failed behind its lane's head still waits until it heads the lane
    // (a batch behind the failed one settles the table; forgetting them would send it behind again).
    return confirmed;
  }

  /** The runner's target keeps a ledger: slices are fenced, and nothing is planned before settlement. */
  fencedByLedger(): void {
    this.#applyingFenced = true;
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
    const queue = this.#queue!;
    const through = Math.max(remote ?? 0, options.adopted ?? 0);
    let confirmed = options.adopted ? this.#confirm(options.adopted) : 0;
    this.#tally({ delivered: confirmed });
    // Rows a target applied whose local confirmation failed were counted when applied.
    if (this.#applied !== null) this.#confirm(Math.min(this.#applied, through));
    // The sent mark is never lowered here: a batch the ledger does not show yet may still commit
    // (an uncommitted INSERT of the ledger row is invisible to a locking read on PostgreSQL).
    const settled = this.#confirm(Math.min(queue.sentMark(), through));
    this.#tally({ delivered: settled });
    confirmed += settled;
    const head = queue.head();
    if (head && head.seq <= through) {
      const moved = queue.resequenceAbove(through);
      if (moved) {
        this.logger.warn(
          `drain: "${this.name}" on ${this.target}: the ledger says this queue applied up to seq ${through}, but pending rows ${moved.oldFirst}..${moved.oldLast} were never sent (a queue file restored from an older copy?); moved them, in order, to ${moved.newFirst}..${moved.newLast} so they are delivered, not mistaken for applied`,
          { target: this.target, namespace: this.name, seq: moved.oldFirst, rows: moved.count },
        );
      }
    }
    if (through > 0) queue.seedSequence(through);
    this.#through = through;
    this.#applied = this.#appliedParts = null; // the sent mark covers every row a fence moved the ledger past: confirmed above
    this.#ahead = null;
    return confirmed;
  }

  // ── planning ────────────────────────────────────────────────────────────────────────────

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
        ahead !== null && this.#aheadStillFollows(ahead, ctx.maxBytes)
          ? { table: this, ...ahead }
          : this.#readAndPlan(ctx, out);
      if (draft !== null) out.more ||= draft.more;
      this.#holds.release("local");
      return { draft, outcome: out };
    } catch (error) {
      this.#holds.local(error, now, "planning");
      return { draft: null, outcome: out };
    }
  }

  /** Reads the ready rows from the head (one read transaction), has the planner plan them, and carries out what it decided for the head. */
  #readAndPlan(ctx: PlanContext, out: TableOutcome): SliceDraft | null {
    const queue = this.#queue!;
    const { now } = ctx;
    const lanes = this.lanes > 1;
    const laneState = this.#laneState;
    if (lanes) laneState.liftHolds(now);
    const knobs = { threshold: this.app.tableFlushThreshold, maxWaitMs: this.app.tableMaxWaitMs };
    const read = queue.readForDelivery(
      this.app.batchSize,
      ctx.maxBytes,
      (head, pending) => {
        const readiness = tableReadiness(head, pending, now, knobs, ctx.force, lanes);
        out.wakeAt = readiness.wakeAt;
        return readiness.ready;
      },
      lanes ? laneState.cursor : this.#applied,
      lanes ? (row) => laneState.isApplied(row) : null,
    );
    const { cursor, frontier } = laneState;
    const seen = Math.max(read.rows.at(-1)?.seq ?? 0, read.passedOver ?? 0, cursor ?? 0) || null;
    // A row still pending behind the cursor (a held lane's, not read again) bounds the confirmation;
    // one at or after it is read again, and this read says whether it is still pending.
    const behind = cursor !== null && frontier !== null && frontier <= cursor ? frontier : null;
    if (read.head === null) {
      if (!lanes || cursor === null) this.#cuts.clear();
      // With lanes, every row read was applied already: the confirmation may go up to them.
      if (lanes) this.#moveOn({ planned: [], cursor: seen, frontier: behind, lastRead: seen, whole: false });
      return null;
    }
    if (read.rows.length === 0) {
      if (read.gap) this.#holds.gap(read.gap.seq, read.gap.prevSeq, now);
      return null;
    }
    this.#holds.release("chain gap");
    const plan = planSlice({
      rows: read.rows,
      spans: read.spans,
      more: read.truncated,
      position: "head",
      lanes: this.lanes,
      laneOf: (row) => laneState.of(row),
      blocked: lanes ? laneState.blocked : NO_LANES,
      cuts: this.#cuts,
      nowMs: now,
      maxAttempts: this.app.maxAttempts,
      prepare: (row) => ctx.prepare(this, row),
    });
    this.#carryOut(queue, plan, out);
    if (lanes) {
      for (const until of plan.backingOff.values()) out.wakeAt = minWake(out.wakeAt, until);
      const after: LanesAfter = {
        planned: plan.slice?.rows.map((r) => r.seq) ?? [],
        cursor: plan.resumeAt !== null ? plan.resumeAt - 1 : seen,
        frontier: behind ?? plan.frontier,
        lastRead: seen,
        whole:
          behind === null &&
          read.passedOver === null &&
          plan.frontier === null &&
          plan.deadLetters.length === 0 &&
          plan.slice?.rows.length === read.rows.length,
      };
      laneState.planned(plan);
      if (plan.slice === null)
        this.#moveOn({ ...after, whole: false }); // nothing to send: the next read starts there at once
      else return { table: this, ...plan.slice, lanes: after };
    }
    return plan.slice === null ? null : { table: this, ...plan.slice };
  }

  /**
   * With lanes: what is known once a plan's slice (if any) was applied whole (see TableLanes.moveOn)
   * — the local confirmation may go up to the first row still pending.
   */
  #moveOn(after: LanesAfter): void {
    const bound = this.#laneState.moveOn(after);
    if (bound > this.#confirmedUpTo && bound > (this.#applied ?? 0)) {
      this.#applied = bound;
      this.#appliedParts = null; // not one run of the queue: confirmed by its bound
    }
  }

  /** What the planner decided for the heads: cuts passed, head groups dead-lettered, heads charged. */
  #carryOut(queue: DrainQueue, plan: Plan, out: TableOutcome): void {
    for (const lane of plan.cutsPassed) this.#cuts.delete(lane);
    out.more ||= plan.more;
    for (const dead of plan.deadLetters) {
      // Out of attempts that were charged but never answered: the drain died delivering it, again and again.
      this.#charged(this.#charges.deadLetter(queue, dead.row, dead.reason, dead.message, dead.errorClass), out);
    }
    for (const { row, message, errorClass, lanes } of plan.charges) {
      queue.recordAttempt(row.seq, new Date(this.now()));
      const charged = this.#charges.failed(queue, row, row.attempts + 1, message, errorClass);
      this.#charged(charged, out);
      if (charged.retryAt !== null) for (const lane of lanes) plan.backingOff.set(lane, charged.retryAt);
    }
  }

  /** Adds what a charge or dead letter did to the outcome; other tables whose rows moved are reported to the runner. */
  #charged(charged: Charged, out: TableOutcome): void {
    out.failed += charged.failed;
    out.deadLettered += charged.deadLettered;
    if (charged.touched.length > 0) out.touched = [...(out.touched ?? []), ...charged.touched];
  }

  /**
   * Opens a draft as this table's slice of the batch: its fences first (one per ledger row its
   * rows move: the table's, or with lanes each lane's it touches), its first row charged one
   * attempt and the sent mark raised to its last row (before delivery).
   */
  openSlice(draft: SliceDraft, ctx: OpenContext, behind?: number | readonly number[]): TableSlice {
    const last = draft.rows[draft.rows.length - 1]!.seq;
    const fence = ctx.fence;
    let moves: LedgerMove[] = [];
    if (fence !== null && this.lanes === 1)
      moves = [{ ledgerRow: this.name, through: typeof behind === "number" ? behind : this.#through!, last }];
    else if (fence !== null) {
      const { map } = this.#laneState;
      const slots = draft.rows.map((row) => map.slotOf(row));
      const lastOf = new Array<number>(this.lanes + 1).fill(0);
      for (let i = 0; i < slots.length; i++) lastOf[slots[i]!] = draft.rows[i]!.seq;
      for (let slot = 0; slot <= this.lanes; slot++)
        if (lastOf[slot]! > 0)
          moves.push({
            ledgerRow: map.ledgerRow(slot),
            through: typeof behind === "object" ? behind[slot]! : this.#laneState.throughAt(slot),
            last: lastOf[slot]!,
          });
      if (draft.lanes !== undefined) draft.lanes.slots = slots;
    }
    if (draft.lanes !== undefined && draft.rows.length < draft.lanes.planned.length) {
      // The runner kept only part (a transaction across tables waits): what it left is read again.
      const left = draft.lanes.planned[draft.rows.length]!;
      draft.lanes.cursor = Math.min(draft.lanes.cursor ?? left - 1, left - 1);
      draft.lanes.frontier = Math.min(draft.lanes.frontier ?? left, left);
      draft.lanes.whole = false;
    }
    this.#queue!.recordAttempt(draft.rows[0]!.seq, new Date(ctx.now), last);
    const stmts = fence === null ? draft.stmts : [fence(this, moves), ...draft.stmts];
    return { ...draft, stmts, fenced: fence !== null, ...(behind === undefined ? {} : { behind }) };
  }

  /**
   * With `ahead` in flight (a writer that takes concurrent calls): the rows that follow it, read
   * while it was on its way or now (see readAhead), opened as the next slice at once, fenced
   * behind it — its fence expects the ledger row where `ahead` moves it. In the remote it waits on
   * that row's lock until `ahead` commits, then moves it on; if `ahead` rolls back (or its fence
   * comes later), it fails and the table settles from the ledger. So slices in flight together
   * commit in order, or not at all. With lanes, each lane's row where `ahead` moves it, or where
   * it is for a lane `ahead` has no row of; only while no lane is held and `ahead` took every
   * pending row it read. Only over ledger rows an answer showed committed, and when the following
   * rows hold no transaction across tables; null otherwise.
   */
  openBehind(ahead: TableSlice, plan: PlanContext, open: OpenContext): TableSlice | null {
    if (!ahead.fenced || open.fence === null) return null;
    // Only over a ledger row an answer showed committed (through above 0): a fence that finds no
    // row inserts it, guard or not, and would commit ahead of the slice that was to create it.
    if (this.lanes === 1 ? !(this.#through! > 0) : !this.#lanesClear(ahead)) return null;
    // Read while `ahead` was on its way (Delivery.readAhead), or now.
    const after = ahead.rows[ahead.rows.length - 1]!.seq;
    if (this.#ahead === null || this.#ahead.after !== after || this.#ahead.bytes > plan.maxBytes)
      this.readAhead(ahead, plan);
    const read = this.#ahead;
    this.#ahead = null;
    if (read === null || read.spans.size > 0) return null;
    const { after: expected, ...draft } = read;
    if (this.lanes === 1) return this.openSlice({ table: this, ...draft }, open, expected);
    const throughs = this.#laneState.throughsBehind(ahead.rows, ahead.lanes!.slots, draft.rows);
    return throughs === null ? null : this.openSlice({ table: this, ...draft }, open, throughs);
  }

  /** With lanes: `ahead` took every pending row it read, and no lane is held — the rows after it are the lanes' next. */
  #lanesClear(ahead: TableSlice): boolean {
    return ahead.lanes?.whole === true && this.#lanesFree();
  }

  /** With lanes: the table is settled and nothing holds a lane back (no backoff, no held head, no cut). */
  #lanesFree(): boolean {
    return this.#through !== null && this.#laneState.free && this.#cuts.size === 0;
  }

  /**
   * Whether rows read ahead are what a plan would read now: they follow the slice last applied
   * whole and fit the budget — with lanes, the next read starts right after that slice and no lane
   * was held since.
   */
  #aheadStillFollows(ahead: ReadAhead, maxBytes: number): boolean {
    if (ahead.after !== this.#applied || ahead.bytes > maxBytes) return false;
    return this.lanes === 1 || (this.#laneState.cursor === ahead.after && this.#lanesFree());
  }

  /** Whether the ledger, as this drain knows it, is where a slice behind another expects it (with lanes, every slot: see TableLanes.asExpected): that one was applied. */
  #asExpected(behind: number | readonly number[]): boolean {
    if (typeof behind === "number") return this.#through === behind;
    return this.#through !== null && this.#laneState.asExpected(behind);
  }

  /** The read-ahead no longer describes the queue (another table's group moved rows of this one). */
  forgetReadAhead(): void {
    this.#ahead = null;
  }

  /**
   * While `slice` is in flight, reads and converts the groups that follow it, so the next cycle need
   * not: used only if the slice is applied whole (see plan). A group with a history (attempts, a
   * backoff) or a row that cannot be converted ends it: it is planned as usual, where it is dealt
   * with. With lanes (for a slice behind it only: see openBehind), nothing may be left pending among
   * the rows it read. A failure here only means the next cycle reads them itself.
   */
  readAhead(slice: TableSlice, ctx: PlanContext): void {
    this.#ahead = null;
    const queue = this.#queue;
    if (!queue || !slice.fenced || !slice.more || this.#cuts.size > 0) return;
    const lanes = this.lanes > 1;
    if (lanes && !this.#lanesClear(slice)) return;
    const after = slice.rows[slice.rows.length - 1]!.seq;
    try {
      const read = queue.readForDelivery(
        this.app.batchSize,
        ctx.maxBytes,
        () => true,
        after,
        lanes ? (row) => this.#laneState.isApplied(row) : null,
      );
      const plan = planSlice({
        rows: read.rows,
        spans: read.spans,
        more: read.truncated || read.gap !== null,
        position: "after",
        lanes: this.lanes,
        laneOf: lanes ? (row) => this.#laneState.of(row) : () => 0,
        blocked: NO_LANES,
        cuts: NO_CUTS,
        nowMs: ctx.now,
        maxAttempts: this.app.maxAttempts,
        prepare: (row) => ctx.prepare(this, row),
      });
      if (plan.slice === null) return;
      if (!lanes) {
        this.#ahead = { after, ...plan.slice };
        return;
      }
      const taken = plan.slice.rows;
      if (read.passedOver !== null || plan.frontier !== null || taken.length !== read.rows.length) return;
      const last = taken[taken.length - 1]!.seq;
      const applied: LanesAfter = {
        planned: taken.map((r) => r.seq),
        cursor: last,
        frontier: null,
        lastRead: last,
        whole: true,
      };
      this.#ahead = { after, ...plan.slice, lanes: applied };
    } catch {
      this.#ahead = null;
    }
  }

  // ── the answer ──────────────────────────────────────────────────────────────────────────

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
    const queue = this.#queue!;
    const { rows } = slice;
    const head = rows[0]!;
    if (slice.behind !== undefined && !this.#asExpected(slice.behind)) {
      // The slice ahead of it did not leave the ledger where its fence expects (it failed, was
      // lost, or could not be confirmed): it committed only if the ledger says so.
      queue.refundAttempt(head.seq);
      this.#through = null;
      out.more = true;
      return out;
    }
    const answer = classifyAnswer(
      rows,
      slice.fenced,
      results,
      this.lanes === 1 ? undefined : this.#laneState.leads(rows),
    );
    // With lanes, a read after anything but a slice applied whole starts at the head again.
    if (this.lanes > 1 && answer.kind !== "applied") this.#laneState.restart();
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
          if (slice.fenced && slice.lanes !== undefined) this.#appliedLanes(slice, slice.lanes);
          else if (slice.fenced) {
            // Rows applied earlier and not confirmed yet (their confirmation failed) go by the bound.
            this.#appliedParts = this.#applied === null ? partsOf(rows, queue.confirmChunkRows) : null;
            this.#through = this.#applied = last;
          } else this.#confirm(last);
          this.#holds.release("remote schema");
          out.delivered = rows.length;
          return out;
        }
        case "ledger-unusable":
          queue.refundAttempt(head.seq);
          this.#through = null;
          out.ledgerMissing = true;
          this.#holds.schema(`the ledger is not usable: ${answer.fence.error}`, now);
          out.more = true;
          return out;
        case "fence-moved":
          queue.refundAttempt(head.seq);
          this.#through = null;
          // Behind a slice in flight: it reached the remote before that one's fence took the ledger row
          // (the two connections raced; rare but for a link of no length), or that one failed.
          if (slice.behind !== undefined)
            this.logger.debug(
              `drain: "${this.name}" on ${this.target}: a batch behind another failed its fence (${answer.fence.error}); settling from the ledger`,
              { target: this.target, namespace: this.name },
            );
          else
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
            `the writer of ${this.target} applied part of a namespace (${answer.applied === 0 ? "its ledger fence" : `seq ${head.seq}..${rows[answer.applied - 1]!.seq}`}) and failed the rest: with ledger = true a writer must apply a namespace whole or not at all (set ledger = false for a writer that cannot)`,
            now,
          );
          return out;
        case "prefix-applied": {
          // Part of a group, perhaps: without transactions a group cannot be kept whole.
          this.#confirm(rows[answer.applied - 1]!.seq);
          out.delivered = answer.applied;
          if (answer.failedAt === null) return out; // the rest was skipped: sent again next cycle
          const failed = rows[answer.failedAt]!;
          queue.recordAttempt(failed.seq, new Date(now)); // the failed row is the head now
          return this.#failed(slice, failed, failed, answer.failure!, now, out, groupAttempts);
        }
        case "failed-behind-head":
          // Not the head's fault: the groups before the failed one go first, then it heads the table.
          queue.refundAttempt(head.seq);
          for (const lane of this.#laneState.ofGroup(rows, answer.groupStart))
            this.#cuts.set(lane, rows[answer.groupStart]!.seq);
          out.more = true;
          return out;
        case "not-tried":
          queue.refundAttempt(head.seq);
          return out;
        case "head-failed": {
          // With lanes the failed group may lead its lanes behind another's: that one's up-front charge goes back.
          const leader = rows[answer.groupStart]!;
          if (leader !== head) queue.refundAttempt(head.seq);
          return this.#failed(slice, leader, rows[answer.failedAt]!, answer.failure, now, out, groupAttempts);
        }
      }
    } catch (error) {
      // Local error while settling: the rows stay queued; settlement from the ledger decides later.
      this.#through = null;
      this.#holds.local(error, now, `settling a batch delivered to ${this.target}`);
      return out;
    }
  }

  /**
   * With lanes, a slice applied whole: each ledger row it moved is at its last row now, the next
   * read starts where the plan said, and the local confirmation may go up to the first row still
   * pending (every row before it is applied: in this slice, or earlier and passed over).
   */
  #appliedLanes(slice: TableSlice, after: LanesAfter): void {
    const { rows } = slice;
    const last = rows[rows.length - 1]!.seq;
    this.#through = this.#laneState.applied(rows, after.slots, this.#through);
    this.#moveOn(after);
    // Nothing held, nothing passed over: the slice is the queue's prefix, confirmed as read.
    if (after.whole && this.#applied === last) this.#appliedParts = partsOf(rows, this.#queue!.confirmChunkRows);
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
    const queue = this.#queue!;
    if (result.remoteSchema) {
      queue.refundAttempt(head.seq);
      this.#holds.schema(error, now);
      return out;
    }
    const grp = culprit.grp;
    const grouped = grp !== null && (slice.spans.has(grp) || slice.rows.some((r) => r.grp === grp && r !== culprit));
    const message = grouped ? `seq ${culprit.seq} of the group of seq ${grp}: ${error}` : error;
    const before = Math.max(head.attempts, head.grp === null ? 0 : (groupAttempts.get(head.grp) ?? 0));
    this.#charged(this.#charges.failed(queue, head, before + 1, message, errorClass), out);
    out.more = true; // re-plan: the next head may be ready
    return out;
  }

  // ── confirmation ────────────────────────────────────────────────────────────────────────

  /** Rows a target applied wait for their local confirmation. */
  get hasApplied(): boolean {
    return this.#applied !== null;
  }

  /**
   * Confirms locally the next part of the rows a target applied (see `#applied`): sync log + delete
   * in one transaction of at most the queue's confirmChunkRows rows, from the head. Returns true
   * while some are left: call again — the runner lets the event loop turn in between, and the
   * file's other writers (the application's, in its own database) take the lock. A crash between
   * two parts leaves a prefix confirmed; settlement from the ledger confirms the rest. A local
   * failure holds the table and keeps them waiting (false): the next try, or settlement, confirms
   * them (without counting them again).
   */
  confirmApplied(now: number): boolean {
    const bound = this.#applied;
    const queue = this.#queue;
    if (bound === null || !queue) return false;
    try {
      const chunk = queue.confirmChunkRows;
      const confirmed = this.#confirm(bound, chunk, true);
      if (this.#appliedParts === null ? confirmed >= chunk : this.#appliedParts.length > 0) return true;
      this.#confirmedUpTo = Math.max(this.#confirmedUpTo, bound);
      this.#applied = this.#appliedParts = null;
    } catch (error) {
      this.#through = null;
      this.#holds.local(error, now, `confirming rows applied by ${this.target}`);
    }
    return false;
  }

  /**
   * The late answer of a timed-out batch without a ledger (see Delivery): the rows of this slice it
   * reports applied, from the head on, are confirmed and counted; the rest are delivered again.
   */
  applyLateAnswer(slice: TableSlice, answers: WriteResult[]): void {
    let ok = 0;
    while (ok < slice.rows.length && answers[ok]!.ok) ok++;
    if (ok === 0 || !this.#queue) return;
    try {
      this.#confirm(slice.rows[ok - 1]!.seq);
      this.#tally({ delivered: ok });
    } catch (error) {
      this.logger.error(
        `drain: confirming the late answer for "${this.name}" failed; its rows are redelivered: ${describeError(error).message}`,
        { namespace: this.name },
      );
    }
  }

  /**
   * The one place rows are confirmed locally: every pending row at or below `bound` (or the first
   * `maxRows` of them) goes to the delivered log and is deleted, in transactions of at most the
   * queue's confirmChunkRows rows. Returns how many. `asRead`: the next of `#appliedParts` instead,
   * without reading its rows again, when the queue still holds exactly those rows (its head first);
   * when it does not, the parts are dropped and the rows go by the bound.
   */
  #confirm(bound: number, maxRows = Number.POSITIVE_INFINITY, asRead = false): number {
    if (bound <= 0) return 0; // every seq is 1 or more
    const queue = this.#queue!;
    const part = asRead ? this.#appliedParts?.[0] : undefined;
    if (part !== undefined && part.last <= bound) {
      if (queue.confirmSlice(part)) {
        this.#appliedParts!.shift();
        return part.rows;
      }
      this.#appliedParts = null; // not as read (an operator moved a row meanwhile): by the bound from here on
    }
    return queue.confirmThrough(bound, maxRows);
  }

  /** Undoes the head's up-front charge after a batch that never got an answer (an outage); its sent mark stays for settlement. */
  refundOutage(slice: TableSlice): void {
    try {
      this.#queue!.refundAttempt(slice.rows[0]!.seq);
    } catch (error) {
      this.logger.error(
        `drain: local error refunding seq ${slice.rows[0]!.seq} of namespace "${this.name}": ${describeError(error).message}`,
        { namespace: this.name, seq: slice.rows[0]!.seq },
      );
    }
  }

  // ── housekeeping ────────────────────────────────────────────────────────────────────────

  /** Prunes the delivered log and replayed dead letters in the background (see BackgroundPrune); a prune still running is not started twice. */
  prune(): Promise<void> {
    return this.#prune.start();
  }

  /** A background prune, while one runs: the close waits for it. */
  get pruning(): Promise<void> | null {
    return this.#prune.running;
  }
}

export { minWake };
