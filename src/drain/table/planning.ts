import type { AppConfig } from "../../config/types.ts";
import type { DeliveryRead, DrainQueue } from "../../outbox/drain-queue.ts";
import type { OutboxRow } from "../../outbox/outbox.ts";
import type { Statement } from "../../writers/writer.ts";
import { minWake, tableReadiness } from "../schedule.ts";
import type { Charged, HeadCharges } from "./charges.ts";
import type { TableHolds } from "./holds.ts";
import type { LanesAfter, TableLanes } from "./lanes.ts";
import { type Lane, type Plan, type PlanInput, planSlice, type SlicePlan } from "./planner.ts";
import type { TableProgress } from "./progress.ts";

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
  /** Nothing was sent, but the next read starts further on (past held lanes): more is ready, not a spin. */
  readOn?: boolean;
}

/** An outcome with nothing in it yet. */
export const noOutcome = (): TableOutcome => ({ delivered: 0, failed: 0, deadLettered: 0, more: false, wakeAt: null });

/** Adds what a charge or dead letter did to an outcome; other tables whose rows moved are reported to the runner. */
export function addCharged(out: TableOutcome, charged: Charged): void {
  out.failed += charged.failed;
  out.deadLettered += charged.deadLettered;
  if (charged.touched.length > 0) out.touched = [...(out.touched ?? []), ...charged.touched];
}

/** A slice as a plan made it; with lanes, what is known once it is applied whole (see TableLanes.moveOn). */
export interface PlannedSlice extends SlicePlan {
  lanes?: LanesAfter;
}

/** Takes the rows of `groups` (`[start, end)` each) out of a planned slice: what is left goes, more follows. */
export function withoutGroups(slice: PlannedSlice, groups: ReadonlyArray<{ start: number; end: number }>): void {
  const out = new Set<number>();
  for (const g of groups) for (let i = g.start; i < g.end; i++) out.add(i);
  const keep = (_: unknown, i: number) => !out.has(i);
  slice.rows = slice.rows.filter(keep);
  slice.stmts = slice.stmts.filter(keep);
  slice.rowBytes = slice.rowBytes.filter(keep);
  slice.bytes = slice.rowBytes.reduce((a, b) => a + b, 0);
  for (const grp of [...slice.spans.keys()]) if (!slice.rows.some((r) => r.grp === grp)) slice.spans.delete(grp);
  slice.more = true;
}

/** What a plan is made at: when, within what byte budget, converting each row how. */
export interface PlanAt {
  now: number;
  /** Bytes of SQL text and payload the slice may hold. */
  maxBytes: number;
  /** Converts one row into the statement sent for it (see PlanInput.prepare). */
  prepare(row: OutboxRow): Statement;
}

/** What a plan from the head is told beside its budget. */
export interface HeadOptions {
  /** Deliver whatever is pending, threshold and wait or not; a backoff still holds it. */
  force?: boolean;
}

/** The lower of two seqs, where known. */
const minSeq = (a: number | null, b: number | null): number | null =>
  a === null ? b : b === null ? a : Math.min(a, b);

/** No lane held back, no lane cut: what a plan of rows read ahead starts from. */
export const NO_LANES: ReadonlyMap<Lane, number> = new Map();
const NO_WAITS: ReadonlyMap<number, number | null> = new Map();

/**
 * The planner's input for rows a table read (the one builder, for a plan from the head and one
 * read ahead): the table's lanes and attempts limit, what holds its lanes back (`blocked`, `cuts`).
 */
export function plannerInput(
  app: AppConfig,
  lanes: TableLanes,
  read: Pick<DeliveryRead, "rows" | "spans">,
  at: PlanAt & {
    more: boolean;
    position: PlanInput["position"];
    blocked: ReadonlyMap<Lane, number>;
    cuts: ReadonlyMap<Lane, number>;
  },
): PlanInput {
  return {
    rows: read.rows,
    spans: read.spans,
    more: at.more,
    position: at.position,
    lanes: lanes.count,
    laneOf: (row) => lanes.of(row),
    blocked: at.blocked,
    cuts: at.cuts,
    nowMs: at.now,
    maxAttempts: app.maxAttempts,
    prepare: at.prepare,
  };
}

/** What a table's plan from its head works with. */
export interface PlanningParts {
  app: AppConfig;
  lanes: TableLanes;
  progress: TableProgress;
  holds: TableHolds;
  charges: HeadCharges;
  /** The drain's clock (epoch ms): an attempt's time. */
  now: () => number;
}

