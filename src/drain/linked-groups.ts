import type { OutboxRow } from "../outbox/outbox.ts";
import type { Lane } from "./table/planner.ts";
import { endOfGroup, groupStarts } from "./table/row-groups.ts";
import type { WaitingGroup } from "./table/slice.ts";

export type { WaitingGroup } from "./table/slice.ts";

/**
 * What linking needs of a table's draft: its table (name and lanes), its rows' groups, and which of those
 * span tables.
 */
export interface LinkableDraft {
  table: { name: string; lanes: number; laneOf(row: Pick<OutboxRow, "laneKey">): Lane };
  rows: ReadonlyArray<Pick<OutboxRow, "seq" | "grp" | "laneKey">>;
  spans: ReadonlyMap<number, readonly string[]>;
}

/**
 * When a group that spans tables, waiting in `table`, may go there at the earliest (epoch ms): the
 * table's plan held it back until then (a backoff of its own or of a group before it in its lanes).
 * Null: not known (the table did not read it, or holds it for a reason without a time).
 */
export type WaitsIn = (table: string, grp: number) => number | null;

/**
 * Whether a group that spans tables has no row left to deliver in `table`: its part there was
 * confirmed — applied by a database that was since dropped and made anew, whose ledger sends the rest
 * again. Asked only of a table whose draft does not carry the group.
 */
export type GoneFrom = (table: string, grp: number) => boolean;

/** How the drafts of one batch go: the groups each holds back, and the units that must commit together. */
export interface Linking<D> {
  /** Per draft that holds groups back, those groups, in row order: the lanes each is in are held from it on. */
  held: Map<D, WaitingGroup[]>;
  /** Drafts linked by a group that spans their tables, each unit in the order given (drafts alone are units of one). */
  units: D[][];
}

/**
 * A group that spans tables (one transaction the application committed across a db_file's
 * tables) is delivered when it heads every table it touches that this target serves — all of it,
 * in one remote transaction — and not before. A draft that carries such a group while a table it
 * touches has no draft reaching it holds the group back, and with it exactly the lanes it occupies
 * in that table: every later group of those lanes waits too (a table of one lane: everything
 * after it), and holds its own lanes in turn, as a plan holds a table's lanes behind a head that
 * waits (planner.ts). Groups of other lanes go around it. Holding a group back can leave another
 * table's part of a group unmatched, so it runs until nothing changes. Each group held back says
 * until when it waits, when the tables that hold it know (`waitsIn`). Tables the target does not
 * serve (`served`) are another target's: their part of a group goes there, in its own transaction;
 * a table where its part is gone (`goneFrom`) is not waited for. The drafts are not changed.
 */
