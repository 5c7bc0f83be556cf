// What linkDrafts decides for a batch's drafts when groups span tables: pure, no SQLite.
import { describe, expect, test } from "bun:test";
import { type LinkableDraft, type Linking, linkDrafts } from "../src/drain/linked-groups.ts";

/** A draft of `table` with `lanes` lanes: rows as [seq, grp] or [seq, grp, lane] (lane null: no key), and the groups that span tables. */
function draft(
  table: string,
  rows: Array<[number, number | null] | [number, number | null, number | null]>,
  spans: Record<number, string[]> = {},
  lanes = 1,
): LinkableDraft {
  return {
    table: {
      name: table,
      lanes,
      laneOf: (row) => (lanes === 1 ? 0 : row.laneKey === null ? null : Number(row.laneKey)),
    },
    rows: rows.map(([seq, grp, lane]) => ({
      seq,
      grp,
      laneKey: lane === undefined || lane === null ? null : `${lane}`,
    })),
    spans: new Map(Object.entries(spans).map(([g, t]) => [Number(g), t])),
  };
}

const names = (units: LinkableDraft[][]) => units.map((u) => u.map((d) => d.table.name));
/** The seqs a draft keeps once the groups held back are taken out. */
function kept(linking: Linking<LinkableDraft>, d: LinkableDraft): number[] {
  const held = linking.held.get(d) ?? [];
  return d.rows.filter((_, i) => !held.some((g) => i >= g.start && i < g.end)).map((r) => r.seq);
}
const all = (...tables: string[]) => new Set(tables);

describe("linkDrafts, tables of one lane", () => {
  test("a group whose part in another table is gone (confirmed there, sent again here) goes alone; one whose part is only not read waits", () => {
    const span = { 10: ["a", "b"] };
    const a = draft(
      "a",
      [
        [11, 10],
        [13, null],
      ],
      span,
    );
    const gone = linkDrafts([a], all("a", "b"), undefined, (table, grp) => table === "b" && grp === 10);
    expect(kept(gone, a)).toEqual([11, 13]);
    expect(names(gone.units)).toEqual([["a"]]);
    const unread = linkDrafts([a], all("a", "b"), undefined, () => false);
    expect(kept(unread, a)).toEqual([]);
  });

  test("drafts without groups that span tables go as they are, each its own unit", () => {
    const a = draft("a", [
      [1, null],
      [2, 2],
      [3, 2],
    ]);
    const b = draft("b", [[4, null]]);
    const linking = linkDrafts([a, b], all("a", "b"));
    expect([kept(linking, a), kept(linking, b)]).toEqual([[1, 2, 3], [4]]);
    expect(names(linking.units)).toEqual([["a"], ["b"]]);
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
    const linking = linkDrafts([a, b], all("a", "b"));
    expect([kept(linking, a), kept(linking, b)]).toEqual([
      [10, 12, 13],
      [11, 14],
    ]);
    expect(linking.held.size).toBe(0);
    expect(names(linking.units)).toEqual([["a", "b"]]);
  });

  test("a group whose other table's draft does not reach it holds the rest of a table of one lane; the rows before still go", () => {
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
    const linking = linkDrafts([a, b], all("a", "b"));
    expect([kept(linking, a), kept(linking, b)]).toEqual([[1, 2], [3]]);
    expect(linking.held.get(a)).toEqual([
      { start: 2, end: 3, until: null, waitsOn: ["b"] },
      { start: 3, end: 4, until: null, waitsOn: ["b"] },
    ]);
    expect(names(linking.units)).toEqual([["a"], ["b"]]);
  });

  test("a table with no draft at all (held, empty) holds the group in every table it spans", () => {
    const a = draft(
      "a",
      [
        [5, 5],
        [7, null],
      ],
      { 5: ["a", "b"] },
    );
    const linking = linkDrafts([a], all("a", "b"));
    expect(kept(linking, a)).toEqual([]);
    expect(linking.units).toEqual([]);
  });

  test("holds cascade: a group held in one table holds the group behind it in another", () => {
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
    const linking = linkDrafts([a, b, c], all("a", "b", "c"));
    expect([kept(linking, a), kept(linking, b), kept(linking, c)]).toEqual([[1], [], []]);
    expect(names(linking.units)).toEqual([["a"]]);
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
    expect(names(linkDrafts([a, b, c], all("a", "b", "c")).units)).toEqual([["a", "b", "c"]]);
  });

  test("a table another target serves is that target's: the group goes here with what this target serves", () => {
    const a = draft(
      "a",
      [
        [5, 5],
        [6, null],
      ],
      { 5: ["a", "elsewhere"] },
    );
    const linking = linkDrafts([a], all("a"));
    expect(kept(linking, a)).toEqual([5, 6]);
    expect(names(linking.units)).toEqual([["a"]]);
  });
});

