// A DrainTable driven directly over a queue in memory (test/support/fake-queue.ts): what it plans,
// how it applies an answer, when it confirms, and that every time it stores comes from its clock.
import { describe, expect, test } from "bun:test";
import type { TableConfig } from "../src/config/types.ts";
import { DrainTable, type TableSlice } from "../src/drain/table/table.ts";
import type { OutboxRow } from "../src/outbox/outbox.ts";
import { realScheduler } from "../src/scheduler.ts";
import type { Statement, WriteResult } from "../src/writers/writer.ts";
import { memoryLogger, oneApp } from "./support/drain-harness.ts";
import { FakeQueue } from "./support/fake-queue.ts";

const T0 = Date.parse("2026-12-01T12:00:00.000Z");

/** A table over a fake queue, with a clock the test moves; backoff unit 1 s, 3 attempts. */
function table({ fenced = true } = {}) {
  const config = oneApp(
    "/fake",
    { r: { writer: "sqlite", connection: { path: "/fake/remote.db" }, tables: ["t"] } },
    {
      backoffUnitSeconds: 1,
      maxAttempts: 3,
      batchSize: 100,
    },
  );
  const app = config.apps[0]!;
  const queue = new FakeQueue();
  const clock = { now: T0 };
  const log = memoryLogger();
  const t = new DrainTable(app.targets[0]!.tables[0] as TableConfig, {
    app,
    target: "app.r",
    logger: log,
    opener: () => queue,
    observer: null,
    now: () => clock.now,
    scheduler: realScheduler,
  });
  if (fenced) t.fencedByLedger();
  expect(t.open(clock.now)).toBe(true);
  if (fenced) t.settle(null);
  const prepare = (_: DrainTable, row: OutboxRow): Statement => ({ sql: "x", args: [], namespace: "t", seq: row.seq });
  const fence = () => ({ sql: "fence", args: [], namespace: "t", seq: 0, fence: true });
  /** Plans and opens a slice now, or returns null when nothing goes. */
  const slice = (): TableSlice | null => {
    const [draft] = t.plan({ now: clock.now, maxBytes: 1 << 20, prepare }).drafts;
    return draft ? t.openSlice(draft, { now: clock.now, fence: fenced ? fence : null }) : null;
  };
  return { t, queue, clock, log, slice };
}

const ok = (): WriteResult => ({ ok: true, rowsAffected: 1 });
const failed = (error = "23514: check"): WriteResult => ({ ok: false, error, errorClass: "23514" });
const skipped = (): WriteResult => ({ ok: false, error: "skipped", skipped: true });

