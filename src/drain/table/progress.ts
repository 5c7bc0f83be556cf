import { describeError } from "../../errors.ts";
import type { Logger } from "../../logger.ts";
import type { DrainQueue } from "../../outbox/drain-queue.ts";
import type { OutboxRow } from "../../outbox/outbox.ts";
import type { WriteResult } from "../../writers/writer.ts";
import type { LanesAfter, TableLanes } from "./lanes.ts";
import type { Lane } from "./planner.ts";

/**
 * One ledger row a slice moves (the table's name, or `name#lane`): from `through`, as this drain last saw it,
 * to `last`.
 */
export interface LedgerMove {
  ledgerRow: string;
  through: number;
  last: number;
}

/** A slice the remote applied, as the table read it: its first and last seq, its rows, the first one's link. */
interface AppliedSlice {
  first: number;
  last: number;
  rows: number;
  firstPrev: number | null;
}

const NO_CUTS: ReadonlyMap<Lane, number> = new Map();

/**
 * How many rows one page of settlement's scan for the applied prefix reads (with lanes), within the batch
 * byte budget.
 */
const CONFIRM_SCAN_ROWS = 2_000;

/**
 * Rows a table read, head first, in parts of at most `size` rows: what each of their confirmation
 * transactions takes.
 */
function partsOf(rows: readonly OutboxRow[], size: number): AppliedSlice[] {
  const parts: AppliedSlice[] = [];
  for (let i = 0; i < rows.length; i += size) {
    const end = Math.min(rows.length, i + size) - 1;
    parts.push({ first: rows[i]!.seq, last: rows[end]!.seq, rows: end - i + 1, firstPrev: rows[i]!.prevSeq });
  }
  return parts;
}

/** What a table's progress works with: who it is (for its log lines), its lanes, and its open queue. */
export interface ProgressParts {
  table: string;
  target: string;
  logger: Logger;
  lanes: TableLanes;
  /** The table's queue (open whenever progress is asked to move). */
  queue: () => DrainQueue;
  /** The batch byte budget: settlement's scan reads pages within it. */
  batchMaxBytes: number;
}

/**
 * How far one table has come, and the one owner of it: what this drain last saw of its ledger row
 * (`through`; null: settle from the ledger first), the rows a target applied that wait for their
 * local confirmation (`applied`, and the parts they were read in), how far the confirmation went,
 * and the cuts — per lane, a row behind its head that failed, before which the next slice stops.
 * Each field changes only through the transitions below: settled from the ledger, forgotten,
 * applied (whole, or with lanes), moved on, confirmed — the one place rows are confirmed locally.
 */
export class TableProgress {
  #through: number | null = null;
  /**
   * Per lane (of a tenant, with a tenant template: "" else), a row behind its head failed: the
   * next slice stops before it in that lane, so the rows before it go first.
   */
  readonly #cuts = new Map<string, Map<Lane, number>>();
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
  /** A tenant template's: a slice was applied since the last scan of the applied prefix (see confirmNext). */
  #prefixDue = false;
  /**
   * A tenant template's: rows applied and not yet confirmed (a row still pending before them), to
   * be marked applied (DrainQueue.markApplied) if a round of the tenants ends and they still wait.
   */
  #toMark: number[] = [];
  /** A tenant template's: the head the last scan of the applied prefix left (see lookAtHead). */
  #scannedHead: number | null = null;

  constructor(private readonly parts: ProgressParts) {}

  /** The ledger's `through` this drain last saw or set (null: settle first). */
  get through(): number | null {
    return this.#through;
  }

  /** The last seq applied and not confirmed locally yet, or null. */
  get applied(): number | null {
    return this.#applied;
  }

  /** Per lane (of `tenant`'s), the row behind the head before which the next slice stops. */
  cuts(tenant: string | null = null): ReadonlyMap<Lane, number> {
    return this.#cuts.get(tenant ?? "") ?? NO_CUTS;
  }

  /** With lanes: settled, and nothing holds a lane back (no backoff, no held head, no cut). */
  get lanesFree(): boolean {
    return this.#through !== null && this.parts.lanes.free && this.#cuts.size === 0;
  }

