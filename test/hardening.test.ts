// Hostile and broken input, tried as a careful operator would: refused at the door, never
// corrupting, never stopping the other tables. (Push-time statement checks, lossless values,
// config table names and Doppler have their own suites: producer-middleware, outbox-payload,
// config-validation, config-doppler.)
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import fs from "node:fs";
import { OutboxSyncService } from "../src/drain/service.ts";
import { StorageError } from "../src/errors.ts";
import { verifyFile } from "../src/outbox/inspect.ts";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { FORMAT_VERSION, LAYOUTS } from "../src/outbox/schema.ts";
import { ledgerDdl } from "../src/sql/ledger.ts";
import { createWriter } from "../src/writers/registry.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { runInProcess } from "./support/cli.ts";
import { memoryLogger, oneApp } from "./support/drain-harness.ts";
import { errorOf } from "./support/errors.ts";
import { openRemote } from "./support/remote.ts";
import { MYSQL_BASE_URL, PG_BASE_URL, requireServer } from "./support/server-db.ts";
import { describeSlow } from "./support/slow.ts";
import type { TempDir } from "./support/tmp.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();
const tmp = (): TempDir => tempDirCleanedBy(cleanups);

describe.each(["postgres", "mysql"] as const)("a queued '…; DROP TABLE victim' delivered to %s", (engine) => {
  test("is refused by push, and a row queued before that check is dead-lettered unrun: the victim table survives, the other rows land", async () => {
    const dir = tmp();
    const remote = await openRemote(engine, { cleanups });
    await remote.exec("CREATE TABLE t (id BIGINT)");
    await remote.exec("CREATE TABLE victim (id BIGINT)");
    await remote.exec("INSERT INTO victim (id) VALUES (1)");
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    expect(() => producer.push("t", "INSERT INTO t (id) VALUES (1); DROP TABLE victim", [])).toThrow(
      /more than one statement|statements/,
    );
    // A row an earlier version queued: straight into the file, as push once allowed.
    fs.mkdirSync(dir.file("outbox"), { recursive: true });
    const q = new Outbox(dir.file("outbox/t.db"), "t");
    cleanups.push(() => q.close());
    const bad = q.enqueue("INSERT INTO t (id) VALUES (1); DROP TABLE victim", "[]");
    producer.push("t", "INSERT INTO t (id) VALUES (?)", [2]);
    const config = oneApp(dir.file("outbox"), { r: { writer: engine, connection: remote.connection, tables: ["t"] } });
    const svc = new OutboxSyncService(config, { "app.r": remote.createWriter() }, { logger: memoryLogger() });
    cleanups.push(() => svc.stop(2000));
    await waitFor(async () => (await svc.runOnce(), q.pendingCount() === 0), "the queue to drain");
    expect(q.getDead(bad)).toMatchObject({ reason: "unsupported_statement" });
    expect(await remote.ints("SELECT id FROM victim")).toEqual([[1]]);
    expect(await remote.ints("SELECT id FROM t")).toEqual([[2]]);
  });
});

