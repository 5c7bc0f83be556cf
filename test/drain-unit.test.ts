import { describe, expect, test } from "bun:test";
import { OutboxSyncService } from "../src/drain/service.ts";
import { ConfigError, LockedError, ServiceStoppedError } from "../src/errors.ts";
import { createWriter } from "../src/writers/registry.ts";
import { oneApp } from "./support/drain-harness.ts";
import { parseCount, resultShapeProblem } from "../src/drain/bounded-writer.ts";
import { drainHome } from "../src/drain/home.ts";
import { acquireLock } from "../src/drain/lock.ts";
import { outageBackoffMs, rowBackoffMs, tableReadiness } from "../src/drain/schedule.ts";
import { errorOf } from "./support/errors.ts";
import { makeTempDir } from "./support/tmp.ts";

describe("backoff", () => {
  test("a failed head waits 2^attempts units, capped at backoff_cap_minutes", () => {
    const cap = 64 * 60_000;
    expect(rowBackoffMs(1, 60_000, cap)).toBe(120_000);
    expect(rowBackoffMs(3, 60_000, cap)).toBe(480_000);
    expect(rowBackoffMs(6, 60_000, cap)).toBe(cap);
    expect(rowBackoffMs(30, 60_000, cap)).toBe(cap);
    expect(rowBackoffMs(5000, 60_000, cap)).toBe(cap);
    expect(rowBackoffMs(2, 50, cap)).toBe(200);
  });

  test("a target down n times in a row waits one second doubling, capped, jittered to between half and all of it", () => {
    const cap = 5 * 60_000;
    expect(outageBackoffMs(1, cap, () => 0)).toBe(500);
    expect(outageBackoffMs(1, cap, () => 0.999999)).toBeCloseTo(1000, 0);
    expect(outageBackoffMs(4, cap, () => 0.5)).toBe(6000); // 8 s base: 4 s + half of 4 s
    expect(outageBackoffMs(100, cap, () => 0)).toBe(cap / 2);
    expect(outageBackoffMs(100, cap, () => 0.999999)).toBeLessThanOrEqual(cap);
    // A 10-minute outage, at the longest jitter: the retries keep coming all through it, each wait
    // double the one before until the cap and the cap from then on, so the first retry after the
    // outage ends starts at most the cap after it, never an hour later.
    const outage = 10 * 60_000;
    const waits: number[] = [];
    let at = 0;
    while (at < outage) {
      waits.push(outageBackoffMs(waits.length + 1, cap, () => 1));
      at += waits.at(-1)!;
    }
    expect(waits[0]).toBe(1000);
    for (let i = 1; i < waits.length; i++) expect(waits[i]).toBe(Math.min(2 * waits[i - 1]!, cap));
    expect(waits.at(-1)).toBe(cap); // the doubling reached the cap within the outage…
    expect(outageBackoffMs(waits.length + 1, cap, () => 1)).toBe(cap); // …and stays there
    expect(at - outage).toBeLessThanOrEqual(cap);
  });

  test("jitter spreads a fleet's retries: many drains that lost one database do not come back in lock step", () => {
    const delays = Array.from({ length: 200 }, () => outageBackoffMs(6, 5 * 60_000));
    expect(new Set(delays.map((d) => Math.round(d / 100))).size).toBeGreaterThan(50);
    expect(Math.min(...delays)).toBeGreaterThanOrEqual(16_000);
    expect(Math.max(...delays)).toBeLessThanOrEqual(32_000);
  });
});

describe("readiness", () => {
  const knobs = { threshold: 15, maxWaitMs: 6000 };
  const now = Date.parse("2026-01-01T00:00:10.000Z");
  const head = (createdAt: string, nextAttemptAt: string | null = null) => ({ createdAt, nextAttemptAt });

  test("an empty table is not ready and sets no deadline", () => {
    expect(tableReadiness(null, 0, now, knobs)).toEqual({ ready: false, wakeAt: null });
  });
  test("a table reaching the flush threshold is ready at once", () => {
    expect(tableReadiness(head("2026-01-01T00:00:09.999000+00:00"), 15, now, knobs).ready).toBe(true);
  });
  test("a table below the threshold waits until its oldest row is table_max_wait old", () => {
    const r = tableReadiness(head("2026-01-01T00:00:09.000000+00:00"), 3, now, knobs);
    expect(r).toEqual({ ready: false, wakeAt: Date.parse("2026-01-01T00:00:15.000Z") });
    expect(tableReadiness(head("2026-01-01T00:00:04.000000+00:00"), 3, now, knobs).ready).toBe(true);
  });
  test("a head backing off holds its table even above the threshold", () => {
    const r = tableReadiness(
      head("2026-01-01T00:00:00.000000+00:00", "2026-01-01T00:00:20.000000+00:00"),
      500,
      now,
      knobs,
    );
    expect(r).toEqual({ ready: false, wakeAt: Date.parse("2026-01-01T00:00:20.000Z") });
  });
  test("a head whose backoff has passed is ready again", () => {
    expect(
      tableReadiness(head("2026-01-01T00:00:00.000000+00:00", "2026-01-01T00:00:05.000000+00:00"), 1, now, knobs).ready,
    ).toBe(true);
  });
  test("a reference-style timestamp without zone counts as UTC", () => {
    expect(tableReadiness(head("2026-01-01 00:00:01"), 1, now, knobs).ready).toBe(true);
  });
});

