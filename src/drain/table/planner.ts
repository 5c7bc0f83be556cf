import { describeError, InvalidArgumentError, UnsupportedStatementError } from "../../errors.ts";
import type { DeadReason, OutboxRow } from "../../outbox/outbox.ts";
import { parseTimestamp } from "../../outbox/timestamp.ts";
import type { Statement } from "../../writers/writer.ts";
import { endOfGroup, groupStarts } from "./row-groups.ts";

/** A row's lane: a number, or null for a row without a key in a table with lanes — a barrier across every lane. */
export type Lane = number | null;

/** What a table's slice is planned from: the rows read for it and what holds them back. */
export interface PlanInput {
  /**
   * Pending rows read for delivery, whole groups, in seq order; the planner takes them over (their text moves
   * into `stmts`).
   */
  rows: OutboxRow[];
  /** The groups among `rows` that span tables: group → the tables it touches. */
  spans: ReadonlyMap<number, readonly string[]>;
  /** More rows are pending behind `rows` (the read stopped at its limit, its byte budget or a chain gap). */
  more: boolean;
  /**
   * `head`: `rows` start at the table's head, whose group is dealt with here (dead-lettered when
   * it can never go, charged when it fails to convert). `after`: they follow a slice in flight
   * (read ahead), so none is the head and a group with a history ends the plan (it is decided
   * when it heads the table).
   */
  position: "head" | "after";
  /** How many lanes the table has (1: one strict order, every row in lane 0). */
  lanes: number;
  /** A row's lane (see Lane); with one lane, 0. */
  laneOf(row: OutboxRow): Lane;
  /**
   * Lanes held back by rows before these (a head backing off, and the lanes a group shares with it), until
   * when (epoch ms); null: every lane.
   */
  blocked: ReadonlyMap<Lane, number>;
  /**
   * Per lane, a row behind its head failed last time: the lane's part of the slice stops before it, unless it
   * heads the lane.
   */
  cuts: ReadonlyMap<Lane, number>;
  nowMs: number;
  /** A head that has had this many attempts is dead-lettered (null: never). */
  maxAttempts: number | null;
  /**
   * Converts one row into the statement sent for it; throws UnsupportedStatementError, InvalidArgumentError
   * or anything else.
   */
  prepare(row: OutboxRow): Statement;
}

