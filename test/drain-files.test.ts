// What the drain does to the files it serves besides delivering: it keeps their WAL bounded and
// gives back the space a drained backlog left; in an application's own database it creates and
// changes nothing but its own rows, and the application's writers never see SQLITE_BUSY; its
// confirmations there go in short parts, and every write-lock hold is measured.
import { Database } from "bun:sqlite";
import { expect, test } from "bun:test";
import { mkdirSync, statSync } from "node:fs";
import { defineConfig } from "../src/config/define.ts";
import { FileCare, walSize } from "../src/drain/file-care.ts";
import type { LockHoldEvent } from "../src/drain/queue-pool.ts";
import { OutboxSyncService } from "../src/drain/service.ts";
import { createDrainMetrics } from "../src/ops/metrics.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { QueueDb } from "../src/outbox/queue-db.ts";
import { SQLMiddleware } from "../src/outbox/middleware.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { FAST, memoryLogger } from "./support/drain-harness.ts";
import { parsePrometheusText } from "./support/prom-text.ts";
import { openRemote } from "./support/remote.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();

/** A remote SQLite file with table `t` (and `credits`), and a drain of `queues` (db_dir or db_file) into it, on a clock the test moves. */
async function drainInto(queues: { dbDir: string } | { dbFile: string }, tables: string[]) {
  const remote = await openRemote("sqlite", { cleanups });
  await remote.exec("CREATE TABLE t (id INTEGER, note TEXT)");
  await remote.exec("CREATE TABLE credits (n INTEGER PRIMARY KEY)");
  const config = defineConfig({
    app: {
      app: {
        ...queues,
        ...FAST,
        batchSize: 2_000,
        db: { r: { writer: "sqlite", connection: remote.connection, tables } },
      },
    },
  });
  let offsetMs = 0;
  const log = memoryLogger();
  const svc = new OutboxSyncService(
    config,
    { "app.r": remote.createWriter() },
    { logger: log, now: () => Date.now() + offsetMs },
  );
  cleanups.push(() => svc.stop(2000));
  /** Cycles until nothing is pending, then twice more a second apart on the drain's clock (each file is looked after once a second). */
  const drainAndRest = async () => {
    await waitFor(async () => (await svc.runOnce(), svc.totalPending() === 0), "the queue drained", 30_000);
    for (let i = 0; i < 3; i++) {
      offsetMs += 1_500;
      await svc.runOnce();
    }
  };
  return { remote, svc, log, drainAndRest };
}

test("an idle file's WAL goes back to zero bytes and the space of a drained backlog is given back", async () => {
  const dir = tempDirCleanedBy(cleanups);
  const file = dir.file("outbox/t.db");
  mkdirSync(dir.file("outbox"));
  const q = new Outbox(file, "t");
  cleanups.push(() => q.close());
  const note = "x".repeat(400);
  for (let i = 0; i < 20; i++)
    q.enqueueBatch(
      Array.from({ length: 1_000 }, (_, k) => ({
        tag: "INSERT INTO t (id, note) VALUES (?, ?)",
        payload: JSON.stringify([i * 1_000 + k, note]),
      })),
      "",
      { grouped: false },
    );
  const db = new Database(file);
  cleanups.push(() => db.close());
  db.query("PRAGMA wal_checkpoint(PASSIVE)").get(); // the main file holds the backlog
  const peak = statSync(file).size;
  expect(peak).toBeGreaterThan(8_000_000);
  const { remote, svc, drainAndRest } = await drainInto({ dbDir: dir.file("outbox") }, ["t"]);
  await drainAndRest();
  expect(await remote.count("t")).toBe(20_000);
  expect(walSize(file)).toBe(0);
  expect(statSync(file).size).toBeLessThan(peak * 0.2);
  const view = svc.targets()[0]!.view().files;
  expect(view).toEqual([{ file, walBytes: 0, freePages: expect.any(Number), embedded: false }]);
  expect(view[0]!.freePages).toBeLessThan(1_024);
});