test("compatibility mode on PostgreSQL without the unique outbox_seq index (the drain role may not create it): the table is held, nothing dead-lettered, and it resumes by itself once a DBA creates the index", async () => {
  const dir = tmp();
  const remote = await openRemote("postgres", { cleanups });
  await remote.exec("CREATE TABLE t (id BIGINT, outbox_seq BIGINT NOT NULL DEFAULT 0)"); // column, but no index
  const config = oneApp(
    dir.file("outbox"),
    { r: { writer: "postgres", connection: remote.connection, tables: ["t"], injectOutboxSeq: true } },
    { autoSchema: false, maxAttempts: 2 },
  );
  const log = memoryLogger();
  let shiftMs = 0; // the drain's clock runs ahead by this much
  const svc = new OutboxSyncService(
    config,
    { "app.r": remote.createWriter() },
    { logger: log, now: () => Date.now() + shiftMs },
  );
  cleanups.push(() => svc.stop(2000));
  await remote.exec(ledgerDdl("sqloutbox_ledger", "postgres"));
  const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
  for (let i = 0; i < 3; i++) producer.push("t", "INSERT INTO t (id) VALUES (?)", [i]);
  await svc.start();
  await waitFor(() => log.has(/"t" is held \(remote schema\).*42P10/), "the hold (ON CONFLICT without a unique index)");
  const q = new Outbox(dir.file("outbox/t.db"), "t");
  cleanups.push(() => q.close());
  expect([q.pendingCount(), q.deadCount(), q.head()!.attempts]).toEqual([3, 0, 0]);
  await remote.exec("CREATE UNIQUE INDEX idx_t_outbox_seq ON t (outbox_seq) WHERE outbox_seq != 0");
  shiftMs = 2_000; // the first schema retry is 2 s after the hold: move the clock past it instead of waiting
  await waitFor(() => q.pendingCount() === 0, "delivery once the index exists", 20_000);
  expect((await remote.ints("SELECT id FROM t ORDER BY outbox_seq")).flat()).toEqual([0, 1, 2]);
});

/** `base` (a server URL without a database) with its password replaced by `password`, whatever the user. */
function withPassword(base: string, password: string): string {
  const url = new URL(base);
  url.password = password;
  return url.toString().replace(/\/$/, "");
}

describe("a target that no retry can fix is misconfigured, not an outage", () => {
  test.each([
    [
      "PostgreSQL, unknown database (3D000)",
      "postgres",
      (base: string) => `${base}/sqloutbox_no_such_db_${Date.now()}`,
    ],
    ["MariaDB, unknown database (1049)", "mysql", (base: string) => `${base}/sqloutbox_no_such_db_${Date.now()}`],
    ["MariaDB, wrong password (1045)", "mysql", (base: string) => `${withPassword(base, "wrong-password")}/test`],
  ] as const)("%s: said once, retried on a capped schedule, nothing charged", async (_name, engine, urlOf) => {
    await requireServer(engine); // no database of its own: a server that is down would pass for a misconfigured one
    const dir = tmp();
    const base = engine === "postgres" ? PG_BASE_URL : MYSQL_BASE_URL; // SQLOUTBOX_TEST_PG / SQLOUTBOX_TEST_MYSQL honoured
    const url = urlOf(base);
    const config = oneApp(
      dir.file("outbox"),
      { r: { writer: engine, connection: { url, connect_timeout: 2 }, tables: ["t"] } },
      { maxAttempts: 1 },
    );
    const log = memoryLogger();
    let shiftMs = 0; // the drain's clock runs ahead by this much
    const svc = new OutboxSyncService(
      config,
      { "app.r": createWriter(engine, { url, connect_timeout: 2 }) },
      { logger: log, now: () => Date.now() + shiftMs },
    );
    cleanups.push(() => svc.stop(2000));
    new SQLMiddleware({ dbDir: dir.file("outbox") }).push("t", "INSERT INTO t (id) VALUES (?)", [1]);
    for (let i = 0; i < 4; i++) {
      await svc.runOnce();
      shiftMs += 80; // past the (tiny, test-tuned) backoff
    }
    expect(svc.targets()[0]!.reachability.state).toBe("misconfigured");
    expect(svc.targets()[0]!.reachability.failures).toBeGreaterThanOrEqual(2);
    expect(log.lines.filter((l) => /^error .*is misconfigured/.test(l))).toHaveLength(1);
    const q = new Outbox(dir.file("outbox/t.db"), "t");
    cleanups.push(() => q.close());
    expect([q.pendingCount(), q.deadCount(), q.head()!.attempts]).toEqual([1, 0, 0]);
  });

  test("a custom writer's WriteError from another copy of the package (another class, same code) marks its target misconfigured", async () => {
    const dir = tmp();
    // What `new WriteError(…, { misconfigured: true })` of a second sqloutbox copy looks like here.
    class WriteError extends Error {
      readonly code = "E_WRITE";
      readonly misconfigured = true;
    }
    const writer = {
      dialect: "sqlite" as const,
      writeBatch: async () => {
        throw new WriteError("the token was refused");
      },
    };
    const config = oneApp(
      dir.file("outbox"),
      { r: { writerClass: "./w.ts:W", ledger: false, tables: ["t"] } },
      { outageBackoffCapMinutes: 5 },
    );
    const log = memoryLogger();
    const svc = new OutboxSyncService(config, { "app.r": writer }, { logger: log });
    cleanups.push(() => svc.stop(2000));
    new SQLMiddleware({ dbDir: dir.file("outbox") }).push("t", "INSERT INTO t (id) VALUES (?)", [1]);
    await svc.runOnce();
    expect(svc.targets()[0]!.reachability.state).toBe("misconfigured");
    // What it does, not "every few minutes": the outage schedule, from a second up to the cap.
    expect(
      log.lines.filter((l) =>
        /^error drain: target app\.r is misconfigured \(a batch of 1 statements\); retrying in [\d.]+m?s, then less often, up to 5m0s apart \(outage_backoff_cap_minutes\): .*the token was refused$/.test(
          l,
        ),
      ),
    ).toHaveLength(1);
  });
});

