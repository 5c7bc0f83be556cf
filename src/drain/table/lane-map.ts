import { keyHash } from "../../lane-key.ts";
import type { OutboxRow } from "../../outbox/outbox.ts";
import type { Lane } from "./planner.ts";

/**
 * Which lane a table's row is in, and which ledger row accounts for it. The drain asks for a row's
 * lane several times per cycle (reading, planning, opening, applying): hashing its key again
 * (keyHash, in JS) costs less than looking the key up in a memo. What the ledger says per lane is
 * kept in an array by slot — a lane's number, and `count` for the rows without a key, which the
 * table's own ledger row accounts for — so a row's check is an index, not a ledger row's name made
 * and looked up.
 */
export class LaneMap {
  readonly #ledgerRows: readonly string[];

  constructor(
    private readonly table: string,
    readonly count: number,
  ) {
    this.#ledgerRows = Array.from({ length: count }, (_, lane) => (count === 1 ? table : `${table}#${lane}`));
  }

  /** A row's lane: 0 in a table of one lane; else its key's (see lane-key.ts), or null without a key (a barrier). */
  of(row: Pick<OutboxRow, "laneKey">): Lane {
    if (this.count === 1) return 0;
    const key = row.laneKey;
    return key === null ? null : keyHash(key) % this.count;
  }

  /** The slot of a row's lane in a throughs array (see throughsOf). */
  slotOf(row: Pick<OutboxRow, "laneKey">): number {
    return this.of(row) ?? this.count;
  }

  /**
   * The ledger row that accounts for a slot: the table's own for one lane or for rows without a key,
   * `name#lane` for each lane.
   */
  ledgerRow(slot: number): string {
    return slot === this.count ? this.table : this.#ledgerRows[slot]!;
  }

  /**
   * The throughs by slot once `ahead` is applied over `known`: each lane `ahead` has rows of at its
   * last one there, every other where `known` has it. `slots`: `ahead`'s rows' slots, when known.
   */
  throughsAfter(known: readonly number[], ahead: readonly OutboxRow[], slots?: readonly number[]): number[] {
    const throughs = [...known];
    for (let i = 0; i < ahead.length; i++) throughs[slots?.[i] ?? this.slotOf(ahead[i]!)] = ahead[i]!.seq;
    return throughs;
  }

  /**
   * The ledger's throughs by slot, from its rows by name (a row it lacks is at 0; rows of lanes beyond
   * `count`, left by an earlier count, are not this count's).
   */
  throughsOf(byRow: ReadonlyMap<string, number>): number[] {
    const throughs = new Array<number>(this.count + 1).fill(0);
    for (let slot = 0; slot <= this.count; slot++) throughs[slot] = byRow.get(this.ledgerRow(slot)) ?? 0;
    return throughs;
  }
}
