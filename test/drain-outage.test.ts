import { expect, test } from "bun:test";
import { OutboxSyncService } from "../src/drain/service.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { SQLMiddleware } from "../src/outbox/middleware.ts";
import { createWriter } from "../src/writers/registry.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { FaultyWriter, memoryLogger, oneApp } from "./support/drain-harness.ts";
import { openRemote } from "./support/remote.ts";
import { describeSlow } from "./support/slow.ts";
import { pgBehindProxy } from "./support/tcp-proxy.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();

describeSlow("an outage in real time", "cut PostgreSQL for seconds under a running drain", () => {
  test("a PostgreSQL outage charges and dead-letters nothing while producers keep writing; after restore everything lands once, in order", async () => {
    const dir = tempDirCleanedBy(cleanups);
    const remote = await openRemote("postgres", { cleanups });
    await remote.exec("CREATE TABLE a (pos BIGSERIAL, id BIGINT NOT NULL)");
    await remote.exec("CREATE TABLE b (pos BIGSERIAL, id BIGINT NOT NULL)");
    const { proxy, url } = pgBehindProxy(remote, cleanups);
    const connection = { url, connect_timeout: 1, batch_timeout: 2 };
    const config = oneApp(
      dir.file("outbox"),
      { pg: { writer: "postgres", connection, tables: ["a", "b"] } },
      {
        maxAttempts: 2, // a single wrongly charged attempt pair would dead-letter: the test would see it
        backoffUnitSeconds: 0.05,
        outageBackoffCapMinutes: 0.005, // 300 ms
        writeTimeout: 1.5,
        batchSize: 100,
      },
    );
    const log = memoryLogger();
    const svc = new OutboxSyncService(config, { "app.pg": createWriter("postgres", connection) }, { logger: log });
    cleanups.push(() => svc.stop(3000));
    await svc.start();

    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    const produced = { a: 0, b: 0 };
    const produce = () => {
      producer.push("a", "INSERT INTO a (id) VALUES (?)", [produced.a++]);
      producer.push("b", "INSERT INTO b (id) VALUES (?)", [produced.b++]);
    };
    const timer = setInterval(() => {
      for (let i = 0; i < 10; i++) produce();
    }, 5);
    cleanups.push(() => clearInterval(timer));
    await waitFor(async () => (await remote.count("a")) > 100, "delivery before the cut");

    const queues = ["a", "b"].map((t) => new Outbox(dir.file(`outbox/${t}.db`), t));
    cleanups.push(() => {
      for (const q of queues) q.close();
    });
    let maxAttemptsSeen = 0;
    const sample = () => {
      for (const q of queues) {
        maxAttemptsSeen = Math.max(maxAttemptsSeen, q.head()?.attempts ?? 0);
        expect(q.deadCount()).toBe(0);
      }
    };
    for (const mode of ["reset", "blackhole"] as const) {
      proxy.cut(mode);
      const until = Date.now() + 1200;
      while (Date.now() < until) {
        sample();
        await Bun.sleep(20);
      }
      expect(queues[0]!.pendingCount()).toBeGreaterThan(100); // producers kept enqueueing
      proxy.restore();
      await Bun.sleep(100);
    }
    clearInterval(timer);
    for (let i = 0; i < 50; i++) produce();
    await waitFor(() => svc.totalPending() === 0, "everything to land after the restore", 20_000);

    // A head is charged up front and refunded when the batch fails: never more than that one.
    if (process.env.DRAIN_DEBUG) console.log(log.lines.join("\n"));
    expect(maxAttemptsSeen).toBeLessThanOrEqual(1);
    for (const q of queues) expect(q.deadCount()).toBe(0);
    expect(log.has(/target app\.pg is unavailable/)).toBe(true);
    expect(log.has(/target app\.pg is reachable again/)).toBe(true);
    for (const t of ["a", "b"] as const) {
      // pos is the order the remote inserted rows in: every row once, in the order produced.
      const ids = (await remote.ints(`SELECT id FROM ${t} ORDER BY pos`)).flat();
      expect(ids.length).toBe(produced[t]);
      expect(ids).toEqual([...Array(produced[t]).keys()]);
    }
  }, 30_000);
});

test("a drain whose target is down sleeps through its backoff: a handful of cycles, not a busy loop", async () => {
  const dir = tempDirCleanedBy(cleanups);
  const writer = new FaultyWriter(createWriter("sqlite", { path: dir.file("remote.db") }));
  writer.always = "throw"; // connection refused, every call
  const config = oneApp(
    dir.file("outbox"),
    { r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["t"] } },
    { flushInterval: 0.005, outageBackoffCapMinutes: 1 },
  );
  new SQLMiddleware({ dbDir: dir.file("outbox") }).push("t", "INSERT INTO t (id) VALUES (?)", [1]);
  const svc = new OutboxSyncService(config, { "app.r": writer }, { logger: memoryLogger() });
  cleanups.push(() => svc.stop(1000));
  await svc.start();
  const runner = svc.targets()[0]!;
  let cycles = 0;
  const cycle = runner.cycle.bind(runner);
  runner.cycle = (only) => {
    cycles += 1;
    // A loop that spins never lets this test's sleep end: park it, so the count below says so.
    return cycles > 100 ? new Promise(() => {}) : cycle(only);
  };
  await Bun.sleep(1500);
  expect(runner.reachability.down).toBe(true);
  // Backoffs of 1 s then 2 s (jittered to at least half): a few cycles in 1.5 s. A loop woken by a
  // due time no cycle can meet (the fleet view's, while down) ran thousands.
  expect(cycles).toBeLessThan(10);
});

test("a target's view says how long its last batch took, sent to answered: over a 100 ms link, at least that", async () => {
  const dir = tempDirCleanedBy(cleanups);
  const remote = await openRemote("postgres", { cleanups });
  await remote.exec("CREATE TABLE a (id BIGINT NOT NULL)");
  const { url } = pgBehindProxy(remote, cleanups, { rttMs: 100 });
  const connection = { url };
  const config = oneApp(dir.file("outbox"), { pg: { writer: "postgres", connection, tables: ["a"] } });
  const svc = new OutboxSyncService(config, { "app.pg": createWriter("postgres", connection) });
  cleanups.push(() => svc.stop(3000));
  new SQLMiddleware({ dbDir: dir.file("outbox") }).push("a", "INSERT INTO a (id) VALUES (?)", [1]);
  await waitFor(async () => (await svc.runOnce(), (await remote.count("a")) === 1), "the row", 20_000);
  expect(svc.targets()[0]!.view().lastRoundTripMs).toBeGreaterThanOrEqual(95);
}, 30_000);