export function linkDrafts<D extends LinkableDraft>(
  drafts: readonly D[],
  served: ReadonlySet<string>,
  waitsIn: WaitsIn = () => null,
  goneFrom: GoneFrom = () => false,
): Linking<D> {
  const held = new Map<D, WaitingGroup[]>();
  // Only a draft that read a group spanning tables can hold one back or link others (most read none).
  const spanning = drafts.filter((d) => d.spans.size > 0);
  if (spanning.length === 0) return { held, units: drafts.map((d) => [d]) };
  const byTable = new Map<string, D>(drafts.map((d) => [d.table.name, d]));
  /** Per draft, where each group that spans tables starts (by group). */
  const starts = new Map<D, Map<number, number>>();
  for (const d of spanning) {
    const at = new Map<number, number>();
    for (const start of groupStarts(d.rows)) {
      const grp = d.rows[start]!.grp;
      if (grp !== null && d.spans.has(grp)) at.set(grp, start);
    }
    starts.set(d, at);
  }
  /** Per draft, the groups it holds back, by where they start: each pass decides them anew from the last. */
  let waiting = new Map<D, Map<number, WaitingGroup>>(spanning.map((d) => [d, new Map()]));
  /** The group `grp` of draft `d`, when held back: null when it holds it and goes, undefined when it has none. */
  const heldIn = (d: D, grp: number): WaitingGroup | null | undefined => {
    const start = starts.get(d)?.get(grp);
    return start === undefined ? undefined : (waiting.get(d)!.get(start) ?? null);
  };
  const crossing = (d: D, start: number): string[] => {
    const grp = d.rows[start]!.grp;
    const tables = grp === null ? undefined : d.spans.get(grp);
    return tables === undefined ? [] : tables.filter((t) => t !== d.table.name && served.has(t));
  };
  /**
   * A group not in `d` (a table of one lane: behind all of it) waits at least as long as the first
   * group `d` holds back; null when it holds none, or has lanes (other lanes may pass it).
   */
  const behindHeld = (d: D | undefined): number | null => {
    if (d === undefined || d.table.lanes !== 1) return null;
    const first = waiting.get(d)?.values().next().value;
    return first?.until ?? null;
  };
  for (let changed = true; changed; ) {
    const next = new Map<D, Map<number, WaitingGroup>>();
    for (const d of spanning) {
      const mine = new Map<number, WaitingGroup>();
      const lanes = new HeldLanes(d.table.lanes);
      for (const start of groupStarts(d.rows)) {
        const end = endOfGroup(d.rows, start);
        const groupLanes = lanesOf(d, start, end);
        const behind = lanes.holding(groupLanes);
        let until = behind?.until ?? null;
        const waitsOn = new Set(behind?.waitsOn ?? []);
        const grp = d.rows[start]!.grp;
        for (const t of grp === null ? [] : crossing(d, start)) {
          const other = byTable.get(t);
          const there = other === undefined ? undefined : heldIn(other, grp!);
          if (there === null) continue; // it goes there
          if (there === undefined && goneFrom(t, grp!)) continue; // nothing of it is left there
          waitsOn.add(t);
          until = earliest(until, there?.until ?? waitsIn(t, grp!) ?? behindHeld(other));
        }
        if (behind === null && waitsOn.size === 0) continue;
        const group = { start, end, until, waitsOn: [...waitsOn] };
        mine.set(start, group);
        lanes.hold(groupLanes, group);
      }
      next.set(d, mine);
    }
    changed = spanning.some((d) => !sameGroups(waiting.get(d)!, next.get(d)!));
    waiting = next;
  }
  for (const d of spanning) {
    const groups = [...waiting.get(d)!.values()].sort((a, b) => a.start - b.start);
    if (groups.length > 0) held.set(d, groups);
  }
  // Units: drafts joined by the groups they keep (union-find over drafts).
  const parent = new Map<D, D>(drafts.map((d) => [d, d]));
  const root = (d: D): D => {
    while (parent.get(d) !== d) d = parent.get(d)!;
    return d;
  };
  for (const d of spanning) {
    for (const [grp, start] of starts.get(d)!) {
      if (heldIn(d, grp) !== null) continue;
      for (const t of crossing(d, start)) {
        const other = byTable.get(t);
        if (other !== undefined) parent.set(root(other), root(d));
      }
    }
  }
  const units = new Map<D, D[]>();
  for (const d of drafts) {
    const kept = d.rows.length - (held.get(d) ?? []).reduce((n, g) => n + g.end - g.start, 0);
    if (kept === 0) continue;
    const r = root(d);
    units.set(r, [...(units.get(r) ?? []), d]);
  }
  return { held, units: [...units.values()] };
}

/** Whether two passes held back the same groups of a draft, until the same times. */
function sameGroups(a: ReadonlyMap<number, WaitingGroup>, b: ReadonlyMap<number, WaitingGroup>): boolean {
  if (a.size !== b.size) return false;
  for (const [start, g] of a) if (b.get(start)?.until !== g.until) return false;
  return true;
}

/**
 * The earlier of two times a group may go at, where known (a time beats "not known": the group waits at least
 * that long).
 */
function earliest(a: number | null, b: number | null): number | null {
  return a === null ? b : b === null ? a : Math.min(a, b);
}

/** The lanes of a draft's group `[start, end)` (null among them: a row without a key, a barrier over every lane). */
function lanesOf(d: LinkableDraft, start: number, end: number): Lane[] {
  const lanes: Lane[] = [];
  for (let i = start; i < end; i++) {
    const lane = d.table.laneOf(d.rows[i]!);
    if (!lanes.includes(lane)) lanes.push(lane);
  }
  return lanes;
}

/** The lanes of one draft held so far, in row order, by the groups that wait (until when, and on which tables). */
class HeldLanes {
  readonly #byLane = new Map<Lane, WaitingGroup>();
  /** A barrier that waits: it holds every lane. */
  #all: WaitingGroup | null = null;

  constructor(private readonly count: number) {}

  /** The groups a group in `lanes` waits behind, merged (null: none; a barrier waits behind any). */
  holding(lanes: readonly Lane[]): { until: number | null; waitsOn: string[] } | null {
    const behind: WaitingGroup[] = [];
    if (this.#all !== null) behind.push(this.#all);
    if (lanes.includes(null)) behind.push(...this.#byLane.values());
    else for (const l of lanes) if (this.#byLane.has(l)) behind.push(this.#byLane.get(l)!);
    if (behind.length === 0) return null;
    let until: number | null = null;
    for (const g of behind) until = earliest(until, g.until);
    return { until, waitsOn: [...new Set(behind.flatMap((g) => g.waitsOn))] };
  }

  /** The group `group`, in `lanes`, waits: it holds them (every lane for a barrier) for the groups after it. */
  hold(lanes: readonly Lane[], group: WaitingGroup): void {
    if (lanes.includes(null) || this.count === 1) {
      this.#all = group;
      return;
    }
    for (const l of lanes) this.#byLane.set(l, group);
  }
}