  /**
   * The table's ledger rows this drain knows to exist, with their throughs (with lanes, every lane's; see
   * TableLanes).
   */
  ledgerThroughs(): Array<{ ledgerRow: string; through: number }> {
    if (this.parts.lanes.count > 1) return this.parts.lanes.ledgerThroughs();
    const through = this.#through;
    return through === null || through === 0 ? [] : [{ ledgerRow: this.parts.table, through }];
  }

  /**
   * The ledger rows a slice of `rows` moves, each from the through this drain knows — or, behind a
   * slice in flight, where that one leaves it (`behind`: the through, with lanes by slot) — to the
   * slice's last row of it; with lanes, `slots` has each row's slot (see TableLanes.moves).
   */
  moves(rows: readonly OutboxRow[], behind?: number | readonly number[]): LedgerMove[] & { slots?: number[] } {
    const { lanes, table } = this.parts;
    const last = rows[rows.length - 1]!.seq;
    if (lanes.count === 1 && !lanes.tenanted)
      return [{ ledgerRow: table, through: typeof behind === "number" ? behind : this.#through!, last }];
    const slots: number[] = [];
    return Object.assign(lanes.moves(rows, typeof behind === "object" ? behind : undefined, slots), { slots });
  }

  /** The ledger row's value is unknown now (a fence failed, a batch lost): settle before the next batch. */
  forget(): void {
    this.#through = null;
  }

  /**
   * A fence failed: another transaction moved the ledger row — a late commit or another drain, or,
   * for a slice sent `behind` another in flight, that one (it failed, or the two connections raced:
   * rare but for a link of no length; said at debug). Settle from the ledger.
   */
  fenceMoved(behind: boolean, fence: { error: string; errorClass?: string }): void {
    this.#through = null;
    const { table, target, logger } = this.parts;
    if (behind)
      logger.debug(
        `drain: "${table}" on ${target}: a batch behind another failed its fence (${fence.error}); settling from the ledger`,
        { target, namespace: table },
      );
    else
      logger.info(
        `drain: "${table}" on ${target}: its ledger row moved under this drain (a late commit or another drain); settling from the ledger`,
        { target, namespace: table, error_class: fence.errorClass ?? null },
      );
  }

  /**
   * Applies what the ledger says this queue has applied (`remote`; null when it has no row yet):
   * rows at or below it that were sent (the sent mark) are confirmed; rows at or below it that were
   * never sent (a file restored from a backup) are moved above it before delivery, never confirmed
   * unsent; the local sequence is raised above it. Returns how many rows were confirmed (rows
   * applied earlier whose confirmation failed were counted when applied). With `adopted`
   * (migration from `outbox_seq` delivery), every pending row at or below it is first confirmed as
   * applied by the earlier drain.
   */
  settle(remote: number | null, adopted = 0): number {
    const queue = this.parts.queue();
    const through = Math.max(remote ?? 0, adopted);
    let confirmed = adopted ? this.confirm(adopted) : 0;
    if (this.#applied !== null) this.confirm(Math.min(this.#applied, through));
    // The sent mark is never lowered here: a batch the ledger does not show yet may still commit
    // (an uncommitted INSERT of the ledger row is invisible to a locking read on PostgreSQL).
    confirmed += this.confirm(Math.min(queue.sentMark(), through));
    const head = queue.head();
    if (head && head.seq <= through) this.#moveAbove(through, `this queue applied up to seq ${through}`);
    if (through > 0) queue.seedSequence(through);
    this.#through = through;
    this.#applied = this.#appliedParts = null; // the sent mark covers every row a fence moved the ledger past: confirmed above
    return confirmed;
  }

  /**
   * With lanes: applies what the ledger says of each of this queue's rows (`throughs`, by ledger
   * row; a row it lacks is at 0) — with a tenant template, of `tenant`'s, read in its database.
   * The pending rows it applied from the head on are confirmed — those that were sent (the sent
   * mark): one at or below its lane's through that never was (a file restored from a backup) moves
   * every pending row above the highest through instead, never confirmed unsent; the local
   * sequence is raised above it. Returns how many rows were confirmed. With `adopted`, as settle.
   */
  settleLanes(throughs: ReadonlyMap<string, number>, adopted = 0, tenant: string | null = null): number {
    const { lanes, table } = this.parts;
    const queue = this.parts.queue();
    let confirmed = adopted ? this.confirm(adopted) : 0;
    lanes.settle(throughs, tenant);
    let highest = adopted;
    for (const through of throughs.values()) highest = Math.max(highest, through);
    if (lanes.tenanted) {
      this.#checkTenantSent(tenant, highest);
      this.#markTenantApplied(tenant, highest);
      if (highest > 0) queue.seedSequence(highest);
      return confirmed;
    }
    const { seq: bound, restored } = this.#appliedPrefix(Number.POSITIVE_INFINITY);
    confirmed += this.confirm(bound);
    if (restored) this.#moveAbove(highest, `this queue's lanes applied rows up to seq ${highest}`);
    if (highest > 0) queue.seedSequence(highest);
    if (!lanes.tenanted) this.#through = throughs.get(table) ?? 0;
    this.#applied = this.#appliedParts = null;
    // The cuts stay: a row that failed behind its lane's head still waits until it heads the lane
    // (a batch behind the failed one settles the table; forgetting them would send it behind again).
    return confirmed;
  }

  /**
   * A tenant template's: whether the ledger of `tenant` says rows of it were applied that this
   * queue never sent (above the sent mark, up to `highest`: a file restored from an older copy).
   * Moving the queue would move other tenants' applied rows past their ledgers: it stops, loudly.
   */
  #checkTenantSent(tenant: string | null, highest: number): void {
    const queue = this.parts.queue();
    const sent = queue.sentMark();
    if (highest <= sent) return;
    const read = queue.readTenantForDelivery(tenant, 1, this.parts.batchMaxBytes, () => true, sent);
    const row = read.rows[0];
    if (row === undefined || !this.parts.lanes.isApplied(row)) return;
    throw new Error(
      `the ledger of tenant "${tenant}" says this queue applied rows up to seq ${highest} that were never sent (a queue file restored from an older copy?): deliver or skip that tenant's rows by hand`,
    );
  }

  /**
   * A tenant template's: the rows of `tenant` its ledger says were applied (at or below `highest`,
   * the highest of its throughs) are confirmed with the rest of the prefix (or marked, see confirmNext).
   */
  #markTenantApplied(tenant: string | null, highest: number): void {
    const { lanes, batchMaxBytes } = this.parts;
    const queue = this.parts.queue();
    const applied: number[] = [];
    for (let after: number | null = null; ; ) {
      const read = queue.readTenantForDelivery(tenant, CONFIRM_SCAN_ROWS, batchMaxBytes, () => true, after);
      for (const row of read.rows) if (row.seq <= highest && lanes.isApplied(row)) applied.push(row.seq);
      const last = read.rows.at(-1)?.seq;
      if (!read.truncated || last === undefined || last >= highest) break;
      after = last;
    }
    if (applied.length === 0) return;
    this.#toMark.push(...applied);
    this.#prefixDue = true;
  }

  /**
   * With lanes: the end of the queue's prefix the ledger says was applied (every pending row from
   * the head through it, whose lane's through is at or above it, or marked applied), scanned a page
   * at a time, at most `maxRows` rows; `more`: it stopped at that limit, not at a row still pending.
   * `restored`: it stopped at a row the ledger says was applied but that was never sent (a file
   * restored from an older copy) — never confirmed.
   */
  #appliedPrefix(maxRows: number): { seq: number; more: boolean; restored: boolean } {
    const { lanes } = this.parts;
    const queue = this.parts.queue();
    const sent = queue.sentMark();
    let seq = 0;
    let rows = 0;
    // Pages grow from a few rows: the scan mostly stops at once, at a row still pending.
    for (let after: number | null = null, size = 16; ; size = Math.min(size * 4, CONFIRM_SCAN_ROWS)) {
      const page = Math.min(size, maxRows - rows);
      const read = queue.readForDelivery(page, this.parts.batchMaxBytes, () => true, after);
      for (const row of read.rows) {
        // Every row before it is applied: read here, or marked so (a tenant template's, not read).
        if (!lanes.isApplied(row)) return { seq: row.seq - 1, more: false, restored: false };
        if (row.seq > sent) return { seq: row.seq - 1, more: false, restored: true };
        seq = row.seq;
        rows += 1;
      }
      if (!read.truncated || read.rows.length === 0)
        return { seq: Math.max(seq, queue.markedThrough()), more: false, restored: false };
      if (rows >= maxRows) return { seq, more: true, restored: false };
      after = read.rows[read.rows.length - 1]!.seq;
    }
  }

