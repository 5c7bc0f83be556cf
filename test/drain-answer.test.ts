// The pure decision of what a target's answer for one table's slice says (src/drain/table/answer.ts):
// no SQLite, no writer — rows are their groups, results what a writer could answer.
import { describe, expect, test } from "bun:test";
import { classifyAnswer } from "../src/drain/table/answer.ts";
import { endOfGroup, groupStarts, startOfGroup } from "../src/drain/table/row-groups.ts";
import type { WriteResult } from "../src/writers/writer.ts";

const ok: WriteResult = { ok: true, rowsAffected: 1 };
const skipped: WriteResult = { ok: false, error: "rolled back", skipped: true };
const failed = (error = "boom"): WriteResult => ({ ok: false, error, errorClass: "row" });
const schema: WriteResult = { ok: false, error: "no such table", remoteSchema: true };
/** Rows by group: [1, 1, null, 4] is a group of two, a row alone, a group of one. */
const rows = (...grps: Array<number | null>) => grps.map((grp) => ({ grp }));

describe("classifyAnswer, fenced (ledger = true)", () => {
  test("fence and every row ok: applied", () => {
    expect(classifyAnswer(rows(1, 1, 3), true, [ok, ok, ok, ok])).toEqual({ kind: "applied" });
  });
  test("a fence that failed: moved by another transaction, or the ledger unusable", () => {
    const moved = failed("null value in column through");
    expect(classifyAnswer(rows(1), true, [moved, skipped])).toEqual({ kind: "fence-moved", fence: moved as never });
    expect(classifyAnswer(rows(1), true, [schema, skipped])).toEqual({
      kind: "ledger-unusable",
      fence: schema as never,
    });
  });
  test("a skipped fence is not a moved fence: the rows decide", () => {
    expect(classifyAnswer(rows(null), true, [skipped, skipped])).toEqual({ kind: "not-tried" });
  });
  test("a prefix applied while fenced breaks the contract", () => {
    expect(classifyAnswer(rows(null, null, null), true, [ok, ok, ok, failed()])).toEqual({
      kind: "contract-broken",
      applied: 2,
    });
  });
  test("the head group failing is the head's fault, wherever in the group the failure is", () => {
    const f = failed();
    expect(classifyAnswer(rows(1, 1, 1, 4), true, [skipped, skipped, f, skipped, skipped])).toEqual({
      kind: "head-failed",
      groupStart: 0,
      failedAt: 1,
      failure: f as never,
      okAfterFailure: null,
    });
  });
  test("a group behind the head failing cuts before that group, not before the failed row", () => {
    expect(classifyAnswer(rows(1, 1, 3, 3, 3), true, [skipped, skipped, skipped, skipped, failed(), skipped])).toEqual({
      kind: "failed-behind-head",
      groupStart: 2,
      okAfterFailure: null,
    });
    expect(classifyAnswer(rows(null, null), true, [skipped, skipped, failed()])).toEqual({
      kind: "failed-behind-head",
      groupStart: 1,
      okAfterFailure: null,
    });
  });
  test("a row reported ok behind a failure is named", () => {
    const f = failed();
    expect(classifyAnswer(rows(null, null, null), true, [skipped, f, skipped, ok])).toMatchObject({
      kind: "head-failed",
      failedAt: 0,
      okAfterFailure: 2,
    });
  });
});

describe("classifyAnswer, without a ledger", () => {
  test("every row ok: applied", () => {
    expect(classifyAnswer(rows(null, null), false, [ok, ok])).toEqual({ kind: "applied" });
  });
  test("a prefix applied and the next row failed: that row is the head now", () => {
    const f = failed();
    expect(classifyAnswer(rows(1, 1, 1), false, [ok, f, skipped])).toEqual({
      kind: "prefix-applied",
      applied: 1,
      failedAt: 1,
      failure: f as never,
      okAfterFailure: null,
    });
  });
  test("a prefix applied and the rest skipped: nothing charged", () => {
    expect(classifyAnswer(rows(null, null, 3), false, [ok, skipped, failed()])).toEqual({
      kind: "prefix-applied",
      applied: 1,
      failedAt: null,
      failure: null,
      okAfterFailure: null,
    });
  });
  test("everything skipped: not tried", () => {
    expect(classifyAnswer(rows(null, null), false, [skipped, skipped])).toEqual({ kind: "not-tried" });
  });
  test("a remote-schema failure of the head is a head failure (the table decides to hold it)", () => {
    expect(classifyAnswer(rows(null), false, [schema])).toMatchObject({ kind: "head-failed", failedAt: 0 });
  });
});

describe("row groups", () => {
  test("starts, the start of a row's group and its end", () => {
    const r = rows(1, 1, null, null, 5, 5, 5);
    expect(groupStarts(r)).toEqual([0, 2, 3, 4]);
    expect([0, 1, 2, 3, 4, 5, 6].map((i) => startOfGroup(r, i))).toEqual([0, 0, 2, 3, 4, 4, 4]);
    expect([0, 2, 3, 4].map((i) => endOfGroup(r, i))).toEqual([2, 3, 4, 7]);
  });
});

describe("classifyAnswer, a table with lanes", () => {
  const f = failed();
  test("one fence moves every lane's ledger row; when it failed, settle from the ledger", () => {
    expect(classifyAnswer(rows(null, null), true, [ok, ok, ok])).toEqual({ kind: "applied" });
    const moved = { ok: false as const, error: "23502: null value in through" };
    expect(classifyAnswer(rows(null), true, [moved, skipped])).toEqual({ kind: "fence-moved", fence: moved });
    expect(classifyAnswer(rows(null, null), true, [ok, ok, skipped])).toEqual({ kind: "contract-broken", applied: 1 });
  });
  test("a failed group that leads its lanes is charged where it starts; one behind another of its lanes cuts", () => {
    // Rows 0 and 1 are lane A, row 2 lane B: row 2 leads lane B though it is not the slice's first.
    const leads = (start: number) => start === 0 || start === 2;
    expect(classifyAnswer(rows(null, null, null), true, [skipped, skipped, skipped, f], leads)).toEqual({
      kind: "head-failed",
      groupStart: 2,
      failedAt: 2,
      failure: f as never,
      okAfterFailure: null,
    });
    expect(classifyAnswer(rows(null, null, null), true, [skipped, skipped, f, skipped], leads)).toEqual({
      kind: "failed-behind-head",
      groupStart: 1,
      okAfterFailure: null,
    });
  });
});

describe("classifyAnswer, a fence applied beside a failed first row", () => {
  test("is a broken contract, not the head's failure: the fence may have moved the ledger past a row that did not land", () => {
    expect(classifyAnswer(rows(null, null), true, [ok, failed(), skipped])).toEqual({
      kind: "contract-broken",
      applied: 0,
    });
    // A well-behaved writer rolls the fence back with its namespace: skipped, and the head failed.
    expect(classifyAnswer(rows(null, null), true, [skipped, failed(), skipped])).toMatchObject({ kind: "head-failed" });
  });
});