/**
 * One table's plan from its head: reads the ready rows (one read transaction), has the planner
 * plan them (planner.ts decides) and carries out what it decided for the heads — cuts passed,
 * head groups dead-lettered, heads charged — and, with lanes, where the next read starts. It keeps
 * what its last plan said of the groups that span tables and wait here (see waitOf).
 */
export class HeadPlanning {
  #waits: ReadonlyMap<number, number | null> = NO_WAITS;
  /** The last plan sent nothing: until when nothing of the table goes (its wake time; null: not known). */
  #quietUntil: number | null = null;

  constructor(private readonly parts: PlanningParts) {}

  /**
   * When a group that spans tables, held back by the last plan, may go at the earliest (epoch ms),
   * if a backoff says (see Plan.waiting; with lanes, also one held back in a lane read past since,
   * see TableLanes.waitOf — but not before the table's wake time when the last plan sent nothing: a
   * table held meanwhile keeps it until its hold ends). Null: not known.
   */
  waitOf(grp: number): number | null {
    const inLane = this.parts.lanes.waitOf(grp);
    const quiet = this.#quietUntil;
    return this.#waits.get(grp) ?? (inLane === null ? quiet : quiet === null ? inLane : Math.max(inLane, quiet));
  }

  /** A new plan begins: what the last one said of the groups waiting here no longer holds. */
  forget(): void {
    this.#waits = NO_WAITS;
    this.#quietUntil = null;
  }

  /** The plan sent nothing, and nothing of the table goes before `until` (its wake time), when known. */
  quiet(until: number | null): void {
    this.#quietUntil = until;
  }

  /** The plan from the head: its slice, or none when nothing is to be sent; `out` gets what it did. */
  fromHead(queue: DrainQueue, at: PlanAt & HeadOptions, out: TableOutcome): PlannedSlice[] {
    const { app, lanes: laneState, progress, holds } = this.parts;
    const { now } = at;
    // With lanes rows are delivered out of seq order.
    const lanes = laneState.count > 1;
    if (lanes) laneState.liftHolds(now);
    const read = queue.readForDelivery(
      app.batchSize,
      at.maxBytes,
      this.#ready(at, out, lanes),
      lanes ? laneState.cursor() : progress.applied,
      lanes ? (row) => laneState.isApplied(row) : null,
    );
    // A held lane is read again when its hold ends, whatever this read found.
    if (lanes) out.wakeAt = minWake(out.wakeAt, laneState.nextLift());
    const cursor = laneState.cursor();
    const frontier = laneState.frontier();
    const seen = Math.max(read.rows.at(-1)?.seq ?? 0, read.passedOver ?? 0, cursor ?? 0) || null;
    // A row still pending behind the cursor (a held lane's, not read again) bounds the confirmation;
    // one at or after it is read again, and this read says whether it is still pending.
    const behind = cursor !== null && frontier !== null && frontier <= cursor ? frontier : null;
    if (read.head === null) {
      if (!lanes || cursor === null) progress.clearCuts();
      // With lanes, every row read was applied already: the confirmation may go up to them.
      if (lanes)
        progress.movedOn({ cursor: seen, frontier: behind, lastRead: seen, whole: false, epoch: laneState.epoch() });
      return [];
    }
    if (read.rows.length === 0) {
      if (read.gap) holds.gap(read.gap.seq, read.gap.prevSeq, now);
      return [];
    }
    holds.release("chain gap");
    const { plan } = this.#plan(queue, read, at, out, null, lanes);
    if (!lanes) return plan.slice === null ? [] : [plan.slice];
    const first = minSeq(behind, plan.frontier);
    const after: LanesAfter = {
      cursor: plan.resumeAt !== null ? plan.resumeAt - 1 : seen,
      frontier: first,
      lastRead: seen,
      epoch: laneState.epoch(),
      whole:
        first === null &&
        read.passedOver === null &&
        plan.deadLetters.length === 0 &&
        plan.slice?.rows.length === read.rows.length,
    };
    if (plan.slice !== null) return [{ ...plan.slice, lanes: after }];
    progress.movedOn({ ...after, whole: false }); // nothing to send: the next read starts there at once
    // Rows wait behind what was read, past held lanes: plan again now, not when a backoff ends.
    if (read.truncated && (after.cursor ?? 0) > (cursor ?? 0)) out.more = out.readOn = true;
    return [];
  }

