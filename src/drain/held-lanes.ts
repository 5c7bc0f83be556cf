// How many of a table's lanes are held, one rule for status, the metrics and the console (which
// imports it into its browser build: so this file imports nothing).

/**
 * Lanes held by a head backing off: every lane when a row without a key (lane null) holds them; 0 without
 * held heads.
 */
export function heldLaneCount(lanes: { count: number; held: ReadonlyArray<{ lane: number | null }> }): number {
  return lanes.held.some((l) => l.lane === null) ? lanes.count : new Set(lanes.held.map((l) => l.lane)).size;
}
