import { BoundedMemo } from "../bounded-memo.ts";
import { laneOf } from "../lane-key.ts";
import type { OutboxRow } from "../outbox/outbox.ts";
import type { Lane } from "./planner.ts";

/**
 * Which lane a table's row is in, and which ledger row accounts for it. The drain asks for a row's
 * lane several times per cycle (reading, planning, opening, applying); a backlog repeats a modest
 * number of keys, so the lane of a key text is remembered (bounded: a flood of unique keys only
 * costs the hash again). What the ledger says per lane is kept in an array by slot — a lane's
 * number, and `count` for the rows without a key, which the table's own ledger row accounts for —
 * so a row's check is an index, not a ledger row's name made and looked up.
 */
export class LaneMap {
  /** Keys whose lane is remembered; beyond, the oldest is forgotten. */
  static readonly MAX_KEYS = 4096;
  readonly #memo = new BoundedMemo<number>(LaneMap.MAX_KEYS);
  readonly #ledgerRows: readonly string[];

  constructor(
    private readonly table: string,
    readonly count: number,
  ) {
    this.#ledgerRows = Array.from({ length: count }, (_, lane) => (count === 1 ? table : `${table}#${lane}`));
  }

  /** A row's lane: 0 in a table of one lane; else its key's (see lane-key.ts), or null without a key (a barrier). */
  of(row: OutboxRow): Lane {
    if (this.count === 1) return 0;
    const key = row.laneKey;
    return key === null ? null : this.#memo.get(key, (text) => laneOf(text, this.count)!);
  }

  /** The slot of a row's lane in a throughs array (see throughsOf). */
  slotOf(row: OutboxRow): number {
    return this.of(row) ?? this.count;
  }

  /** The ledger row that accounts for a slot: the table's own for one lane or for rows without a key, `name#lane` for each lane. */
  ledgerRow(slot: number): string {
    return slot === this.count ? this.table : this.#ledgerRows[slot]!;
  }

  /** The ledger's throughs by slot, from its rows by name (a row it lacks is at 0; rows of lanes beyond `count`, left by an earlier count, are not this count's). */
  throughsOf(byRow: ReadonlyMap<string, number>): number[] {
    const throughs = new Array<number>(this.count + 1).fill(0);
    for (let slot = 0; slot <= this.count; slot++) throughs[slot] = byRow.get(this.ledgerRow(slot)) ?? 0;
    return throughs;
  }
}