describe("never modify a foreign database", () => {
  test("a producer pointed at an application's users.db is refused and the file stays byte-identical", () => {
    const dir = tmp();
    fs.mkdirSync(dir.file("data"));
    const users = new Database(dir.file("data/users.db"));
    users.run("CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)");
    users.run("INSERT INTO users (email) VALUES ('a@example.com')");
    users.close();
    const before = fs.readFileSync(dir.file("data/users.db"));
    const producer = new SQLMiddleware({ dbDir: dir.file("data") });
    expect(() => producer.push("users", "INSERT INTO users (email) VALUES (?)", ["b@example.com"])).toThrow(
      /not an outbox file: .*users\.db holds other tables \(users\)/,
    );
    expect(fs.readFileSync(dir.file("data/users.db")).equals(before)).toBe(true);
    expect(fs.existsSync(dir.file("data/users.db-wal"))).toBe(false);
  });
});

describe("private by default", () => {
  test("queue files, their -wal/-shm and the lock file are created 0600 whatever the umask; an existing file keeps its mode; file_mode changes it", async () => {
    const dir = tmp();
    const old = process.umask(0o022);
    cleanups.push(() => process.umask(old));
    const producer = new SQLMiddleware({ dbDir: dir.file("q") });
    producer.push("t", "INSERT INTO t (id) VALUES (?)", [1]);
    const mode = (p: string) => fs.statSync(p).mode & 0o777;
    expect([mode(dir.file("q/t.db")), mode(dir.file("q/t.db-wal")), mode(dir.file("q/t.db-shm"))]).toEqual([
      0o600, 0o600, 0o600,
    ]);
    // The drain creates the lock file and the files of tables nobody produced into yet.
    const config = oneApp(dir.file("q"), {
      r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["t", "fresh"] },
    });
    const svc = new OutboxSyncService(config, { "app.r": createWriter("sqlite", { path: dir.file("remote.db") }) });
    cleanups.push(() => svc.stop(2000));
    await svc.start();
    expect([mode(dir.file("q/.sqloutbox.lock")), mode(dir.file("q/fresh.db"))]).toEqual([0o600, 0o600]);
    await svc.stop();
    // An existing file keeps the mode its owner gave it.
    fs.chmodSync(dir.file("q/t.db"), 0o640);
    closeSharedOutboxes();
    new SQLMiddleware({ dbDir: dir.file("q") }).push("t", "INSERT INTO t (id) VALUES (?)", [2]);
    expect(mode(dir.file("q/t.db"))).toBe(0o640);
    // file_mode for the drain's app, e.g. a group that reads the queues.
    const shared = oneApp(
      dir.file("g"),
      { r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["u"] } },
      { fileMode: 0o640 },
    );
    const svc2 = new OutboxSyncService(shared, { "app.r": createWriter("sqlite", { path: dir.file("remote.db") }) });
    cleanups.push(() => svc2.stop(2000));
    await svc2.start();
    expect([mode(dir.file("g/u.db")), mode(dir.file("g/.sqloutbox.lock"))]).toEqual([0o640, 0o640]);
  });
});

