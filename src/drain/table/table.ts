import type { TableConfig } from "../../config/types.ts";
import { tableFile } from "../../outbox/files.ts";
import type { OutboxRow, Resequenced } from "../../outbox/outbox.ts";
import type { QueueDb } from "../../outbox/queue-db.ts";
import type { WriteResult } from "../../writers/writer.ts";
import { minWake } from "../schedule.ts";
import type { HoldReason, TableView } from "../views.ts";
import { type AnsweredParts, applyTableAnswer } from "./answered.ts";
import type { HeadCharges } from "./charges.ts";
import type { HoldCause, TableHolds } from "./holds.ts";
import type { TableLanes } from "./lanes.ts";
import type { Lane } from "./planner.ts";
import { type HeadPlanning, noOutcome, type TableOutcome, withoutGroups } from "./planning.ts";
import type { TableProgress } from "./progress.ts";
import type { BackgroundPrune } from "./prune.ts";
import type { TableDoubt } from "./doubt.ts";
import type { TableFile } from "./file.ts";
import type { ReadAhead } from "./read-ahead.ts";
import type { TableTenants } from "./tenants.ts";
import { tableWing } from "./wing.ts";
import type {
  GroupAttempts,
  OpenContextOf,
  PlanContextOf,
  SliceDraftOf,
  TablePartsOf,
  TableSliceOf,
  WaitingGroup,
} from "./slice.ts";

export type { HoldCause } from "./holds.ts";
export type { TableOutcome } from "./planning.ts";

export type { LedgerMove, GroupAttempts } from "./slice.ts";
/** A table's draft of a batch (see SliceDraftOf). */
export type SliceDraft = SliceDraftOf<DrainTable>;
/** A table's slice of a batch (see TableSliceOf). */
export type TableSlice = TableSliceOf<DrainTable>;
export type PlanContext = PlanContextOf<DrainTable>;
export type OpenContext = OpenContextOf<DrainTable>;
export type TableParts = TablePartsOf<DrainTable>;
/** Opens one table's queue: its own file (db_dir), or its namespace of the app's db_file. */
export type QueueOpener = TableParts["opener"];

const NO_GROUP_ATTEMPTS: GroupAttempts = new Map();

/**
 * One served table as the drain sees it: the one owner of its drain state and its face to the
 * target's runner. It holds its queue (the only way the drain reaches the file) and its parts,
 * each the one writer of its own state: what holds it back (holds.ts), how far it came (progress.ts:
 * the ledger's through as last seen, the applied rows waiting for their confirmation, the cuts),
 * its lanes (lanes.ts), what its plans from the head held back (planning.ts) and what it read
 * ahead of a slice in flight (read-ahead.ts). The runner asks it to settle from the ledger, plan
 * its slice (planner.ts decides), open it, and apply the answer (answered.ts; answer.ts decides).
 */
export class DrainTable {
  readonly name: string;
  /** Absolute path of `{db_dir}/{table}.db`, or of the app's `db_file`. */
  readonly file: string;
  readonly #file: TableFile;
  readonly #holds: TableHolds;
  readonly #lanes: TableLanes;
  readonly #progress: TableProgress;
  readonly #planning: HeadPlanning;
  readonly #ahead: ReadAhead;
  readonly #charges: HeadCharges;
  readonly #prune: BackgroundPrune;
  readonly #answerParts: AnsweredParts;
  readonly #doubt: TableDoubt;
  /** Whether this table is delivered through a ledger (its slices are fenced); set by the runner that serves it. */
  #applyingFenced = false;
  /** Rows of this table delivered (settled from the ledger too), failed and dead-lettered since the drain started. */
  readonly counts = { delivered: 0, failed: 0, deadLettered: 0 };
  /** What a tenant template reads and settles of this table, tenant by tenant. */
  readonly tenants: TableTenants;