describe("DrainTable over a fake queue", () => {
  test("a fenced slice applied whole moves through at once and is confirmed once, when asked, in one call", () => {
    const { t, queue, slice } = table();
    queue.push(3);
    const s = slice()!;
    expect(s.rows.map((r) => r.seq)).toEqual([1, 2, 3]);
    expect(s.stmts[0]!.sql).toBe("fence");
    const out = t.applyAnswer(s, [ok(), ok(), ok(), ok()], T0);
    expect([out.delivered, t.through, t.hasApplied, queue.confirms]).toEqual([3, 3, true, []]);
    t.confirmApplied(T0);
    // Confirmed from what the table read: no bound to look the rows up by.
    expect([queue.slices, queue.confirms, queue.pendingCount(), t.hasApplied, t.counts.delivered]).toEqual([
      [{ first: 1, last: 3, rows: 3 }],
      [],
      0,
      false,
      3,
    ]);
  });

  test("a slice the queue no longer holds as it was read (an operator moved a row) is confirmed by its bound instead", () => {
    const { t, queue, slice } = table();
    queue.push(3);
    const s = slice()!;
    t.applyAnswer(s, [ok(), ok(), ok(), ok()], T0);
    queue.deadLetter(2, "skipped"); // `sqloutbox skip` while the batch was in flight
    t.confirmApplied(T0);
    expect([queue.slices, queue.confirms, queue.confirmed, queue.pendingCount()]).toEqual([[], [3], [1, 3], 0]);
  });

  test("a slice larger than the queue's confirmation chunk is confirmed in parts from its head, one call (one transaction) each, as it was read", () => {
    const { t, queue, slice } = table();
    queue.confirmChunkRows = 3; // an application's own database takes small parts
    queue.push(7);
    t.applyAnswer(slice()!, [ok(), ...Array.from({ length: 7 }, ok)], T0);
    const calls: Array<[boolean, number]> = [];
    do calls.push([t.hasApplied, queue.pendingCount()]);
    while (t.confirmApplied(T0));
    // Between two calls the rows of the parts before are gone and the others still pending: a prefix.
    expect(calls).toEqual([
      [true, 7],
      [true, 4],
      [true, 1],
    ]);
    expect([queue.slices, queue.confirms, queue.pendingCount(), t.hasApplied, t.counts.delivered]).toEqual([
      [
        { first: 1, last: 3, rows: 3 },
        { first: 4, last: 6, rows: 3 },
        { first: 7, last: 7, rows: 1 },
      ],
      [],
      0,
      false,
      7,
    ]);
  });

  test("a confirmation in parts whose queue changed between two parts goes on by its bound, a part at a time, until nothing at or below it is pending", () => {
    const { t, queue, slice } = table();
    queue.confirmChunkRows = 2;
    queue.push(6);
    t.applyAnswer(slice()!, [ok(), ...Array.from({ length: 6 }, ok)], T0);
    expect(t.confirmApplied(T0)).toBe(true); // 1, 2 as read
    queue.deadLetter(4, "skipped"); // an operator's skip between two parts
    expect(t.confirmApplied(T0)).toBe(true); // 3, 5 by the bound: a full part, so more may be left
    expect(t.confirmApplied(T0)).toBe(false); // 6, a short part: nothing is left
    expect([queue.slices, queue.confirms, queue.confirmed, queue.pendingCount(), t.hasApplied]).toEqual([
      [{ first: 1, last: 2, rows: 2 }],
      [6, 6],
      [1, 2, 3, 5, 6],
      0,
      false,
    ]);
  });

  test("a failed head is charged and backed off by the table's clock: nothing goes until that clock passes its retry time", () => {
    const { t, queue, clock, slice, log } = table();
    queue.push(2);
    const s = slice()!;
    t.applyAnswer(s, [skipped(), failed(), skipped()], clock.now);
    const head = queue.head()!;
    expect([head.attempts, head.lastError, Date.parse(head.nextAttemptAt!) - T0]).toEqual([1, "23514: check", 2000]);
    expect(head.lastAttemptAt).toBe(new Date(T0).toISOString()); // the table's clock, not the wall's
    expect(log.has(/seq 1 of namespace "t" failed on target app\.r \(attempt 1\/3, retry in 2s\)/)).toBe(true);
    expect(slice()).toBeNull();
    clock.now = T0 + 1999;
    expect(slice()).toBeNull();
    clock.now = T0 + 2000;
    expect(slice()!.rows.map((r) => r.seq)).toEqual([1, 2]);
  });

  test("a group failing behind the head cuts the next slice before it: the rows before go, then it heads and is charged", () => {
    const { t, queue, slice } = table();
    queue.push(1);
    queue.push(2, { grouped: true }); // seqs 2, 3
    const first = slice()!;
    const out = t.applyAnswer(first, [skipped(), skipped(), skipped(), failed()], T0);
    expect([out.failed, queue.head()!.attempts, out.more]).toEqual([0, 0, true]); // refunded: not the head's fault
    const before = slice()!;
    expect(before.rows.map((r) => r.seq)).toEqual([1]);
    t.applyAnswer(before, [ok(), ok()], T0);
    t.confirmApplied(T0);
    const group = slice()!;
    expect(group.rows.map((r) => r.seq)).toEqual([2, 3]);
    t.applyAnswer(group, [skipped(), skipped(), failed()], T0);
    expect(queue.head()).toMatchObject({ seq: 2, attempts: 1, lastError: "seq 3 of the group of seq 2: 23514: check" });
  });

  test("out of attempts, a head is dead-lettered whole and counted once; the next group is planned in the same call", () => {
    const { t, queue, clock, slice } = table();
    queue.push(2, { grouped: true });
    queue.push(1);
    for (let attempt = 1; attempt <= 3; attempt++) {
      const s = slice()!;
      t.applyAnswer(s, [skipped(), failed(), skipped(), skipped()], clock.now);
      clock.now += 60_000;
    }
    expect(queue.dead.map((d) => [d.seq, d.reason])).toEqual([
      [1, "max_attempts"],
      [2, "max_attempts"],
    ]);
    expect(t.counts).toEqual({ delivered: 0, failed: 3, deadLettered: 2 });
    expect(slice()!.rows.map((r) => r.seq)).toEqual([3]);
  });

  test("without a ledger, an applied slice is confirmed at once", () => {
    const { t, queue, slice } = table({ fenced: false });
    queue.push(2);
    t.applyAnswer(slice()!, [ok(), ok()], T0);
    expect([queue.confirms, t.hasApplied, t.counts.delivered]).toEqual([[2], false, 2]);
  });

  test("an outage's batch gives the head's charge back; the slice is sent again, the attempts unchanged", () => {
    const { t, queue, slice } = table();
    queue.push(1);
    const s = slice()!;
    expect(queue.head()!.attempts).toBe(1); // charged before delivery
    t.refundOutage(s);
    t.unsettle();
    expect(queue.head()!.attempts).toBe(0);
    expect(slice()).toBeNull(); // unsettled: the ledger first
    t.settle(null);
    expect(slice()!.rows.map((r) => r.seq)).toEqual([1]);
  });
});
