// The planner decides a table's slice from the rows read for it, without SQLite: whole groups,
// head first, what waits, and what happens to a head that can never go.
import { describe, expect, test } from "bun:test";
import { InvalidArgumentError, UnsupportedStatementError } from "../src/errors.ts";
import type { OutboxRow } from "../src/outbox/outbox.ts";
import { type PlanInput, planSlice } from "../src/drain/table/planner.ts";
import type { Statement } from "../src/writers/writer.ts";
import { pendingRow } from "./support/fake-queue.ts";

const NOW = Date.parse("2026-12-01T12:00:00.000Z");

const row = pendingRow;

const prepare = (r: OutboxRow): Statement => ({ sql: r.tag, args: [], namespace: "t", seq: r.seq });

function plan(rows: OutboxRow[], over: Partial<PlanInput> = {}) {
  return planSlice({
    rows,
    spans: new Map(),
    more: false,
    position: "head",
    lanes: 1,
    laneOf: () => 0,
    blocked: new Map(),
    cuts: new Map(),
    nowMs: NOW,
    maxAttempts: 3,
    prepare,
    ...over,
  });
}

const seqs = (p: ReturnType<typeof plan>) => p.slice?.rows.map((r) => r.seq) ?? [];

describe("planSlice", () => {
  test("takes every group, head first, with its statements and byte count; the rows' text moves into the statements", () => {
    const rows = [row(1), row(2, 2), row(3, 2), row(4)];
    const bytes = rows.map((r) => r.tag.length + r.payload.length);
    const p = plan(rows, { more: true });
    expect(seqs(p)).toEqual([1, 2, 3, 4]);
    expect(p.slice!.stmts.map((s) => s.sql)).toEqual([1, 2, 3, 4].map((n) => `INSERT INTO t (id) VALUES (${n})`));
    expect(p.slice!.rowBytes).toEqual(bytes);
    expect(p.slice!.bytes).toBe(bytes.reduce((a, b) => a + b, 0));
    expect(p.slice!.rows.every((r) => r.tag === "" && r.payload === "")).toBe(true);
    expect([p.more, p.slice!.more, p.deadLetters, p.charges, p.cutsPassed]).toEqual([true, true, [], [], []]);
  });

  test("a head out of attempts is dead-lettered with its last error, and the next group heads the slice", () => {
    const head = row(1, null, { attempts: 3, lastError: "23514: check", lastErrorClass: "23514" });
    const p = plan([head, row(2)]);
    expect(p.deadLetters).toEqual([
      { row: head, reason: "max_attempts", message: "23514: check", errorClass: "23514", exhausted: true },
    ]);
    expect(seqs(p)).toEqual([2]);
    expect(p.more).toBe(true);
    expect(plan([row(1, null, { attempts: 3 })], { maxAttempts: null }).deadLetters).toEqual([]); // max_attempts = 0: never
  });

  test("a head group that cannot be converted is dead-lettered whole, naming its culprit: undecodable and unsupported", () => {
    const refusing = (error: Error) => (r: OutboxRow) => {
      if (r.seq === 2) throw error;
      return prepare(r);
    };
    const undecodable = plan([row(1, 1), row(2, 1), row(3)], {
      prepare: refusing(new InvalidArgumentError("bad payload")),
    });
    expect(undecodable.deadLetters.map((d) => [d.row.seq, d.reason, d.message])).toEqual([
      [1, "undecodable", "seq 2 of the group of seq 1: bad payload"],
    ]);
    expect(seqs(undecodable)).toEqual([3]);
    const unsupported = plan([row(2), row(3)], { prepare: refusing(new UnsupportedStatementError("no MERGE")) });
    expect(unsupported.deadLetters.map((d) => [d.row.seq, d.reason, d.message])).toEqual([
      [2, "unsupported_statement", "unsupported statement: no MERGE"],
    ]);
  });

  test("a head that fails to convert for a reason nobody foresaw is charged, never dead-lettered or skipped; nothing is sent", () => {
    const p = plan([row(1), row(2)], {
      prepare: (r) => {
        if (r.seq === 1) throw new RangeError("surprise");
        return prepare(r);
      },
    });
    expect(p.charges).toMatchObject([{ row: { seq: 1 }, message: "surprise" }]);
    expect(p.slice).toBeNull();
    expect(p.deadLetters).toEqual([]);
    expect(p.more).toBe(true);
  });

  test("a group behind the head that cannot be converted ends the slice before it, and is dealt with when it heads", () => {
    const p = plan([row(1), row(2), row(3)], {
      prepare: (r) => {
        if (r.seq === 2) throw new InvalidArgumentError("bad payload");
        return prepare(r);
      },
    });
    expect(seqs(p)).toEqual([1]);
    expect([p.deadLetters, p.charges, p.more, p.slice!.more]).toEqual([[], [], true, true]);
  });

  test("a group behind the head that is backing off waits to be head; one whose retry time passed goes", () => {
    const later = new Date(NOW + 60_000).toISOString();
    const earlier = new Date(NOW - 1).toISOString();
    expect(seqs(plan([row(1), row(2, null, { nextAttemptAt: later }), row(3)]))).toEqual([1]);
    expect(seqs(plan([row(1), row(2, null, { nextAttemptAt: earlier }), row(3)]))).toEqual([1, 2, 3]);
  });

  test("the cut: the slice stops before it; at the head it is passed, and the group there goes", () => {
    expect(seqs(plan([row(1), row(2), row(3)], { cuts: new Map([[0, 3]]) }))).toEqual([1, 2]);
    const atHead = plan([row(3), row(4)], { cuts: new Map([[0, 3]]) });
    expect(seqs(atHead)).toEqual([3, 4]);
    expect(atHead.cutsPassed).toEqual([0]);
  });

  test("read ahead of a slice in flight: no row is the head, a group with a history ends it, nothing is dealt with", () => {
    const p = plan([row(5), row(6, null, { attempts: 1 }), row(7)], { position: "after" });
    expect(seqs(p)).toEqual([5]);
    expect([p.deadLetters, p.charges, p.slice!.more]).toEqual([[], [], true]);
    const exhausted = plan([row(5, null, { attempts: 3 })], { position: "after" });
    expect([exhausted.slice, exhausted.deadLetters]).toEqual([null, []]);
    const refused = plan([row(5), row(6)], {
      position: "after",
      prepare: (r) => {
        if (r.seq === 5) throw new InvalidArgumentError("bad payload");
        return prepare(r);
      },
    });
    expect([refused.slice, refused.deadLetters, refused.charges]).toEqual([null, [], []]);
  });

  test("groups that span tables and wait here are told, with their retry time when a backoff holds them (behind every held lane too)", () => {
    const later = NOW + 60_000;
    const spans = new Map([
      [2, ["t", "u"]],
      [4, ["t", "u"]],
    ]);
    // A table of one lane: its head backs off, so the group behind it waits as long.
    const held = plan([row(1, null, { nextAttemptAt: new Date(later).toISOString() }), row(2, 2), row(4, 4)], {
      spans,
    });
    expect([...held.waiting]).toEqual([
      [2, later],
      [4, later],
    ]);
    // Behind a cut the wait has no end a backoff says: the group is read again.
    expect([...plan([row(1), row(2, 2), row(4, 4)], { spans, cuts: new Map([[0, 2]]) }).waiting]).toEqual([
      [2, null],
      [4, null],
    ]);
    // With lanes: a group behind a lane backing off waits in it; one of another lane goes.
    const lanes = plan(
      [
        row(1, null, { laneKey: "a", nextAttemptAt: new Date(later).toISOString() }),
        row(2, 2, { laneKey: "a" }),
        row(4, 4, { laneKey: "b" }),
      ],
      {
        spans,
        lanes: 4,
        laneOf: (r) => (r.laneKey === "a" ? 1 : 2),
      },
    );
    expect([...lanes.waiting]).toEqual([[2, later]]);
    expect(seqs(lanes)).toEqual([4]);
  });

  test("a group that spans tables carries the tables it touches into the slice", () => {
    const p = plan([row(1, 1), row(3, 1), row(4)], { spans: new Map([[1, ["t", "u"]]]) });
    expect([...p.slice!.spans]).toEqual([[1, ["t", "u"]]]);
  });
});