test("a vacuum its budget cuts short asks for the next look a second later, until every free page is back", () => {
  const dir = tempDirCleanedBy(cleanups);
  const file = dir.file("t.db");
  const q = new Outbox(file, "t");
  const note = "x".repeat(400);
  q.enqueueBatch(
    Array.from({ length: 10_000 }, (_, k) => ({
      tag: "INSERT INTO t (id, note) VALUES (?, ?)",
      payload: JSON.stringify([k, note]),
    })),
    "",
    { grouped: false },
  );
  q.close();
  const qdb = QueueDb.open(file, { durability: "normal", busyTimeoutMs: 1_000 });
  cleanups.push(() => qdb.close());
  qdb.db.run("DELETE FROM outbox_queue");
  const free = () => qdb.db.query<{ n: number }, []>("SELECT freelist_count AS n FROM pragma_freelist_count").get()!.n;
  expect(free()).toBeGreaterThan(4 * 512); // more than one look of one step gives back
  const care = new FileCare(memoryLogger(), 0); // no budget: one 512-page step per look
  let now = 1_000_000;
  expect(care.tend(qdb, now, () => false)).toBeNull(); // not idle: no vacuum, nothing to come back for
  now += 1_000;
  const looks: Array<number | null> = [];
  for (let again = care.tend(qdb, now, () => true); again !== null; again = care.tend(qdb, now, () => true)) {
    expect(again).toBe(now + 1_000);
    expect(care.tend(qdb, now + 500, () => true)).toBe(again); // asked early: the same time, nothing done
    looks.push(again);
    now = again;
  }
  expect(looks.length).toBeGreaterThan(2);
  expect(free()).toBeLessThan(1_024); // below VACUUM_FROM_FREE_PAGES: nothing left worth a look
});

test("a file another connection commits to is checkpointed by the drain between its cycles, so that its commits need none; a drain alone on a file leaves the checkpoints to its own commits", () => {
  const dir = tempDirCleanedBy(cleanups);
  const file = dir.file("t.db");
  new Outbox(file, "t").close();
  const drain = QueueDb.open(file, { durability: "normal", busyTimeoutMs: 1_000 });
  cleanups.push(() => drain.close());
  const writer = new Database(file);
  cleanups.push(() => writer.close());
  writer.run("CREATE TABLE other (x BLOB)");
  // Neither connection checkpoints in its commits: a WAL that stays short was checkpointed by tend.
  for (const db of [writer, drain.db]) db.run("PRAGMA wal_autocheckpoint = 0");
  const care = new FileCare(memoryLogger());
  let now = 1_000_000;
  const commitsWhileTending = (db: Database) => {
    for (let i = 0; i < 1_000; i++) {
      db.run("INSERT INTO other VALUES (randomblob(1500))"); // a frame or two each
      if (i % 50 === 49) care.tend(drain, (now += 1_000), () => false);
    }
    return walSize(file);
  };
  // The application's (or a producer's) commits: the WAL starts over after each checkpoint.
  const withCheckpoints = commitsWhileTending(writer);
  // The drain's own commits, as many: no checkpoint from tend, the WAL only grows (8 MB here).
  const without = commitsWhileTending(drain.db);
  expect(withCheckpoints * 3).toBeLessThan(without);
});

test("in the application's own database the drain delivers, creates nothing, switches nothing and only checkpoints passively", async () => {
  const dir = tempDirCleanedBy(cleanups);
  const file = dir.file("app.db");
  const app = new Database(file);
  cleanups.push(() => app.close());
  app.run("PRAGMA journal_mode = WAL");
  app.run("PRAGMA user_version = 41");
  app.run("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)");
  app.run("INSERT INTO accounts VALUES (1, 0)");
  const outbox = new SQLMiddleware({ database: app });
  for (let n = 0; n < 50; n++)
    outbox.transaction(() => {
      app.run("UPDATE accounts SET balance = balance + 1 WHERE id = 1");
      outbox.push("credits", "INSERT INTO credits (n) VALUES (?)", [n]);
    });
  const schemaOf = () => app.query("SELECT type, name, sql FROM sqlite_schema ORDER BY name").all();
  const before = {
    schema: schemaOf(),
    pragmas: app
      .query("SELECT * FROM pragma_user_version, pragma_application_id, pragma_page_size, pragma_auto_vacuum")
      .get(),
  };
  const { remote, svc, drainAndRest } = await drainInto({ dbFile: file }, ["credits"]);
  await drainAndRest();
  expect(await remote.count("credits")).toBe(50);
  expect(app.query("SELECT balance FROM accounts").get()).toEqual({ balance: 50 });
  expect({
    schema: schemaOf(),
    pragmas: app
      .query("SELECT * FROM pragma_user_version, pragma_application_id, pragma_page_size, pragma_auto_vacuum")
      .get(),
  }).toEqual(before);
  expect(svc.targets()[0]!.view().files).toEqual([
    { file, walBytes: expect.any(Number), freePages: expect.any(Number), embedded: true },
  ]);
  expect(walSize(file)).toBeGreaterThan(0); // never truncated behind the application's back
});

