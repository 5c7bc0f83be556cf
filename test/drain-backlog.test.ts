// A backlog's progress line: while a target drains rows, at most every 10 s of the drain's clock it
// says rows/s, pending and an ETA in human units — and nothing while idle or while nothing moves.
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { OutboxSyncService } from "../src/drain/service.ts";
import { BacklogProgress } from "../src/drain/backlog.ts";
import { createWriter } from "../src/writers/registry.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { memoryLogger, oneApp } from "./support/drain-harness.ts";
import { openQueue, seed } from "./support/queue.ts";

const cleanups = cleanupsAfterEach();

describe("BacklogProgress", () => {
  test("says rate, pending and ETA once 10 s have passed with rows moving, then every 10 s, never in between", () => {
    const log = memoryLogger();
    const progress = new BacklogProgress("shop.pg", log);
    let delivered = 0;
    let pending = 5000;
    for (let s = 0; s <= 25; s++) {
      progress.cycled(s * 1000, delivered, () => pending);
      delivered += 100;
      pending -= 100;
    }
    // Measured from the first cycle that moved rows (1 s): 1000 rows over 10 s.
    expect(log.lines).toEqual([
      "info drain: backlog of shop.pg: 100 rows/s, 3900 pending, ETA 39s",
      "info drain: backlog of shop.pg: 100 rows/s, 2900 pending, ETA 29s",
    ]);
  });

  test("says nothing while idle or once nothing is pending, and a quiet spell does not dilute the next rate", () => {
    const log = memoryLogger();
    const progress = new BacklogProgress("shop.pg", log);
    progress.cycled(0, 0, () => 0);
    progress.cycled(60_000, 0, () => 0); // idle for a minute: nothing
    progress.cycled(120_000, 0, () => 10); // rows arrived, none delivered yet: nothing either
    expect(log.lines).toEqual([]);
    // An hour after the last movement, a backlog drains at 500 rows/s: its rate is not spread over the hour.
    let delivered = 0;
    for (let s = 0; s <= 11; s++) {
      progress.cycled(3_600_000 + s * 1000, delivered, () => 120_000 - delivered);
      delivered += 500;
    }
    expect(log.lines).toEqual(["info drain: backlog of shop.pg: 500 rows/s, 114500 pending, ETA 3m49s"]);
    // Done: the last cycles deliver the rest, pending 0, no line.
    progress.cycled(3_700_000, 120_000, () => 0);
    progress.cycled(3_800_000, 120_000, () => 0);
    expect(log.lines).toHaveLength(1);
  });
  test("a first cycle that delivered starts the measure: against a slow remote, cycles are seconds long", () => {
    const log = memoryLogger();
    const progress = new BacklogProgress("shop.pg", log);
    progress.cycled(4_500, 4000, () => 96_000);
    progress.cycled(9_000, 8000, () => 92_000);
    progress.cycled(14_500, 12_000, () => 88_000);
    expect(log.lines).toEqual(["info drain: backlog of shop.pg: 800 rows/s, 88000 pending, ETA 1m50s"]);
  });

  test("the ETA follows how fast the pending count shrinks: rows arriving as fast as they go, or held behind a failing lane's head, never end", () => {
    const log = memoryLogger();
    const progress = new BacklogProgress("shop.pg", log);
    for (let s = 0; s <= 11; s++) progress.cycled(s * 1000, s * 200, () => 5000);
    expect(log.lines).toEqual(["info drain: backlog of shop.pg: 200 rows/s, 5000 pending, not shrinking"]);
    // Half of them go for good: the queue shrinks at 100 rows/s.
    for (let s = 12; s <= 21; s++) progress.cycled(s * 1000, s * 200, () => 5000 - (s - 11) * 100);
    expect(log.lines[1]).toBe("info drain: backlog of shop.pg: 200 rows/s, 4000 pending, ETA 40s");
  });
});

describe("a drain with a backlog", () => {
  test("logs the progress of each target by the drain's clock while rows are pending, and stops once they are delivered", async () => {
    const dir = tempDirCleanedBy(cleanups);
    const remote = new Database(dir.file("remote.db"), { create: true });
    remote.run("PRAGMA journal_mode = WAL");
    remote.run("CREATE TABLE orders (id INTEGER NOT NULL)");
    remote.close();
    seed(dir.file("outbox"), "orders", 2000);
    const config = oneApp(
      dir.file("outbox"),
      { pg: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["orders"] } },
      { batchSize: 100 },
    );
    const log = memoryLogger();
    let clock = Date.parse("2026-12-01T12:00:00Z");
    const writer = createWriter("sqlite", { path: dir.file("remote.db") });
    const svc = new OutboxSyncService(config, { "app.pg": writer }, { logger: log, now: () => clock });
    cleanups.push(() => svc.stop(2000));
    const queue = openQueue(dir.file("outbox"), "orders");
    cleanups.push(() => queue.close());
    const said: Array<{ at: number; pending: number; line: string }> = [];
    for (let cycle = 0; cycle < 40; cycle++) {
      clock += 2500;
      await svc.runOnce();
      const line = log.lines.filter((l) => l.includes("backlog of")).at(said.length);
      if (line) said.push({ at: clock, pending: queue.pendingCount(), line });
    }
    expect(queue.pendingCount()).toBe(0);
    expect(said.length).toBeGreaterThanOrEqual(3);
    for (const { pending, line } of said)
      expect(line).toMatch(
        new RegExp(`^info drain: backlog of app\\.pg: \\d+ rows/s, ${pending} pending, ETA [\\d.]+(m\\d+)?s$`),
      );
    // At most one line per 10 s of the drain's clock, none once the backlog is gone.
    for (let i = 1; i < said.length; i++) expect(said[i]!.at - said[i - 1]!.at).toBeGreaterThanOrEqual(10_000);
    expect(said.every((s) => s.pending > 0)).toBe(true);
  });
});