  constructor(
    readonly config: TableConfig,
    private readonly parts: TableParts,
  ) {
    this.name = config.name;
    this.file = tableFile(parts.app, config.name);
    ({
      file: this.#file,
      holds: this.#holds,
      lanes: this.#lanes,
      progress: this.#progress,
      planning: this.#planning,
      ahead: this.#ahead,
      charges: this.#charges,
      prune: this.#prune,
      doubt: this.#doubt,
      answerParts: this.#answerParts,
      tenants: this.tenants,
    } = tableWing(config, this.file, parts, () => parts.opener(this), {
      held: (now) => this.held(now),
      settled: (confirmed, throughs, tenant) => this.#settled(confirmed, throughs, tenant),
      unsettle: (tenant) => this.unsettle(tenant),
    }));
  }

  /** A cause found outside the table's own work (see TableHolds.hold). */
  hold(cause: HoldCause, now: number): void {
    this.#holds.hold(cause, now);
  }

  /** The cause of `reason` is gone. */
  release(reason: HoldReason): void {
    this.#holds.release(reason);
  }

  /**
   * Ends every timed hold now (`kick`); with lanes, the next read starts at the head, where each lane's hold
   * is read again.
   */
  retryNow(now: number): void {
    this.#holds.retryNow(now);
    this.#lanes.restart();
    this.#progress.rescanPrefix();
  }

  /**
   * Compatibility mode: whether the setup is still to do, and can be done now (the file open, no fault
   * holding the table).
   */
  needsCompatSetup(now: number): boolean {
    return this.#holds.waitsFor("compat setup") && this.#file.queue !== null && !this.#holds.active(now);
  }

  /**
   * The compatibility mode's setup is done, the remote at MAX(outbox_seq) `max`: the queue is raised
   * above it (see TableFile.raiseAbove; returns what moved) and the table may be sent.
   */
  compatReady(max: number): Resequenced | null {
    const moved = max > 0 ? this.#file.raiseAbove(max) : null;
    this.#holds.release("compat setup");
    return moved;
  }

  /** A timed-out batch carrying this table (no ledger) may still commit: the table waits for its answer. */
  awaitLateAnswer(now: number): void {
    this.#holds.wait("late answer", now);
  }

  /** The timed-out batch answered, or failed: the table may be sent again. */
  lateAnswerCame(): void {
    this.#holds.release("late answer");
  }

  /** When a timed hold of the table is retried (epoch ms), if one keeps it back at `now`; null otherwise. */
  retryAt(now: number): number | null {
    return this.#holds.retryAt(now);
  }

  /** True while held at `now`, waiting, or unopened. */
  held(now: number): boolean {
    return this.#file.queue === null || this.#holds.active(now) || this.#holds.waiting;
  }

  /** Whether the file is to be opened (not open, and no hold says wait). */
  wantsOpening(now: number): boolean {
    return this.#file.queue === null && !this.#holds.active(now);
  }

  /** Whether the queue file is open. */
  get isOpen(): boolean {
    return this.#file.queue !== null;
  }

  /** The file's origin id, once opened (kept after close). */
  get origin(): string | null {
    return this.#file.origin;
  }

  /** Pending rows of this table (0 while its file is not open). */
  pendingCount(): number {
    return this.#file.queue?.pendingCount() ?? 0;
  }

  /** What the drain's connection has seen of the file's commits (see CommitWatcher), or null while not open. */
  commitCounters(): { version: number; writes: number } | null {
    return this.#file.queue?.commitCounters() ?? null;
  }

  /** The open file, for the drain's checkpoints and the space it gives back (file-care.ts); null while not open. */
  openFile(): QueueDb | null {
    return this.#file.queue?.openFile() ?? null;
  }

  /** See TableFile.hasDelivered. */
  hasDelivered(): boolean {
    return this.#file.hasDelivered();
  }