describe("linkDrafts, tables with lanes", () => {
  test("a group held in another table holds only the lanes it occupies here: later rows of other lanes go around it", () => {
    const span = { 10: ["a", "b"] };
    const a = draft("a", [[1, null, 0]], span, 4); // a holds group 10 back (its lane backs off)
    const b = draft(
      "b",
      [
        [11, 10, 1],
        [12, null, 2],
        [13, null, 1],
        [14, null, 3],
      ],
      span,
      4,
    );
    const linking = linkDrafts([a, b], all("a", "b"), (t, grp) => (t === "a" && grp === 10 ? 5_000 : null));
    expect(kept(linking, b)).toEqual([12, 14]);
    expect(linking.held.get(b)).toEqual([
      { start: 0, end: 1, until: 5_000, waitsOn: ["a"] },
      { start: 2, end: 3, until: 5_000, waitsOn: ["a"] },
    ]);
    expect(names(linking.units)).toEqual([["a"], ["b"]]);
  });

  test("a group across lanes behind a held one holds its other lanes too, and a row without a key behind them waits for every lane", () => {
    const span = { 10: ["a", "b"] };
    const a = draft("a", [[1, null, 0]], span, 4);
    const b = draft(
      "b",
      [
        [11, 10, 1], // held: its part in a waits
        [12, 12, 1], // a group in lanes 1 and 2: behind it in lane 1, so it holds lane 2 too
        [13, 12, 2],
        [14, null, 3], // lane 3 is free
        [15, null, 2], // behind the group in lane 2
        [16, null, null], // no key: waits for every lane
        [17, null, 0], // behind the barrier
      ],
      span,
      4,
    );
    const linking = linkDrafts([a, b], all("a", "b"));
    expect(kept(linking, b)).toEqual([14]);
    expect(linking.held.get(b)!.map((g) => g.start)).toEqual([0, 1, 4, 5, 6]);
  });

  test("a group held in one table holds its part in another table's lanes, and what waits there behind it, across three tables", () => {
    const spans = { 10: ["a", "b"], 20: ["b", "c"] };
    const a = draft("a", [], spans, 4);
    const b = draft(
      "b",
      [
        [11, 10, 1],
        [20, 20, 1],
        [21, null, 2],
      ],
      spans,
      4,
    );
    const c = draft(
      "c",
      [
        [22, 20, 3],
        [23, null, 3],
        [24, null, 0],
      ],
      spans,
      4,
    );
    const linking = linkDrafts([a, b, c], all("a", "b", "c"), (t) => (t === "a" ? 9_000 : null));
    expect([kept(linking, b), kept(linking, c)]).toEqual([[21], [24]]);
    // What waits behind a group with a known end waits as long; c's group learns it through b.
    expect(linking.held.get(c)!.map((g) => [g.start, g.until, g.waitsOn])).toEqual([
      [0, 9_000, ["b"]],
      [1, 9_000, ["b"]],
    ]);
    expect(names(linking.units)).toEqual([["b"], ["c"]]);
  });

  test("a group waits as long as the earliest known end of what holds it; with no end known, it is read again", () => {
    const spans = { 10: ["a", "b", "c"] };
    const b = draft("b", [[11, 10, 1]], spans, 4);
    const known = linkDrafts([b], all("a", "b", "c"), (t) => (t === "a" ? 7_000 : t === "c" ? 3_000 : null));
    expect(known.held.get(b)![0]!.until).toBe(3_000);
    const unknown = linkDrafts([b], all("a", "b", "c"));
    expect(unknown.held.get(b)![0]!.until).toBeNull();
  });

  test("groups of other lanes that span both tables go together around the held one", () => {
    const spans = { 10: ["a", "b"], 30: ["a", "b"] };
    const a = draft("a", [[31, 30, 2]], spans, 4); // group 10 waits in a (not in its draft)
    const b = draft(
      "b",
      [
        [11, 10, 1],
        [32, 30, 2],
      ],
      spans,
      4,
    );
    const linking = linkDrafts([a, b], all("a", "b"), () => 1_000);
    expect([kept(linking, a), kept(linking, b)]).toEqual([[31], [32]]);
    expect(names(linking.units)).toEqual([["a", "b"]]);
  });
});
