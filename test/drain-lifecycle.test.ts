import { Database } from "bun:sqlite";
import { expect, test } from "bun:test";
import { Outbox } from "../src/outbox/outbox.ts";
import { SQLMiddleware } from "../src/outbox/middleware.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import type { TempDir } from "./support/tmp.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();

/** Spawns test/support/children/drain-child.ts; collects stdout/stderr as text while it runs. */
function spawnDrain(
  dir: TempDir,
  delayMs = 300,
  stopTimeoutMs = 5000,
  extra: { startupDelayMs?: number; writeTimeout?: number; activityLogIntervalMs?: number; console?: boolean } = {},
) {
  const spec = {
    console: extra.console ?? false,
    stopTimeoutMs,
    activityLogIntervalMs: extra.activityLogIntervalMs ?? 0,
    dbDir: dir.file("outbox"),
    targets: {
      r: {
        writerClass: `${import.meta.dir}/support/children/drain-slow-writer.ts:SlowWriter`,
        dialect: "sqlite",
        connection: { path: dir.file("remote.db"), delay_ms: delayMs, startup_delay_ms: extra.startupDelayMs ?? 0 },
        tables: ["t"],
      },
    },
    tuning: { flushInterval: 0.005, tableFlushThreshold: 1, tableMaxWait: 0, writeTimeout: extra.writeTimeout ?? 5 },
  };
  const child = Bun.spawn(["bun", `${import.meta.dir}/support/children/drain-child.ts`, JSON.stringify(spec)], {
    stdout: "pipe",
    stderr: "pipe",
  });
  cleanups.push(() => child.kill("SIGKILL"));
  const out = { stdout: "", stderr: "" };
  const pump = async (stream: ReadableStream<Uint8Array>, key: "stdout" | "stderr") => {
    const decoder = new TextDecoder();
    for await (const chunk of stream) out[key] += decoder.decode(chunk);
  };
  void pump(child.stdout, "stdout");
  void pump(child.stderr, "stderr");
  return { child, out };
}

function setupRemote(dir: TempDir) {
  const remote = new Database(dir.file("remote.db"), { create: true });
  remote.run("PRAGMA journal_mode = WAL");
  remote.run("CREATE TABLE t (id INTEGER NOT NULL)");
  cleanups.push(() => remote.close());
  return remote;
}

test.each(["SIGTERM", "SIGHUP"] as const)(
  "%s lets the in-flight batch land and be confirmed, closes the writer and exits 0",
  async (signal) => {
    const dir = tempDirCleanedBy(cleanups);
    const remote = setupRemote(dir);
    const { child, out } = spawnDrain(dir, 400);
    await waitFor(() => out.stdout.includes("started"), "the drain to start", 10_000);
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    for (let i = 0; i < 40; i++) producer.push("t", "INSERT INTO t (id) VALUES (?)", [i]);
    await waitFor(() => out.stdout.includes("batch-start"), "a batch to be in flight");
    child.kill(signal);
    expect(await child.exited).toBe(0);
    expect(out.stdout).toContain("batch-done");
    expect(out.stdout).toContain("writer-closed");
    expect(out.stdout).toContain("stopped");
    expect(out.stderr).toContain(`${signal}: finishing the in-flight batch`);
    // Whatever the in-flight batch carried is on the remote AND confirmed locally: nothing to redeliver.
    const delivered = remote.query<{ n: number }, []>("SELECT count(*) AS n FROM t").get()!.n;
    const q = new Outbox(dir.file("outbox/t.db"), "t");
    cleanups.push(() => q.close());
    expect(delivered).toBeGreaterThan(0);
    expect(delivered + q.pendingCount()).toBe(40);
  },
  20_000,
);

test("SIGUSR1 logs an integrity scan and the drain keeps running; a second drain on the db_dir exits non-zero naming the lock", async () => {
  const dir = tempDirCleanedBy(cleanups);
  setupRemote(dir);
  const { child, out } = spawnDrain(dir, 0);
  await waitFor(() => out.stdout.includes("started"), "the drain to start", 10_000);
  child.kill("SIGUSR1");
  await waitFor(() => out.stderr.includes("integrity scan"), "the integrity scan");
  expect(out.stderr).toMatch(/integrity scan of 1 file\(s\): clean/);

  const second = spawnDrain(dir, 0);
  expect(await second.child.exited).not.toBe(0);
  expect(second.out.stderr).toContain(`${dir.file("outbox")}/.sqloutbox.lock`);

  expect(child.exitCode).toBeNull(); // SIGUSR1 did not stop it
  child.kill("SIGINT");
  expect(await child.exited).toBe(0);
}, 20_000);