test("a db_file the producer has not created yet holds its tables and is never created by the drain; it delivers once the producer has", async () => {
  const dir = tempDirCleanedBy(cleanups);
  const file = dir.file("shop/outbox.db");
  const { remote, svc, log } = await drainInto({ dbFile: file }, ["t"]);
  await svc.runOnce();
  expect(svc.targets()[0]!.tables[0]!.view().held).toMatchObject({
    reason: "file",
    message: expect.stringContaining("does not exist yet: its producer creates it"),
  });
  expect(Bun.file(file).size).toBe(0);
  expect(await Bun.file(file).exists()).toBe(false);
  new SQLMiddleware({ dbFile: file }).push("t", "INSERT INTO t (id) VALUES (?)", [1]);
  await waitFor(
    async () => (await svc.runOnce(), (await remote.count("t")) === 1),
    "delivery once the file exists",
    10_000,
  );
  expect(log.lines.filter((l) => l.includes("does not exist yet")).length).toBe(1); // said once
});

test("an application's database created and not yet given its outbox (no tables) is waited for, never stamped as an outbox file; it delivers once the application opened its outbox", async () => {
  const dir = tempDirCleanedBy(cleanups);
  const file = dir.file("app.db");
  const app = new Database(file);
  app.run("PRAGMA journal_mode = WAL");
  const { remote, svc, log } = await drainInto({ dbFile: file }, ["t"]);
  await svc.runOnce();
  expect(svc.targets()[0]!.tables[0]!.view().held).toMatchObject({
    reason: "file",
    message: expect.stringContaining("holds no tables yet: its producer creates it"),
  });
  const pragmas = () =>
    app.query("SELECT * FROM pragma_user_version, pragma_application_id, pragma_page_size, pragma_auto_vacuum").get();
  const before = { user_version: 0, application_id: 0, page_size: 4096, auto_vacuum: 0 };
  expect(pragmas()).toEqual(before);
  expect(app.query("SELECT count(*) AS n FROM sqlite_schema").get()).toEqual({ n: 0 });
  new SQLMiddleware({ database: app }).push("t", "INSERT INTO t (id) VALUES (?)", [1]);
  await waitFor(
    async () => (await svc.runOnce(), (await remote.count("t")) === 1),
    "delivery once the application opened its outbox",
    10_000,
  );
  expect(pragmas()).toEqual(before); // the application's own pragmas, still
  expect(log.lines.filter((l) => l.includes("holds no tables yet")).length).toBe(1); // said once
  await svc.stop();
});

test("a db_file that is an application's database without our tables is held, named, and left byte-identical", async () => {
  const dir = tempDirCleanedBy(cleanups);
  const file = dir.file("app.db");
  const app = new Database(file);
  app.run("PRAGMA journal_mode = WAL");
  app.run("CREATE TABLE accounts (id INTEGER PRIMARY KEY)");
  app.close();
  const bytes = await Bun.file(file).bytes();
  const { svc } = await drainInto({ dbFile: file }, ["t"]);
  await svc.runOnce();
  expect(svc.targets()[0]!.tables[0]!.view().held).toMatchObject({
    reason: "file",
    message: expect.stringContaining("holds other tables (accounts) and no outbox_queue"),
  });
  await svc.stop();
  expect(await Bun.file(file).bytes()).toEqual(bytes);
});