describe("writer answers", () => {
  test("garbage answers are named precisely", () => {
    expect(resultShapeProblem(null, 1)).toContain("not an array");
    expect(resultShapeProblem([{ ok: true }], 2)).toBe("writeBatch returned 1 results for 2 statements");
    expect(resultShapeProblem([{ ok: true }, { ok: true }, { ok: true }], 2)).toContain("3 results");
    expect(resultShapeProblem([{ ok: true }, { rowsAffected: 1 }], 2)).toBe('writeBatch result 1 has no boolean "ok"');
    expect(resultShapeProblem([{ ok: "yes" }], 1)).toContain("no boolean");
    expect(resultShapeProblem([null], 1)).toContain("no boolean");
    expect(resultShapeProblem([{ ok: true }, { ok: false, error: "x" }], 2)).toBeNull();
  });

  test("a count (MAX(outbox_seq), the ledger's through) arrives as number, bigint, string, null or an object row", () => {
    expect(parseCount([[42]], 0)).toBe(42);
    expect(parseCount([[42n]], 0)).toBe(42);
    expect(parseCount([["9007199254740"]], 0)).toBe(9007199254740);
    expect(parseCount([[null]], 0)).toBe(0);
    expect(parseCount([], 0)).toBe(0);
    expect(parseCount([], null)).toBeNull(); // no ledger row yet
    expect(parseCount([{ max: "17" }], 0)).toBe(17);
    expect(parseCount([["abc"]], 0)).toBeUndefined();
    expect(parseCount([[-3]], 0)).toBeUndefined();
  });
});

describe("drain lock", () => {
  test("a second lock on the same db_dir fails fast with LockedError naming the lock file", () => {
    const tmp = makeTempDir();
    try {
      const dir = tmp.file("nested/db");
      const first = acquireLock(drainHome(dir).lockFile);
      const caught = errorOf<LockedError>(() => acquireLock(drainHome(dir).lockFile));
      expect(caught).toBeInstanceOf(LockedError);
      expect(caught.code).toBe("E_LOCKED");
      expect(caught.lockFile).toBe(`${dir}/.sqloutbox.lock`);
      expect(caught.message).toContain(`${dir}/.sqloutbox.lock`);
      first.release();
      first.release();
      acquireLock(drainHome(dir).lockFile).release();
    } finally {
      tmp.cleanup();
    }
  });

  test("a lock held by another process fails fast with LockedError", async () => {
    const tmp = makeTempDir();
    try {
      const child = Bun.spawn(["bun", `${import.meta.dir}/support/children/drain-lock-holder.ts`, tmp.path], {
        stdout: "pipe",
        stderr: "inherit",
      });
      const reader = child.stdout.getReader();
      const { value } = await reader.read();
      expect(new TextDecoder().decode(value)).toContain("locked");
      const caught = errorOf<LockedError>(() => acquireLock(drainHome(tmp.path).lockFile));
      expect(caught).toBeInstanceOf(LockedError);
      const { holder, message } = caught;
      expect(holder).toEqual({ pid: child.pid, since: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) });
      expect(message).toBe(
        `another drain is already running (pid ${child.pid}, running since ${holder!.since}): lock ${tmp.path}/.sqloutbox.lock is held`,
      );
      child.kill("SIGKILL");
      await child.exited;
      // The kernel drops a flock with its holder: a crashed drain never leaves a stale lock.
      acquireLock(drainHome(tmp.path).lockFile).release();
    } finally {
      tmp.cleanup();
    }
  });

  test("a lock held only for an instant (a status probe) does not turn a starting drain away", async () => {
    const tmp = makeTempDir();
    try {
      const child = Bun.spawn(["bun", `${import.meta.dir}/support/children/drain-lock-holder.ts`, tmp.path, "50"], {
        stdout: "pipe",
        stderr: "inherit",
      });
      const { value } = await child.stdout.getReader().read();
      expect(new TextDecoder().decode(value)).toContain("locked");
      acquireLock(drainHome(tmp.path).lockFile).release(); // taken once the holder lets go, 50 ms later
      await child.exited;
    } finally {
      tmp.cleanup();
    }
  });
});

describe("service construction", () => {
  test("a target without a writer is a ConfigError naming the target", () => {
    const config = oneApp("/nonexistent/outbox", {
      main: { writer: "sqlite", connection: { path: "/nonexistent/r.db" }, tables: ["t"] },
    });
    const caught = errorOf<ConfigError>(() => new OutboxSyncService(config, {}));
    expect(caught).toBeInstanceOf(ConfigError);
    expect(caught.code).toBe("E_CONFIG");
    expect(caught.message).toContain('no writer for target "app.main"');
  });

  test("a stopped service refuses to run again with ServiceStoppedError (E_CLOSED), the class the library exports", async () => {
    const tmp = makeTempDir();
    try {
      const config = oneApp(tmp.file("outbox"), {
        main: { writer: "sqlite", connection: { path: tmp.file("r.db") }, tables: ["t"] },
      });
      const service = new OutboxSyncService(config, { "app.main": createWriter("sqlite", { path: tmp.file("r.db") }) });
      await service.stop();
      for (const call of [() => service.start(), () => service.runOnce()]) {
        const error = await call().catch((e: unknown) => e);
        expect(error).toBeInstanceOf(ServiceStoppedError);
        expect(error).toMatchObject({
          code: "E_CLOSED",
          message: "this OutboxSyncService was stopped; create a new one",
        });
      }
      expect(() => service.pendingCount()).toThrow(ServiceStoppedError);
    } finally {
      tmp.cleanup();
    }
  });
});