/** A table's slice as planned: its rows and statements, whole groups, in seq order. */
export interface SlicePlan {
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

/** A head group that can never go: dead-lettered whole before the slice (the next group heads its lanes then). */
export interface HeadDeadLetter {
  row: OutboxRow;
  reason: DeadReason;
  message: string;
  errorClass: string;
  /** It ran out of attempts that were charged but never answered (the drain died delivering it). */
  exhausted: boolean;
}

/** A head backing off that holds its lane: its row's seq, key, attempts, last error and retry time (epoch ms). */
export interface HeldHead {
  seq: number;
  key: string | null;
  attempts: number;
  lastError: string | null;
  retryAt: number;
}

/** What planning decided: the slice (null: nothing to send), and what happens to the heads. */
export interface Plan {
  slice: SlicePlan | null;
  /** Head groups to dead-letter first, in order. */
  deadLetters: HeadDeadLetter[];
  /** Head groups that failed to convert for a reason nobody foresaw: charged one attempt each, never silently. */
  charges: Array<{ row: OutboxRow; message: string; errorClass: string; lanes: Lane[] }>;
  /** Lanes whose cut was reached at their head: the group there heads them now (forget those cuts). */
  cutsPassed: Lane[];
  /** Lanes held back by a head backing off, and until when (epoch ms): with the lanes that share a group with it. */
  backingOff: Map<Lane, number>;
  /** The heads backing off that hold their lanes, by lane (what status shows of a held lane). */
  heldHeads: Map<Lane, HeldHead>;
  /**
   * The groups among the rows that span tables and wait here (see linked-groups.ts), by group: until
   * when, when a backoff says (epoch ms), else null. The other tables they span hold them too.
   */
  waiting: Map<number, number | null>;
  /**
   * The first row these rows leave pending for a reason other than a backoff (a cut, a group that
   * could not be converted, one read ahead with a history): a later read must start at or before
   * it. Null: none.
   */
  resumeAt: number | null;
  /**
   * The first row these rows leave pending for any reason (everything before it was taken, or dead-lettered).
   * Null: none.
   */
  frontier: number | null;
  /** Plan again at once: a head was dealt with, a group refused to convert, or more is ready behind the slice. */
  more: boolean;
}

/**
 * Plans one table's slice from the rows read for it: group by group, whole groups only, in seq
 * order. A group goes when it heads each lane it is in — nothing earlier of those lanes waits — so
 * a group that must wait holds its lanes (and only those) for the rest of the plan: one behind its
 * lane's cut, one backing off, one that cannot be converted; a row without a key in a table with
 * lanes waits for every lane and holds them all. A head group that can never go (out of attempts,
 * undecodable, an unsupported statement) is dead-lettered and the next one heads its lanes. With
 * one lane this is one strict order: the first group that waits ends the slice. Pure: no I/O, the
 * same input gives the same plan; the table carries it out.
 */
export function planSlice(input: PlanInput): Plan {
  const { rows, nowMs, maxAttempts } = input;
  const plan: Plan = {
    slice: null,
    deadLetters: [],
    charges: [],
    cutsPassed: [],
    backingOff: new Map(input.blocked),
    heldHeads: new Map(),
    waiting: new Map(),
    resumeAt: null,
    frontier: null,
    more: false,
  };
  const slice: SlicePlan = { rows: [], stmts: [], rowBytes: [], bytes: 0, more: input.more, spans: new Map() };
  /** Lanes held back for the rest of the plan; null in it: every lane. */
  const blocked = new Set<Lane>(input.blocked.keys());
  /** Lanes with rows in the slice: a later group of them does not head them. */
  const taken = new Set<Lane>();
  const passed = new Set<Lane>();
  /** Every lane is held: nothing after can go. */
  let allHeld = blocked.has(null) || blocked.size >= input.lanes;
  /**
   * The group starting with `first` (in `lanes`) waits: its lanes are held for the rest of the plan (a
   * barrier holds every lane).
   */
  const wait = (first: OutboxRow, lanes: readonly Lane[], resume: boolean, until: number | null = null) => {
    for (const l of lanes.includes(null) ? EVERY_LANE : lanes) {
      blocked.add(l);
      if (until !== null) plan.backingOff.set(l, Math.min(plan.backingOff.get(l) ?? until, until));
    }
    allHeld = blocked.has(null) || blocked.size >= input.lanes;
    plan.frontier ??= first.seq;
    if (resume) plan.resumeAt ??= first.seq;
    if (first.grp !== null && input.spans.has(first.grp)) plan.waiting.set(first.grp, until);
  };
  const starts = groupStarts(rows);
  const single: Lane[] = [0];
  for (let g = 0; g < starts.length; g++) {
    if (allHeld) {
      plan.frontier ??= rows[starts[g]!]!.seq;
      if (input.spans.size > 0) waitBehind(plan, input, rows, starts.slice(g));
      break;
    }
    const group = rows.slice(starts[g], starts[g + 1] ?? rows.length);
    const first = group[0]!;
    // One lane (the common case) needs no lane sets: nothing before it is held (checked above), and it heads
    // the table while nothing is taken.
    const one = input.lanes === 1;
    let lanes: readonly Lane[] = ONE_LANE;
    if (!one && group.length === 1) {
      // A single row (most of a backlog): its lane in a scratch array, which nothing keeps (charges copy it).
      single[0] = input.laneOf(first);
      lanes = single;
    } else if (!one) lanes = lanesOf(group, input.laneOf);
    const barrier = !one && lanes.includes(null);
    const canGo = one || (barrier ? blocked.size === 0 : noneIn(lanes, blocked));
    // A row without a key taken before heads every lane: nothing after it heads one (`taken` holds null then).
    const heads =
      canGo &&
      input.position === "head" &&
      (one || barrier ? taken.size === 0 : !taken.has(null) && noneIn(lanes, taken));
    if (!canGo) {
      // Held by an earlier group of one of its lanes: it waits as long as that one does.
      let until = Number.POSITIVE_INFINITY;
      for (const l of lanes) until = Math.min(until, plan.backingOff.get(l) ?? Number.POSITIVE_INFINITY);
      wait(first, lanes, !Number.isFinite(until), Number.isFinite(until) ? until : null);
      continue;
    }
    if (input.cuts.size > 0) {
      const cut = lanes.filter((l) => !passed.has(l) && first.seq >= (input.cuts.get(l) ?? Number.POSITIVE_INFINITY));
      if (cut.length > 0) {
        if (!heads) {
          wait(first, lanes, true);
          continue;
        }
        for (const l of cut) passed.add(l); // the groups before it went: it heads its lanes now
        plan.cutsPassed.push(...cut);
      }
    }
    if (input.position === "after" && (first.attempts > 0 || first.nextAttemptAt)) {
      slice.more = true; // it follows: the next plan sees it at the head
      wait(first, lanes, true);
      continue;
    }
    const retryAt = retryTime(first, nowMs);
    if (retryAt !== null) {
      wait(first, lanes, false, retryAt); // it waits to be tried again
      const held = {
        seq: first.seq,
        key: first.laneKey,
        attempts: first.attempts,
        lastError: first.lastError,
        retryAt,
      };
      for (const l of barrier ? EVERY_LANE : lanes) plan.heldHeads.set(l, held);
      continue;
    }
    if (heads && maxAttempts !== null && first.attempts >= maxAttempts) {
      const message = first.lastError ?? "attempts exhausted without a result (the drain stopped during delivery)";
      const errorClass = first.lastErrorClass ?? "max_attempts";
      plan.deadLetters.push({ row: first, reason: "max_attempts", message, errorClass, exhausted: true });
      plan.more = true;
      continue;
    }
    const converted = convert(group, input.prepare);
    if ("refused" in converted) {
      slice.more = plan.more = true;
      if (!heads) {
        wait(first, lanes, true); // it heads its lanes in a later plan, and is dealt with then
        continue;
      }
      const { row, error } = converted.refused;
      const { message, errorClass } = describeError(error);
      const text = `${group.length > 1 ? `seq ${row.seq} of the group of seq ${first.seq}: ` : ""}${message}`;
      if (error instanceof UnsupportedStatementError || error instanceof InvalidArgumentError) {
        const reason = error instanceof UnsupportedStatementError ? "unsupported_statement" : "undecodable";
        plan.deadLetters.push({ row: first, reason, message: text, errorClass, exhausted: false });
        continue;
      }
      plan.charges.push({ row: first, message: text, errorClass, lanes: [...lanes] });
      wait(first, lanes, true); // charged: it backs off (the table knows until when)
      continue;
    }
    take(slice, group, converted.stmts, input.spans);
    if (!one || taken.size === 0) for (const l of lanes) taken.add(l);
  }
  if (slice.rows.length > 0) plan.slice = slice;
  plan.more ||= slice.more && plan.slice !== null;
  return plan;
}

/**
 * Every lane is held: the groups that span tables among the rest of the rows wait as long as the
 * earliest backoff of their lanes (null when none of them backs off: they wait for a later plan).
 */
function waitBehind(plan: Plan, input: PlanInput, rows: readonly OutboxRow[], starts: readonly number[]): void {
  const every = plan.backingOff.get(null);
  for (const start of starts) {
    const first = rows[start]!;
    if (first.grp === null || !input.spans.has(first.grp)) continue;
    const group = rows.slice(start, endOfGroup(rows, start));
    let until = every ?? Number.POSITIVE_INFINITY;
    const lanes = input.lanes === 1 ? ONE_LANE : lanesOf(group, input.laneOf);
    for (const l of lanes.includes(null) ? [...plan.backingOff.keys()] : lanes)
      until = Math.min(until, plan.backingOff.get(l) ?? Number.POSITIVE_INFINITY);
    plan.waiting.set(first.grp, Number.isFinite(until) ? until : null);
  }
}

/** The one lane of a table without lanes, and the lane a barrier holds (every lane). */
const ONE_LANE: readonly Lane[] = Object.freeze([0]);
const EVERY_LANE: readonly Lane[] = Object.freeze([null]);

/** Whether none of `lanes` is in `set`. */
function noneIn(lanes: readonly Lane[], set: ReadonlySet<Lane>): boolean {
  for (let i = 0; i < lanes.length; i++) if (set.has(lanes[i]!)) return false;
  return true;
}

/** The distinct lanes of a group's rows. */
export function lanesOf(group: readonly OutboxRow[], laneOf: (row: OutboxRow) => Lane): Lane[] {
  const lanes: Lane[] = [];
  for (let i = 0; i < group.length; i++) {
    const lane = laneOf(group[i]!);
    if (!lanes.includes(lane)) lanes.push(lane); // a group touches a few lanes: a scan beats a Set
  }
  return lanes;
}

/** When `row` is tried again, if that is still to come (epoch ms); null when it may go now. */
function retryTime(row: OutboxRow, nowMs: number): number | null {
  if (row.nextAttemptAt === null) return null;
  const at = parseTimestamp(row.nextAttemptAt) ?? 0;
  return at > nowMs ? at : null;
}

/** A group's statements, or the row that refused to convert and why. */
function convert(
  group: OutboxRow[],
  prepare: PlanInput["prepare"],
): { stmts: Statement[] } | { refused: { row: OutboxRow; error: unknown } } {
  const stmts: Statement[] = [];
  for (const row of group) {
    try {
      stmts.push(prepare(row));
    } catch (error) {
      return { refused: { row, error } };
    }
  }
  return { stmts };
}

/** Adds a converted group to the slice; a row's text lives on in its statement only, so a large row is held once. */
function take(
  slice: SlicePlan,
  group: OutboxRow[],
  stmts: Statement[],
  spans: ReadonlyMap<number, readonly string[]>,
): void {
  for (let i = 0; i < group.length; i++) {
    const row = group[i]!;
    const bytes = row.tag.length + row.payload.length;
    row.tag = row.payload = "";
    slice.rows.push(row);
    slice.stmts.push(stmts[i]!);
    slice.rowBytes.push(bytes);
    slice.bytes += bytes;
    const span = row.grp === null ? undefined : spans.get(row.grp);
    if (span !== undefined) slice.spans.set(row.grp!, [...span]);
  }
}