test("an application writing its own rows and events at full speed while the drain delivers from the same file never sees SQLITE_BUSY", async () => {
  const dir = tempDirCleanedBy(cleanups);
  const file = dir.file("app.db");
  const app = new Database(file);
  app.run("PRAGMA journal_mode = WAL");
  app.run("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)");
  app.run("INSERT INTO accounts VALUES (1, 0)");
  new SQLMiddleware({ database: app }).outbox("credits"); // the application creates our tables before the drain starts
  app.close();
  const { remote, svc } = await drainInto({ dbFile: file }, ["credits"]);
  await svc.start();
  const stopFile = dir.file("stop");
  const child = Bun.spawn(
    ["bun", `${import.meta.dir}/support/children/app-db-producer.ts`, JSON.stringify({ file, stopFile })],
    { stdout: "pipe", stderr: "inherit" },
  );
  cleanups.push(() => child.kill());
  await Bun.sleep(2_000);
  await Bun.write(stopFile, "");
  const [, transactions, errors, ...first] = (await new Response(child.stdout).text()).trim().split(" ");
  expect({ errors: Number(errors), first: first.join(" ") }).toEqual({ errors: 0, first: "" });
  expect(Number(transactions)).toBeGreaterThan(500);
  await waitFor(() => svc.totalPending() === 0, "the drain caught up", 20_000);
  expect(await remote.count("credits")).toBe(Number(transactions));
  const check = new Database(file, { readonly: true });
  cleanups.push(() => check.close());
  expect(check.query("SELECT balance FROM accounts").get()).toEqual({ balance: Number(transactions) });
}, 30_000);

test("in the application's own database a large confirmation goes in parts of 100 rows, the application writing between them, and every write-lock hold is in the histogram by app and file", async () => {
  const dir = tempDirCleanedBy(cleanups);
  const file = dir.file("app.db");
  const app = new Database(file);
  cleanups.push(() => app.close());
  app.run("PRAGMA journal_mode = WAL");
  app.run("CREATE TABLE seen (pending INTEGER NOT NULL)");
  const credits = new SQLMiddleware({ database: app }).outbox("credits");
  credits.enqueueBatch(
    Array.from({ length: 1_000 }, (_, n) => ({
      tag: "INSERT INTO credits (n) VALUES (?)",
      payload: JSON.stringify([n]),
    })),
    "test",
    { grouped: false },
  );
  const remote = await openRemote("sqlite", { cleanups });
  await remote.exec("CREATE TABLE credits (n INTEGER PRIMARY KEY)");
  const config = defineConfig({
    app: {
      app: {
        dbFile: file,
        ...FAST,
        batchSize: 2_000,
        db: { r: { writer: "sqlite", connection: remote.connection, tables: ["credits"] } },
      },
    },
  });
  const holds: LockHoldEvent[] = [];
  let svc: OutboxSyncService | null = null;
  const metrics = createDrainMetrics(() => svc);
  svc = new OutboxSyncService(
    config,
    { "app.r": remote.createWriter() },
    {
      onLockHold: (event) => {
        holds.push(event);
        metrics.observeLockHold(event);
      },
    },
  );
  cleanups.push(() => svc.stop(2000));
  // The application writes whenever this process's event loop lets it, on its own connection
  // (busy timeout 0: a write lock the drain held across a turn would throw SQLITE_BUSY here).
  let writing = true;
  const write = () => {
    if (!writing) return;
    app.run("INSERT INTO seen SELECT count(*) FROM outbox_queue WHERE namespace = 'credits'");
    setImmediate(write);
  };
  setImmediate(write);
  await waitFor(async () => (await svc.runOnce(), svc.totalPending() === 0), "the queue drained", 20_000);
  writing = false;
  expect(await remote.count("credits")).toBe(1_000);
  const seen = app
    .query<{ pending: number }, []>("SELECT DISTINCT pending FROM seen ORDER BY pending DESC")
    .all()
    .map((r) => r.pending);
  // One batch of 1 000 rows, confirmed 100 at a time: the application's writes in between saw each
  // part gone and the rest pending, never half a part.
  const between = seen.filter((n) => n > 0 && n < 1_000);
  expect(between.length).toBeGreaterThan(0);
  expect(between.filter((n) => n % 100 !== 0)).toEqual([]);
  expect(holds.length).toBeGreaterThanOrEqual(10); // ten parts, and the attempt record before the batch
  expect(holds.filter((h) => h.app !== "app" || h.file !== file || !(h.seconds > 0))).toEqual([]);
  const s = parsePrometheusText(await metrics.text());
  expect(s.types.get("sqloutbox_local_write_lock_seconds")).toBe("histogram");
  const labels = { app: "app", file };
  expect(s.value("sqloutbox_local_write_lock_seconds_count", labels)).toBe(holds.length);
  expect(s.value("sqloutbox_local_write_lock_seconds_bucket", { ...labels, le: "+Inf" })).toBe(holds.length);
  expect(s.value("sqloutbox_local_write_lock_seconds_sum", labels)).toBeCloseTo(
    holds.reduce((n, h) => n + h.seconds, 0),
    9,
  );
}, 30_000);