  /**
   * A tenant template's table: the plan of `tenant`'s rows (null: the rows without one, each a
   * fault), read and planned on their own — each tenant's lanes are its own, in its own database —
   * from where its last read stopped. Its slice, or none. Its confirmation is the table's prefix of
   * applied rows, whoever's (see TableProgress.appliedLanes), so no frontier is kept.
   */
  fromTenant(queue: DrainQueue, tenant: string | null, at: PlanAt & HeadOptions, out: TableOutcome): PlannedSlice[] {
    const { app, lanes: laneState, holds } = this.parts;
    laneState.liftHolds(at.now, tenant);
    const cursor = laneState.cursor(tenant);
    const read = queue.readTenantForDelivery(
      tenant,
      app.batchSize,
      at.maxBytes,
      this.#ready(at, out, true),
      cursor,
      (row) => laneState.isApplied(row),
    );
    out.wakeAt = minWake(out.wakeAt, laneState.nextLift(tenant));
    if (read.rows.length === 0) {
      if (read.gap) holds.gap(read.gap.seq, read.gap.prevSeq, at.now);
      return [];
    }
    holds.release("chain gap");
    const { plan } = this.#plan(queue, read, at, out, tenant, true);
    const seen = Math.max(read.rows.at(-1)!.seq, read.passedOver ?? 0, cursor ?? 0);
    const after: LanesAfter = {
      cursor: plan.resumeAt !== null ? plan.resumeAt - 1 : seen,
      frontier: null,
      lastRead: seen,
      epoch: laneState.epoch(tenant),
      whole: false,
    };
    if (plan.slice !== null) return [{ ...plan.slice, lanes: after }];
    laneState.moveOn(after, tenant); // nothing to send: its next read starts there at once
    if (read.truncated && (after.cursor ?? 0) > (cursor ?? 0)) out.more = out.readOn = true;
    return [];
  }

  /** Whether a read's head is ready (see tableReadiness); the time it is, when it is not, goes to `out`. */
  #ready(at: PlanAt & HeadOptions, out: TableOutcome, lanes: boolean) {
    const { app } = this.parts;
    const knobs = { threshold: app.tableFlushThreshold, maxWaitMs: app.tableMaxWaitMs };
    return (head: OutboxRow, pending: number): boolean => {
      const readiness = tableReadiness(head, pending, at.now, knobs, at.force, lanes);
      out.wakeAt = minWake(out.wakeAt, readiness.wakeAt);
      return readiness.ready;
    };
  }

  /**
   * Plans `rows` (of `tenant`, when the table's lanes are a tenant's) and carries out what it decided for
   * their heads.
   */
  #plan(
    queue: DrainQueue,
    read: Pick<DeliveryRead, "rows" | "spans" | "truncated">,
    at: PlanAt,
    out: TableOutcome,
    tenant: string | null,
    lanes: boolean,
  ): { plan: Plan } {
    const { app, lanes: laneState, progress } = this.parts;
    const plan = planSlice(
      plannerInput(app, laneState, read, {
        ...at,
        more: read.truncated,
        position: "head",
        blocked: lanes ? laneState.blocked(tenant) : NO_LANES,
        cuts: progress.cuts(tenant),
      }),
    );
    this.#carryOut(queue, plan, out, tenant);
    if (plan.waiting.size > 0) this.#waits = new Map([...this.#waits, ...plan.waiting]);
    if (!lanes) return { plan };
    for (const until of plan.backingOff.values()) out.wakeAt = minWake(out.wakeAt, until);
    laneState.planned(plan, tenant);
    return { plan };
  }

  /** What the planner decided for the heads: cuts passed, head groups dead-lettered, heads charged. */
  #carryOut(queue: DrainQueue, plan: Plan, out: TableOutcome, tenant: string | null): void {
    const { charges, progress } = this.parts;
    progress.passed(plan.cutsPassed, tenant);
    out.more ||= plan.more;
    for (const dead of plan.deadLetters) {
      // Out of attempts that were charged but never answered: the drain died delivering it, again and again.
      addCharged(out, charges.deadLetter(queue, dead.row, dead.reason, dead.message, dead.errorClass));
    }
    for (const { row, message, errorClass, lanes } of plan.charges) {
      queue.recordAttempt(row.seq, new Date(this.parts.now()));
      const charged = charges.failed(queue, row, row.attempts + 1, message, errorClass);
      addCharged(out, charged);
      if (charged.retryAt !== null) for (const lane of lanes) plan.backingOff.set(lane, charged.retryAt);
    }
  }
}
