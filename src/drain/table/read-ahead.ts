import type { AppConfig } from "../../config/types.ts";
import type { DrainQueue } from "../../outbox/drain-queue.ts";
import type { OutboxRow } from "../../outbox/outbox.ts";
import type { LanesAfter, TableLanes } from "./lanes.ts";
import { planSlice } from "./planner.ts";
import { NO_LANES, type PlanAt, type PlannedSlice, plannerInput } from "./planning.ts";
import type { TableProgress } from "./progress.ts";

/** A slice read and converted ahead of its batch: what a plan would make, and the slice in flight it follows. */
interface AheadSlice extends PlannedSlice {
  /** The last seq of the slice in flight when they were read: they follow it. */
  after: number;
}

/** A slice of this table in flight, as reading ahead of it needs it. */
export interface InFlight {
  rows: readonly OutboxRow[];
  /** More rows were ready behind it. */
  more: boolean;
  fenced: boolean;
  lanes?: LanesAfter;
}

/** What a table's read-ahead works with. */
export interface ReadAheadParts {
  app: AppConfig;
  lanes: TableLanes;
  progress: TableProgress;
  /** The table's queue while it is open. */
  queue: () => DrainQueue | null;
}

/**
 * One table's rows read while a slice of it is in flight — for the next plan, used only if that
 * slice is applied whole, and for a slice sent behind it before its answer (see DrainTable.openBehind).
 * A group with a history (attempts, a backoff) or a row that cannot be converted ends what is read:
 * it is planned from the head, where it is dealt with. With lanes, only while no lane is held and
 * nothing is left pending among the rows read. A failure here only means the next plan reads them.
 */
export class ReadAhead {
  #ahead: AheadSlice | null = null;

  constructor(private readonly parts: ReadAheadParts) {}

  /** What was read no longer describes the queue (another table's group moved rows of this one, a settlement). */
  forget(): void {
    this.#ahead = null;
  }

  /**
   * The rows read ahead, taken (read once), when they are what a plan would read now: they follow
   * the slice last applied whole and fit the budget — with lanes, the next read starts right after
   * that slice and no lane was held since. Null otherwise.
   */
  take(maxBytes: number): PlannedSlice | null {
    const ahead = this.#ahead;
    this.#ahead = null;
    if (ahead === null || ahead.after !== this.parts.progress.applied || ahead.bytes > maxBytes) return null;
    const { lanes, progress } = this.parts;
    if (lanes.count > 1 && !(lanes.cursor() === ahead.after && progress.lanesFree)) return null;
    const { after: _, ...slice } = ahead;
    return slice;
  }

  /** While `slice` is in flight, reads and converts the groups that follow it (see the class). */
  read(slice: InFlight, at: PlanAt): void {
    this.#ahead = null;
    const { app, lanes: laneState, progress } = this.parts;
    const queue = this.parts.queue();
    if (!queue || !slice.fenced || !slice.more || progress.cuts().size > 0) return;
    const lanes = laneState.count > 1;
    if (lanes && !this.#clear(slice)) return;
    const after = slice.rows[slice.rows.length - 1]!.seq;
    try {
      const read = queue.readForDelivery(
        app.batchSize,
        at.maxBytes,
        () => true,
        after,
        lanes ? (row) => laneState.isApplied(row) : null,
      );
      const plan = planSlice(
        plannerInput(app, laneState, read, {
          ...at,
          more: read.truncated || read.gap !== null,
          position: "after",
          blocked: NO_LANES,
          cuts: NO_LANES,
        }),
      );
      if (plan.slice === null) return;
      if (!lanes) {
        this.#ahead = { after, ...plan.slice };
        return;
      }
      const taken = plan.slice.rows;
      if (read.passedOver !== null || plan.frontier !== null || taken.length !== read.rows.length) return;
      const last = taken[taken.length - 1]!.seq;
      this.#ahead = {
        after,
        ...plan.slice,
        lanes: { cursor: last, frontier: null, lastRead: last, whole: true, epoch: this.parts.lanes.epoch() },
      };
    } catch {
      this.#ahead = null;
    }
  }

  /**
   * The rows that follow `ahead` (in flight), read while it was on its way or now, to be sent
   * behind it before its answer, and the through its fence expects: where `ahead` moves the ledger
   * row — with lanes, each lane's row where `ahead` moves it, or where it is for a lane `ahead` has
   * no row of. Only over ledger rows an answer showed committed (a fence that finds no row inserts
   * it, guard or not, and would commit ahead of the slice that was to create it), only while no
   * lane is held and `ahead` took every pending row it read, and when the rows hold no transaction
   * across tables and (with lanes) no row without a key; null otherwise.
   */
  behind(ahead: InFlight, at: PlanAt): { slice: PlannedSlice; expected: number | number[] } | null {
    const { lanes, progress } = this.parts;
    if (lanes.count === 1 ? !(progress.through! > 0) : !this.#clear(ahead)) return null;
    // A row without a key is in the table's own ledger row, which a fence guards only where it
    // moves it: with one in either slice, the second could commit first and overtake it, or it them.
    const barrier = (row: OutboxRow) => lanes.count > 1 && lanes.of(row) === null;
    if (ahead.rows.some(barrier)) return null;
    const after = ahead.rows[ahead.rows.length - 1]!.seq;
    if (this.#ahead === null || this.#ahead.after !== after || this.#ahead.bytes > at.maxBytes) this.read(ahead, at);
    const read = this.#ahead;
    if (read !== null && read.spans.size === 0 && read.rows.some(barrier)) return null; // it waits for the answer, read
    this.#ahead = null;
    if (read === null || read.spans.size > 0) return null;
    const { after: expected, ...slice } = read;
    if (lanes.count === 1) return { slice, expected };
    const throughs = lanes.throughsBehind(ahead.rows, ahead.lanes!.slots, slice.rows);
    return throughs === null ? null : { slice, expected: throughs };
  }

  /**
   * With lanes: `slice` took every pending row it read, and no lane is held — the rows after it are the
   * lanes' next.
   */
  #clear(slice: InFlight): boolean {
    return slice.lanes?.whole === true && this.parts.progress.lanesFree;
  }
}