  /** Opens the queue file unless open (see TableFile); false when it cannot be now. */
  open(now: number): boolean {
    if (!this.#file.open(now)) return false;
    this.#doubt.opened(this.#file.queue!);
    return true;
  }

  /** Closes the queue file (confirming first what a target applied). */
  close(): void {
    while (this.confirmApplied(this.parts.now()));
    this.#file.close();
  }

  /** The ledger's `through` this drain last saw (null: not settled yet). */
  get through(): number | null {
    return this.#progress.through;
  }

  /** How many lanes the table has (`lanes`): 1 is one strict order; more, one per key's lane (see lane-key.ts). */
  get lanes(): number {
    return this.#lanes.count;
  }

  /** A row's lane here (0 in a table of one lane; null: a row without a key in a table with lanes, a barrier). */
  laneOf(row: Pick<OutboxRow, "laneKey">): Lane {
    return this.#lanes.of(row);
  }

  /**
   * The table's ledger rows this drain knows to exist, with their throughs (with lanes, every lane's; see
   * TableLanes).
   */
  ledgerThroughs(): Array<{ ledgerRow: string; through: number }> {
    return this.#progress.ledgerThroughs();
  }

  /** This table as status and metrics show it; with `health`, its queue's health read from the file. */
  view(options: { health?: boolean } = {}): TableView {
    const view: TableView = {
      namespace: this.name,
      origin: this.#file.origin,
      through: this.#progress.through,
      held: this.#holds.view(),
      counts: { ...this.counts },
    };
    if (this.lanes > 1) view.lanes = { count: this.lanes, held: this.#lanes.heldView(this.parts.now()) };
    if (options.health) view.health = this.#file.health();
    return view;
  }

  /** Adds an outcome to this table's counts: every count is made here, where the outcome is decided. */
  #tally(outcome: Partial<TableOutcome>): void {
    this.counts.delivered += outcome.delivered ?? 0;
    this.counts.failed += outcome.failed ?? 0;
    this.counts.deadLettered += outcome.deadLettered ?? 0;
  }

  /**
   * Settlement is needed before this table's next fenced batch (a tenant template's tables settle tenant by
   * tenant: see settleTenant).
   */
  get unsettled(): boolean {
    return this.#applyingFenced && !this.#lanes.tenanted && this.#progress.through === null;
  }

  /**
   * Forgets the ledger view: the next batch settles from the ledger first (after an outage, a
   * fence that failed) — with a tenant template, `tenant`'s only (the ledger in its database).
   */
  unsettle(tenant: string | null = null): void {
    if (this.#lanes.tenanted) {
      if (tenant !== null) this.#lanes.unsettle(tenant);
      return;
    }
    this.#progress.forget();
    this.#lanes.unsettle();
  }

  /** The runner's target keeps a ledger: slices are fenced, and nothing is planned before settlement. */
  fencedByLedger(): void {
    this.#applyingFenced = true;
  }

  /**
   * Applies what the ledger says this queue has applied (see TableProgress.settle). Returns how many rows
   * were confirmed.
   */
  settle(remote: number | null, options: { adopted?: number } = {}): number {
    return this.#settled(this.#progress.settle(remote, options.adopted), new Map([[this.name, remote ?? 0]]));
  }

  /**
   * With lanes: applies what the ledger says of each lane (see TableProgress.settleLanes). Returns how many
   * rows were confirmed.
   */
  settleLanes(throughs: ReadonlyMap<string, number>, options: { adopted?: number } = {}): number {
    return this.#settled(this.#progress.settleLanes(throughs, options.adopted), throughs);
  }

  /**
   * After a settlement that read `throughs` (of `tenant`'s ledger rows): counted, the read-ahead stale, the
   * letters in doubt looked at.
   */
  #settled(confirmed: number, throughs: ReadonlyMap<string, number>, tenant: string | null = null): number {
    this.#tally({ delivered: confirmed });
    this.#ahead.forget();
    this.#doubt.settled(throughs, tenant);
    return confirmed;
  }