describe("format version", () => {
  test("a file written by a newer format is refused by producers, reported by the drain (its table only) and by verify; files we write carry the version", async () => {
    const dir = tmp();
    const producer = new SQLMiddleware({ dbDir: dir.file("q") });
    producer.push("new", "INSERT INTO new (id) VALUES (?)", [1]);
    producer.push("ok", "INSERT INTO ok (id) VALUES (?)", [1]);
    closeSharedOutboxes();
    const check = new Database(dir.file("q/new.db"));
    expect(check.query("PRAGMA user_version").get()).toEqual({ user_version: LAYOUTS.lean.format });
    check.run(`PRAGMA user_version = ${FORMAT_VERSION + 1}`); // as a newer sqloutbox would leave it
    check.close();
    const err = errorOf(() =>
      new SQLMiddleware({ dbDir: dir.file("q") }).push("new", "INSERT INTO new (id) VALUES (?)", [2]),
    );
    expect(err).toBeInstanceOf(StorageError);
    expect(err.message).toContain(
      `written by a newer sqloutbox (format ${FORMAT_VERSION + 1}; this version reads formats up to ${FORMAT_VERSION})`,
    );
    const remote = await openRemote("sqlite", { cleanups });
    await remote.exec("CREATE TABLE ok (id INTEGER)");
    const log = memoryLogger();
    const config = oneApp(dir.file("q"), {
      r: { writer: "sqlite", connection: remote.connection, tables: ["new", "ok"] },
    });
    const svc = new OutboxSyncService(config, { "app.r": remote.createWriter() }, { logger: log });
    cleanups.push(() => svc.stop(2000));
    await svc.start();
    await waitFor(() => svc.pendingCount().ok === 0, "the healthy table to flow");
    expect(log.has(/"new" is held \(file\).*newer sqloutbox/)).toBe(true);
    expect(verifyFile(dir.file("q/new.db"))).toMatchObject({
      ok: false,
      problems: [expect.stringMatching(/newer sqloutbox/)],
    });
  });

  test("an empty (zero-byte) queue file is flagged by verify, not reported as a healthy empty queue", async () => {
    const dir = tmp();
    fs.mkdirSync(dir.file("q"));
    fs.writeFileSync(dir.file("q/orders.db"), "");
    const r = await runInProcess(["verify", "--db-dir", dir.file("q")]);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/orders\.db: empty file .*never initialised/);
  });
});

describeSlow(
  "byte bounds",
  "drain 4 and then 12 rows of 10 MB in child processes and compare their peak memory",
  () => {
    test("the drain's memory stays bounded with large rows: twelve 10 MB rows peak no higher than four (batches are cut by bytes, not only rows)", async () => {
      const peak = async (rows: number) => {
        const dir = tmp();
        const proc = Bun.spawn(
          [
            "bun",
            `${import.meta.dir}/support/children/large-row-drain.ts`,
            JSON.stringify({ dir: dir.path, rows, rowMb: 10, batchMaxBytes: 16 * 1024 * 1024 }),
          ],
          { stdout: "pipe", stderr: "inherit" },
        );
        expect(await proc.exited).toBe(0);
        const out = JSON.parse(await new Response(proc.stdout).text()) as {
          baselineMb: number;
          peakMb: number;
          delivered: number;
        };
        expect(out.delivered).toBe(rows);
        return out.peakMb - out.baselineMb;
      };
      const four = await peak(4);
      const twelve = await peak(12);
      if (process.env.DRAIN_DEBUG) console.log({ four, twelve });
      expect(twelve).toBeLessThan(four + 40); // the backlog grew by 80 MB; the drain's peak did not follow it
      expect(twelve).toBeLessThan(120); // less than the backlog itself
    }, 60_000);
  },
);