  /** Moves the pending rows above `through`, in order, saying so: the ledger says `what`, but they were never sent. */
  #moveAbove(through: number, what: string): void {
    const moved = this.parts.queue().resequenceAbove(through);
    if (!moved) return;
    const { table, target, logger } = this.parts;
    logger.warn(
      `drain: "${table}" on ${target}: the ledger says ${what}, but pending rows ${moved.oldFirst}..${moved.oldLast} were never sent (a restored file?); moved them, in order, to ${moved.newFirst}..${moved.newLast}`,
      { target, namespace: table, seq: moved.oldFirst, rows: moved.count },
    );
  }

  /**
   * A fenced slice of one lane applied whole: the ledger now says the remote applied its rows, so
   * their local confirmation can wait for the next batch to be in flight (confirmNext); a crash
   * before it is settled. Rows applied earlier and not confirmed yet go by the bound.
   */
  appliedWhole(rows: readonly OutboxRow[]): void {
    const last = rows[rows.length - 1]!.seq;
    this.#appliedParts = this.#applied === null ? partsOf(rows, this.parts.queue().confirmChunkRows) : null;
    this.#through = this.#applied = last;
  }

  /**
   * With lanes, a fenced slice of `rows` applied whole: each ledger row it moved is at its last row
   * now, the next read starts where the plan said (`after`), and the local confirmation may go up
   * to the first row still pending (every row before it is applied: in this slice, or earlier and
   * passed over). A tenant template's table confirms the prefix of rows applied, whoever's: the
   * first tenant's row still pending is where it stops (see confirmNext).
   */
  appliedLanes(rows: readonly OutboxRow[], after: LanesAfter): void {
    const last = rows[rows.length - 1]!.seq;
    const { lanes } = this.parts;
    const through = lanes.applied(rows, after.slots, this.#through);
    if (lanes.tenanted) {
      lanes.moveOn(after, rows[0]!.tenant);
      for (const row of rows) this.#toMark.push(row.seq);
      this.#prefixDue = true;
      return;
    }
    this.#through = through;
    this.movedOn(after);
    // Nothing held, nothing passed over: the slice is the queue's prefix, confirmed as read.
    if (after.whole && this.#applied === last) this.#appliedParts = partsOf(rows, this.parts.queue().confirmChunkRows);
  }

  /**
   * With lanes: a plan's slice (of `tenant`'s rows) had nothing left to send (every group in it waits): it
   * moves on as if applied.
   */
  nothingSent(after: LanesAfter, tenant: string | null): void {
    if (this.parts.lanes.tenanted) this.parts.lanes.moveOn(after, tenant);
    else this.movedOn(after);
  }

  /**
   * With lanes: what is known once a plan's slice (if any) was applied whole (see TableLanes.moveOn)
   * — the local confirmation may go up to the first row still pending.
   */
  movedOn(after: LanesAfter): void {
    const bound = this.parts.lanes.moveOn(after);
    if (bound > this.#confirmedUpTo && bound > (this.#applied ?? 0)) {
      this.#applied = bound;
      this.#appliedParts = null; // not one run of the queue: confirmed by its bound
    }
  }

  /**
   * A group behind its lanes' heads failed at `seq`: in each of `lanes` (of `tenant`'s) the next slice stops
   * before it.
   */
  cut(lanes: readonly Lane[], seq: number, tenant: string | null = null): void {
    let cuts = this.#cuts.get(tenant ?? "");
    if (cuts === undefined) this.#cuts.set(tenant ?? "", (cuts = new Map()));
    for (const lane of lanes) cuts.set(lane, seq);
  }

  /** The groups before the cut in `lanes` (of `tenant`'s) went: the group there heads them now. */
  passed(lanes: readonly Lane[], tenant: string | null = null): void {
    const cuts = this.#cuts.get(tenant ?? "");
    if (cuts === undefined) return;
    for (const lane of lanes) cuts.delete(lane);
    if (cuts.size === 0) this.#cuts.delete(tenant ?? "");
  }

  /** Nothing is pending from the head on: no cut is left to pass. */
  clearCuts(): void {
    this.#cuts.clear();
  }

  /**
   * Whether the ledger, as this drain knows it, is where a slice behind another expects it (with
   * lanes, every slot: see TableLanes.asExpected): that one was applied.
   */
  asExpected(behind: number | readonly number[]): boolean {
    if (typeof behind === "number") return this.#through === behind;
    return this.#through !== null && this.parts.lanes.asExpected(behind);
  }

  /**
   * A tenant template's: the applied prefix is scanned again at the next confirmation — an operator
   * moved rows off the front (`skip --tenant`, then its signal), and the other tenants' rows applied
   * behind them may be confirmed now, though nothing is applied any more to say so.
   */
  rescanPrefix(): void {
    if (this.parts.lanes.tenanted) this.#prefixDue = true;
  }

  /**
   * A tenant template's: the prefix is scanned again when the head is not where the last scan found
   * it — an operator moved rows off the front (a skip, a dead letter's purge) without a signal.
   */
  lookAtHead(): void {
    if (!this.parts.lanes.tenanted || this.#prefixDue) return;
    const head = this.parts.queue().headSeq();
    if (head !== this.#scannedHead) this.#prefixDue = true;
  }

  /** Rows a target applied wait for their local confirmation. */
  get hasApplied(): boolean {
    return this.#applied !== null || this.#prefixDue || this.#toMark.length > 0;
  }

  /**
   * Confirms locally the next part of the rows a target applied (see `#applied`): sync log + delete
   * in one transaction of at most the queue's confirmChunkRows rows, from the head. A tenant
   * template's: the prefix of rows applied, whoever's, a page a step; with `markBehind` (a round of
   * its tenants ended), the rows applied still waiting behind a pending one are marked applied, so
   * they are read and listed no more. Returns true while some are left. A local failure throws and
   * leaves them waiting: the next try, or settlement, confirms them (without counting them again).
   */
  confirmNext(markBehind = false): boolean {
    if (this.#prefixDue) {
      // A tenant template's: the rows applied from the head on, whoever's, confirmed a page a step.
      const queue = this.parts.queue();
      this.#prefixDue = false;
      const bound = this.#appliedPrefix(queue.confirmChunkRows);
      const confirmed = this.confirm(bound.seq);
      this.#scannedHead = queue.headSeq();
      this.parts.lanes.prune(bound.seq);
      this.#toMark = this.#toMark.filter((seq) => seq > bound.seq);
      this.#prefixDue = bound.more && confirmed > 0;
      if (this.#prefixDue) return true;
    }
    if (markBehind && this.#toMark.length > 0) {
      // Applied, but behind rows still pending: marked, they are read and listed no more.
      this.parts.queue().markApplied(this.#toMark);
      this.#toMark = [];
    }
    if (this.parts.lanes.tenanted) return false;
    const bound = this.#applied;
    if (bound === null) return false;
    const chunk = this.parts.queue().confirmChunkRows;
    const confirmed = this.confirm(bound, chunk, true);
    if (this.#appliedParts === null ? confirmed >= chunk : this.#appliedParts.length > 0) return true;
    this.#confirmedUpTo = Math.max(this.#confirmedUpTo, bound);
    this.#applied = this.#appliedParts = null;
    return false;
  }

  /**
   * The late answer of a timed-out batch without a ledger (see Delivery): the rows of a slice of
   * `rows` it reports applied, from the head on, are confirmed. Returns how many (0 when their
   * confirmation failed: they are delivered again).
   */
  confirmLate(rows: readonly OutboxRow[], answers: readonly WriteResult[]): number {
    let ok = 0;
    while (ok < rows.length && answers[ok]!.ok) ok++;
    if (ok === 0) return 0;
    try {
      this.confirm(rows[ok - 1]!.seq);
      return ok;
    } catch (error) {
      const { table, logger } = this.parts;
      logger.error(
        `drain: confirming the late answer for "${table}" failed; its rows are redelivered: ${describeError(error).message}`,
        { namespace: table },
      );
      return 0;
    }
  }

  /**
   * The one place rows are confirmed locally: every pending row at or below `bound` (or the first
   * `maxRows` of them) goes to the delivered log and is deleted, in transactions of at most the
   * queue's confirmChunkRows rows. Returns how many. `asRead`: the next of `#appliedParts` instead,
   * without reading its rows again, when the queue still holds exactly those rows (its head first);
   * when it does not, the parts are dropped and the rows go by the bound.
   */
  confirm(bound: number, maxRows = Number.POSITIVE_INFINITY, asRead = false): number {
    if (bound <= 0) return 0; // every seq is 1 or more
    const queue = this.parts.queue();
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
}