  /**
   * Plans this table's part of the batch (see HeadPlanning.fromHead) — or takes the rows read ahead
   * for exactly this, when the slice before them was applied whole; a tenant template's, a slice
   * per tenant of `ctx.tenants` whose rows go (HeadPlanning.fromTenant). The runner then opens them.
   */
  plan(ctx: PlanContext): { drafts: SliceDraft[]; outcome: TableOutcome } {
    const out = noOutcome();
    const { now } = ctx;
    this.#planning.forget();
    const ahead = this.#ahead.take(ctx.maxBytes);
    let drafts: SliceDraft[] = [];
    if (!this.held(now) && !this.unsettled) {
      try {
        const prepare = (row: OutboxRow) => ctx.prepare(this, row);
        const at = { now, maxBytes: ctx.maxBytes, force: ctx.force, prepare };
        const queue = this.#file.queue!;
        const slices =
          ahead !== null
            ? [ahead]
            : this.#lanes.tenanted
              ? (ctx.tenants ?? []).flatMap((tenant) => this.#planning.fromTenant(queue, tenant, at, out))
              : this.#planning.fromHead(queue, at, out);
        drafts = slices.map((slice) => ({ table: this, ...slice }));
        out.more ||= drafts.some((d) => d.more);
        this.#holds.release("local");
      } catch (error) {
        this.#holds.local(error, now, "planning");
      }
    }
    this.#tally(out);
    // A hold this plan found or set (a chain gap, a local error) is retried on time, even if no commit brings
    // the table back.
    out.wakeAt = minWake(out.wakeAt, this.#holds.retryAt(now));
    // Nothing to send and nothing more to read: nothing of the table goes before its wake time.
    if (drafts.length === 0 && !out.more) this.#planning.quiet(out.wakeAt);
    return { drafts, outcome: out };
  }

  /** Whether nothing of the group from `grp` on is pending here (see GoneFrom); false with the file not open. */
  groupGone(grp: number): boolean {
    const queue = this.#file.queue;
    return queue !== null && !queue.holdsGroup(grp);
  }

  /** When a group that spans tables, held back by the last plan, may go at the earliest (see HeadPlanning.waitOf). */
  waitOf(grp: number): number | null {
    return this.#planning.waitOf(grp);
  }

  /**
   * Takes out of a draft the groups that wait for their part in another table (see linkDrafts),
   * holding the lanes each occupies (see TableLanes.holdBack). "send": rows are left. Otherwise
   * the plan moves on now, as it would once its slice were applied — "read on": the next read
   * starts past what this one read, and more waits there (plan again at once); "wait": look again
   * when a hold ends or a commit comes.
   */
  holdBack(draft: SliceDraft, groups: readonly WaitingGroup[]): "send" | "read on" | "wait" {
    const tenant = draft.rows[0]!.tenant;
    if (draft.lanes !== undefined) this.#lanes.holdBack(draft.rows, draft.lanes, groups);
    withoutGroups(draft, groups);
    if (draft.rows.length > 0) return "send";
    if (draft.lanes === undefined) return "wait";
    const before = this.#lanes.cursor(tenant) ?? 0;
    this.#progress.nothingSent(draft.lanes, tenant);
    return draft.more && (this.#lanes.cursor(tenant) ?? 0) > before ? "read on" : "wait";
  }

  /**
   * Opens a draft as a slice: its fence first (moving each ledger row its rows move), its head charged, the
   * sent mark raised.
   */
  openSlice(draft: SliceDraft, ctx: OpenContext, behind?: number | readonly number[]): TableSlice {
    const last = draft.rows[draft.rows.length - 1]!.seq;
    const fence = ctx.fence;
    const moves = fence === null ? [] : this.#progress.moves(draft.rows, behind);
    if (draft.lanes !== undefined && fence !== null) draft.lanes.slots = moves.slots;
    const seqs = draft.rows.map((r) => r.seq);
    this.#file.queue!.recordAttempt(draft.rows[0]!.seq, new Date(ctx.now), last, seqs);
    const stmts = fence === null ? draft.stmts : [fence(this, moves), ...draft.stmts];
    const slice = { ...draft, stmts, fenced: fence !== null, ...(behind === undefined ? {} : { behind }) };
    this.#doubt.sent(slice, draft.rows, fence === null ? null : moves, moves.slots);
    return slice;
  }

  /**
   * With `ahead` in flight: the rows that follow it opened as the next slice, fenced behind it (see
   * ReadAhead.behind). In the remote its fence waits on the ledger row's lock until `ahead` commits;
   * if `ahead` rolls back, it fails and the table settles: slices in flight commit in order, or not.
   */
  openBehind(ahead: TableSlice, plan: PlanContext, open: OpenContext): TableSlice | null {
    if (!ahead.fenced || open.fence === null) return null;
    const next = this.#ahead.behind(ahead, this.#planAt(plan));
    return next === null ? null : this.openSlice({ table: this, ...next.slice }, open, next.expected);
  }

  /**
   * While `slice` is in flight, reads and converts the groups that follow it, so the next plan need not (see
   * ReadAhead).
   */
  readAhead(slice: TableSlice, ctx: PlanContext): void {
    this.#ahead.read(slice, this.#planAt(ctx));
  }

  /** The read-ahead no longer describes the queue (another table's group moved rows of this one). */
  forgetReadAhead(): void {
    this.#ahead.forget();
  }

  #planAt(ctx: PlanContext) {
    return { now: ctx.now, maxBytes: ctx.maxBytes, prepare: (row: OutboxRow) => ctx.prepare(this, row) };
  }

  /**
   * Applies the target's answer for this table's slice (see applyTableAnswer); a local failure holds the table.
   * `deadElsewhere`: another table's answer to the batch dead-lettered a group that spans this table.
   */
  applyAnswer(
    slice: TableSlice,
    results: WriteResult[],
    now: number,
    groupAttempts: GroupAttempts = NO_GROUP_ATTEMPTS,
    deadElsewhere = false,
  ): TableOutcome & { ledgerMissing: boolean } {
    const out = { ...noOutcome(), ledgerMissing: false };
    try {
      applyTableAnswer(this.#answerParts, slice, results, now, groupAttempts, out, deadElsewhere);
    } catch (error) {
      // Local error while settling: the rows stay queued; settlement from the ledger decides later.
      this.unsettle(slice.rows[0]!.tenant);
      this.#holds.local(error, now, `settling a batch delivered to ${this.parts.target}`);
    }
    this.#tally(out);
    return out;
  }

  /** Rows a target applied wait for their local confirmation. */
  get hasApplied(): boolean {
    return this.#progress.hasApplied;
  }

  /**
   * Confirms locally the next part of the rows a target applied (see TableProgress.confirmNext);
   * true while some are left (the runner lets the file's other writers in between). A local failure
   * holds the table and keeps them waiting (false); settlement confirms them later.
   */
  confirmApplied(now: number, markBehind = false): boolean {
    if (!this.#file.queue) return false;
    try {
      return this.#progress.confirmNext(markBehind);
    } catch (error) {
      this.#progress.forget();
      this.#holds.local(error, now, `confirming rows applied by ${this.parts.target}`);
      return false;
    }
  }

  /**
   * The late answer of a timed-out batch without a ledger (see Delivery): what it reports applied is
   * confirmed and counted.
   */
  applyLateAnswer(slice: TableSlice, answers: WriteResult[]): void {
    let ok = 0;
    while (ok < slice.rows.length && answers[ok]!.ok) ok++;
    this.#doubt.answered(slice, ok);
    if (this.#file.queue) this.#tally({ delivered: this.#progress.confirmLate(slice.rows, answers) });
  }

  /**
   * Undoes the head's up-front charge after a batch that never got an answer (an outage); its sent mark stays
   * for settlement.
   */
  refundOutage(slice: TableSlice): void {
    this.#notApplied(slice);
    this.#charges.refund(this.#file.queue!, slice.rows[0]!.seq);
  }

  /** A slice that was not applied whole: with lanes the next read (of its tenant's rows) starts at the head again. */
  #notApplied(slice: TableSlice): void {
    if (slice.lanes !== undefined) this.#lanes.restart(slice.rows[0]!.tenant);
  }

  /**
   * Prunes the delivered log and replayed dead letters in the background (see BackgroundPrune); a prune still
   * running is not started twice.
   */
  prune(): Promise<void> {
    return this.#prune.start();
  }

  /** A background prune, while one runs: the close waits for it. */
  get pruning(): Promise<void> | null {
    return this.#prune.running;
  }
}