test("SIGTERM with a batch that never finishes still exits 0 after the stop timeout; the rows stay queued", async () => {
  const dir = tempDirCleanedBy(cleanups);
  setupRemote(dir);
  const { child, out } = spawnDrain(dir, 600_000, 300);
  await waitFor(() => out.stdout.includes("started"), "the drain to start", 10_000);
  const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
  for (let i = 0; i < 5; i++) producer.push("t", "INSERT INTO t (id) VALUES (?)", [i]);
  await waitFor(() => out.stdout.includes("batch-start"), "a batch to be in flight");
  child.kill("SIGTERM");
  expect(await child.exited).toBe(0);
  expect(out.stderr).toContain("did not settle within 300ms");
  const q = new Outbox(dir.file("outbox/t.db"), "t");
  cleanups.push(() => q.close());
  expect(q.pendingCount()).toBe(5); // unconfirmed: redelivered (and absorbed) by the next drain
}, 20_000);

test("SIGTERM while startup waits on a hanging remote stops at once and exits 0, not after write_timeout", async () => {
  const dir = tempDirCleanedBy(cleanups);
  setupRemote(dir);
  // write_timeout 600 s: a drain that waited out its startup would outlive this test by far.
  const { child, out } = spawnDrain(dir, 0, 300, { startupDelayMs: 600_000, writeTimeout: 600 });
  await waitFor(() => out.stdout.includes("startup-start"), "startup to reach the remote", 10_000);
  child.kill("SIGTERM");
  expect(await child.exited).toBe(0);
  expect(out.stdout).not.toContain("started");
  expect(out.stdout).toContain("writer-closed");
  expect(out.stderr).toContain("SIGTERM during startup");
  expect(out.stderr).not.toMatch(/unavailable|failed/);
}, 20_000);

test("logs what it delivered every activity interval, so a healthy drain is visible in the journal", async () => {
  const dir = tempDirCleanedBy(cleanups);
  setupRemote(dir);
  const { child, out } = spawnDrain(dir, 0, 5000, { activityLogIntervalMs: 150 });
  await waitFor(() => out.stdout.includes("started"), "the drain to start", 10_000);
  const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
  for (let i = 0; i < 7; i++) producer.push("t", "INSERT INTO t (id) VALUES (?)", [i]);
  // Each line counts only its own interval: over the lines, the 7 rows are counted exactly once.
  const delivered = () => [
    ...out.stderr.matchAll(/info drain: last 150ms: delivered (\d+), 0 failed, 0 dead-lettered; (\d+) pending/g),
  ];
  await waitFor(
    () => delivered().reduce((n, m) => n + Number(m[1]), 0) === 7 && delivered().at(-1)![2] === "0",
    "activity lines counting the 7 rows",
  );
  const seen = delivered().length;
  await waitFor(() => delivered().length > seen, "the next, idle activity line");
  expect(delivered().reduce((n, m) => n + Number(m[1]), 0)).toBe(7);
  child.kill("SIGTERM");
  expect(await child.exited).toBe(0);
}, 20_000);

test("with { logger: console } the library writes one line per event, fields inline, and no per-batch debug lines", async () => {
  const dir = tempDirCleanedBy(cleanups);
  setupRemote(dir);
  const { child, out } = spawnDrain(dir, 0, 5000, { console: true, activityLogIntervalMs: 150 });
  await waitFor(() => out.stdout.includes("started"), "the drain to start", 10_000);
  const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
  for (let i = 0; i < 7; i++) producer.push("t", "INSERT INTO t (id) VALUES (?)", [i]);
  await waitFor(() => /delivered [1-7]/.test(out.stdout), "an activity line counting delivered rows");
  child.kill("SIGTERM");
  expect(await child.exited).toBe(0);
  const lines = (out.stdout + out.stderr).trim().split("\n");
  // Each line is a whole event (Bun's console prints a field object over several lines).
  expect(lines.filter((l) => !/^(drain: |started$|stopped$|batch-|writer-)/.test(l))).toEqual([]);
  expect(lines.some((l) => l.startsWith("drain: batch to"))).toBe(false);
  expect(lines).toContainEqual("drain: created the delivery ledger sqloutbox_ledger on app.r  app=app target=app.r");
}, 20_000);
