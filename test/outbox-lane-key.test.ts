// A row's key is stored with it and stays with it wherever the row goes: dead-lettered, replayed,
// moved above a seq. (How a producer gives it: producer-keys.test.ts.)
import { expect, test } from "bun:test";
import { Outbox } from "../src/outbox/outbox.ts";
import type { RowContext } from "../src/outbox/append.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { drainSide } from "./support/queue.ts";

const cleanups = cleanupsAfterEach();

test("a row keeps its key through the queue, the dead log, a replay and a move above a seq; a row without one has none", () => {
  const dir = tempDirCleanedBy(cleanups);
  const q = new Outbox(dir.file("t.db"), "t");
  cleanups.push(() => q.close());
  const keyed: RowContext = { traceparent: null, tracestate: null, key: "customer-7" };
  const a = q.enqueue("INSERT INTO t (id) VALUES (?)", "[1]", "", keyed);
  const b = q.enqueueBatch([{ tag: "INSERT INTO t (id) VALUES (?)", payload: "[2]" }], "", { trace: keyed })[0]!;
  const c = q.enqueue("INSERT INTO t (id) VALUES (?)", "[3]");
  expect(q.fetchUnsynced(10).map((r) => [r.seq, r.laneKey])).toEqual([
    [a, "customer-7"],
    [b, "customer-7"],
    [c, null],
  ]);
  q.deadLetter(a, "skipped");
  expect(q.getDead(a)?.laneKey).toBe("customer-7");
  const replayed = q.replayDead(a);
  expect(q.fetchUnsynced(10).find((r) => r.seq === replayed)?.laneKey).toBe("customer-7");
  const moved = drainSide(q).resequenceAbove(replayed + 10);
  expect(moved?.count).toBe(3);
  expect(q.fetchUnsynced(10).map((r) => r.laneKey)).toEqual(["customer-7", null, "customer-7"]);
});
