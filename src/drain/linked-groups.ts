import type { OutboxRow } from "../outbox/outbox.ts";
import { groupStarts } from "./row-groups.ts";

/** What linking needs of a table's draft: its name, its rows' groups, and which of those span tables. */
export interface LinkableDraft {
  table: { name: string };
  rows: ReadonlyArray<Pick<OutboxRow, "seq" | "grp">>;
  spans: ReadonlyMap<number, readonly string[]>;
}

/** How the drafts of one batch go: how many rows each keeps, and the units that must commit together. */
export interface Linking<D> {
  /** Rows each draft keeps, from its head (a group boundary); 0 means it waits for a later batch. */
  keep: Map<D, number>;
  /** Drafts linked by a group that spans their tables, each unit in the order given (drafts alone are units of one). */
  units: D[][];
}

/**
 * A group that spans tables (one transaction the application committed across a db_file's
 * tables) is delivered when it heads every table it touches that this target serves — all of it,
 * in one remote transaction — and not before: a draft that carries such a group while a table it
 * touches has no draft reaching it is cut before the group, and what follows waits with it. Cuts
 * can make other groups incomplete, so it runs until nothing changes. Tables the target does not
 * serve (`served`) are another target's: their part of a group goes there, in its own transaction.
 * Pure: no I/O, the drafts are not changed.
 */
export function linkDrafts<D extends LinkableDraft>(drafts: readonly D[], served: ReadonlySet<string>): Linking<D> {
  const keep = new Map<D, number>(drafts.map((d) => [d, d.rows.length]));
  const byTable = new Map<string, D>(drafts.map((d) => [d.table.name, d]));
  const reaches = (table: string, grp: number) => {
    const other = byTable.get(table);
    if (other === undefined) return false;
    const kept = keep.get(other)!;
    for (let i = 0; i < kept; i++) if (other.rows[i]!.grp === grp) return true;
    return false;
  };
  const crossing = (d: D, start: number): string[] => {
    const grp = d.rows[start]!.grp;
    const tables = grp === null ? undefined : d.spans.get(grp);
    return tables === undefined ? [] : tables.filter((t) => t !== d.table.name && served.has(t));
  };
  // Only a draft that read a group spanning tables can be cut or link others (most read none).
  const spanning = drafts.filter((d) => d.spans.size > 0);
  for (let changed = true; changed; ) {
    changed = false;
    for (const d of spanning) {
      const kept = keep.get(d)!;
      for (const start of groupStarts(d.rows.slice(0, kept))) {
        const grp = d.rows[start]!.grp!;
        if (crossing(d, start).every((t) => reaches(t, grp))) continue;
        keep.set(d, start);
        changed = true;
        break;
      }
    }
  }
  // Units: drafts joined by the groups that stayed (union-find over table names).
  const parent = new Map<D, D>(drafts.map((d) => [d, d]));
  const root = (d: D): D => {
    while (parent.get(d) !== d) d = parent.get(d)!;
    return d;
  };
  for (const d of spanning) {
    for (const start of groupStarts(d.rows.slice(0, keep.get(d)!))) {
      for (const t of crossing(d, start)) parent.set(root(byTable.get(t)!), root(d));
    }
  }
  const units = new Map<D, D[]>();
  for (const d of drafts) {
    if (keep.get(d) === 0) continue;
    const r = root(d);
    units.set(r, [...(units.get(r) ?? []), d]);
  }
  return { keep, units: [...units.values()] };
}
