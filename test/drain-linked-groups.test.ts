// The cut of a batch's drafts for groups that span tables (linkDrafts): pure, no SQLite.
import { describe, expect, test } from "bun:test";
import { linkDrafts, type LinkableDraft } from "../src/drain/linked-groups.ts";

/** A draft of `table`: rows as [seq, grp], and the groups that span tables. */
function draft(
  table: string,
  rows: Array<[number, number | null]>,
  spans: Record<number, string[]> = {},
): LinkableDraft {
  return {
    table: { name: table },
    rows: rows.map(([seq, grp]) => ({ seq, grp })),
    spans: new Map(Object.entries(spans).map(([g, t]) => [Number(g), t])),
  };
}

const names = (units: LinkableDraft[][]) => units.map((u) => u.map((d) => d.table.name));

describe("linkDrafts", () => {
  test("drafts without groups that span tables go as they are, each its own unit", () => {
    const a = draft("a", [
      [1, null],
      [2, 2],
      [3, 2],
    ]);
    const b = draft("b", [[4, null]]);
    const { keep, units } = linkDrafts([a, b], new Set(["a", "b"]));
    expect([keep.get(a), keep.get(b)]).toEqual([3, 1]);
    expect(names(units)).toEqual([["a"], ["b"]]);
  });

  test("a group that heads both tables it spans goes, and links them into one unit", () => {
    const span = { 10: ["a", "b"] };
    const a = draft(
      "a",
      [
        [10, 10],
        [12, 10],
        [13, null],
      ],
      span,
    );
    const b = draft(
      "b",
      [
        [11, 10],
        [14, null],
      ],
      span,
    );
    const { keep, units } = linkDrafts([a, b], new Set(["a", "b"]));
    expect([keep.get(a), keep.get(b)]).toEqual([3, 2]);
    expect(names(units)).toEqual([["a", "b"]]);
  });

  test("a group whose other table's draft does not reach it cuts the draft before it; the rows before still go", () => {
    const span = { 20: ["a", "b"] };
    const a = draft(
      "a",
      [
        [1, null],
        [2, null],
        [20, 20],
        [22, null],
      ],
      span,
    );
    const b = draft("b", [[3, null]]); // b's draft stops before the group (batch_size, bytes, a backoff)
    const { keep, units } = linkDrafts([a, b], new Set(["a", "b"]));
    expect([keep.get(a), keep.get(b)]).toEqual([2, 1]);
    expect(names(units)).toEqual([["a"], ["b"]]);
  });

  test("a table with no draft at all (held, empty) holds the group in every table it spans", () => {
    const span = { 5: ["a", "b"] };
    const a = draft(
      "a",
      [
        [5, 5],
        [7, null],
      ],
      span,
    );
    const { keep, units } = linkDrafts([a], new Set(["a", "b"]));
    expect(keep.get(a)).toBe(0);
    expect(units).toEqual([]);
  });

  test("cuts cascade: a group cut in one table cuts the group behind it in another", () => {
    const spans = { 5: ["a", "b"], 9: ["b", "c"] };
    const a = draft("a", [[1, null]], spans); // does not reach group 5
    const b = draft(
      "b",
      [
        [5, 5],
        [9, 9],
      ],
      spans,
    );
    const c = draft(
      "c",
      [
        [9, 9],
        [10, null],
      ],
      spans,
    );
    const { keep, units } = linkDrafts([a, b, c], new Set(["a", "b", "c"]));
    expect([keep.get(a), keep.get(b), keep.get(c)]).toEqual([1, 0, 0]);
    expect(names(units)).toEqual([["a"]]);
  });

  test("chains of groups link every table they touch into one unit", () => {
    const spans = { 5: ["a", "b"], 9: ["b", "c"] };
    const a = draft("a", [[5, 5]], spans);
    const b = draft(
      "b",
      [
        [6, 5],
        [9, 9],
      ],
      spans,
    );
    const c = draft("c", [[10, 9]], spans);
    const { units } = linkDrafts([a, b, c], new Set(["a", "b", "c"]));
    expect(names(units)).toEqual([["a", "b", "c"]]);
  });

  test("a table another target serves is that target's: the group goes here with what this target serves", () => {
    const span = { 5: ["a", "elsewhere"] };
    const a = draft(
      "a",
      [
        [5, 5],
        [6, null],
      ],
      span,
    );
    const { keep, units } = linkDrafts([a], new Set(["a"]));
    expect(keep.get(a)).toBe(2);
    expect(names(units)).toEqual([["a"]]);
  });
});
