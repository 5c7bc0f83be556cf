import type { OutboxRow } from "../../outbox/outbox.ts";

/*
 * The groups of a run of pending rows, read in seq order: a row continues its predecessor's group
 * when both carry the same grp (rows of one local transaction); a row without a grp is a group of
 * its own. A slice, a cut, a charge and a dead letter all go by these boundaries.
 */

/** Where each group of `rows` starts (indexes): a row starts a group unless it shares its predecessor's. */
export function groupStarts(rows: ReadonlyArray<Pick<OutboxRow, "grp">>): number[] {
  const starts: number[] = [];
  rows.forEach((row, i) => {
    if (i === 0 || row.grp === null || row.grp !== rows[i - 1]!.grp) starts.push(i);
  });
  return starts;
}

/** Where the group of row `at` starts. */
export function startOfGroup(rows: ReadonlyArray<Pick<OutboxRow, "grp">>, at: number): number {
  let start = at;
  while (start > 0 && rows[start]!.grp !== null && rows[start]!.grp === rows[start - 1]!.grp) start--;
  return start;
}

/** Where the group starting at row `start` ends (exclusive). */
export function endOfGroup(rows: ReadonlyArray<Pick<OutboxRow, "grp">>, start: number): number {
  let end = start + 1;
  while (end < rows.length && rows[end]!.grp !== null && rows[end]!.grp === rows[end - 1]!.grp) end++;
  return end;
}
