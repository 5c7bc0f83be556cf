import { describe, expect, test } from "bun:test";
import { OutboxSyncService } from "../src/drain/service.ts";
import { ConfigError, LockedError } from "../src/errors.ts";
import { oneApp } from "./fixtures/drain-harness.ts";
import { rowBackoffMs, targetBackoffMs } from "../src/drain/backoff.ts";
import { acquireLock } from "../src/drain/lock.ts";
import { tableReadiness } from "../src/drain/scheduler.ts";
import { isAlreadyApplied, parseMaxSeq, resultShapeProblem } from "../src/drain/answers.ts";
import { makeTempDir } from "./support/tmp.ts";

describe("backoff", () => {
  test("a failed head waits 2^attempts units, capped at backoff_cap_minutes", () => {
    expect(rowBackoffMs(1, 60, 64)).toBe(120_000);
    expect(rowBackoffMs(3, 60, 64)).toBe(480_000);
    expect(rowBackoffMs(6, 60, 64)).toBe(64 * 60_000);
    expect(rowBackoffMs(30, 60, 64)).toBe(64 * 60_000);
    expect(rowBackoffMs(5000, 60, 64)).toBe(64 * 60_000);
    expect(rowBackoffMs(2, 0.05, 64)).toBe(200);
  });

  test("a target that failed n times in a row waits 2^(n-1) units, capped", () => {
    expect(targetBackoffMs(1, 60, 64)).toBe(60_000);
    expect(targetBackoffMs(2, 60, 64)).toBe(120_000);
    expect(targetBackoffMs(100, 60, 64)).toBe(64 * 60_000);
    expect(targetBackoffMs(3, 0.01, 0.0005)).toBe(30);
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
    const r = tableReadiness(head("2026-01-01T00:00:00.000000+00:00", "2026-01-01T00:00:20.000000+00:00"), 500, now, knobs);
    expect(r).toEqual({ ready: false, wakeAt: Date.parse("2026-01-01T00:00:20.000Z") });
  });
  test("a head whose backoff has passed is ready again", () => {
    expect(tableReadiness(head("2026-01-01T00:00:00.000000+00:00", "2026-01-01T00:00:05.000000+00:00"), 1, now, knobs).ready).toBe(true);
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

  test("MAX(outbox_seq) arrives as number, bigint, string, null or an object row", () => {
    expect(parseMaxSeq([[42]])).toBe(42);
    expect(parseMaxSeq([[42n]])).toBe(42);
    expect(parseMaxSeq([["9007199254740"]])).toBe(9007199254740);
    expect(parseMaxSeq([[null]])).toBe(0);
    expect(parseMaxSeq([])).toBe(0);
    expect(parseMaxSeq([{ max: "17" }])).toBe(17);
    expect(parseMaxSeq([["abc"]])).toBeUndefined();
    expect(parseMaxSeq([[-3]])).toBeUndefined();
  });

  test("auto_schema tolerates exactly the 'already there' outcomes", () => {
    expect(isAlreadyApplied({ ok: true, rowsAffected: 0 })).toBe(true);
    expect(isAlreadyApplied({ ok: false, error: "duplicate column name: outbox_seq" })).toBe(true);
    expect(isAlreadyApplied({ ok: false, error: 'column "outbox_seq" of relation "t" already exists', errorClass: "42701" })).toBe(true);
    expect(isAlreadyApplied({ ok: false, error: "Duplicate key name 'idx_t_outbox_seq'", errorClass: "1061" })).toBe(true);
    expect(isAlreadyApplied({ ok: false, error: 'relation "t" does not exist', errorClass: "42P01" })).toBe(false);
  });
});

describe("drain lock", () => {
  test("a second lock on the same db_dir fails fast with LockedError naming the lock file", () => {
    const tmp = makeTempDir();
    try {
      const dir = tmp.file("nested/db");
      const first = acquireLock(dir);
      let caught: unknown;
      try {
        acquireLock(dir);
      } catch (error) {
        caught = error;
      }
      expect(caught).toBeInstanceOf(LockedError);
      expect((caught as LockedError).code).toBe("E_LOCKED");
      expect((caught as LockedError).lockFile).toBe(`${dir}/.sqloutbox.lock`);
      expect((caught as LockedError).message).toContain(`${dir}/.sqloutbox.lock`);
      first.release();
      first.release();
      acquireLock(dir).release();
    } finally {
      tmp.cleanup();
    }
  });

  test("a lock held by another process fails fast with LockedError", async () => {
    const tmp = makeTempDir();
    try {
      const child = Bun.spawn(["bun", `${import.meta.dir}/fixtures/drain-lock-holder.ts`, tmp.path], { stdout: "pipe", stderr: "inherit" });
      const reader = child.stdout.getReader();
      const { value } = await reader.read();
      expect(new TextDecoder().decode(value)).toContain("locked");
      expect(() => acquireLock(tmp.path)).toThrow(LockedError);
      child.kill("SIGKILL");
      await child.exited;
      // The kernel drops a flock with its holder: a crashed drain never leaves a stale lock.
      acquireLock(tmp.path).release();
    } finally {
      tmp.cleanup();
    }
  });
});

describe("service construction", () => {
  test("a target without a writer is a ConfigError naming the target", () => {
    const config = oneApp("/nonexistent/outbox", { main: { writer: "sqlite", connection: { path: "/nonexistent/r.db" }, tables: ["t"] } });
    let caught: unknown;
    try {
      new OutboxSyncService(config, {});
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(ConfigError);
    expect((caught as ConfigError).code).toBe("E_CONFIG");
    expect((caught as Error).message).toContain('no writer for target "app.main"');
  });
});
