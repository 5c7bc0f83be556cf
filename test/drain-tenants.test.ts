// A database per tenant (SPEC §4c): one tenant template target delivers each row to its tenant's own
// database — every row once, in per-tenant order, at most max_open_tenants open at once — and a
// tenant whose database is down, missing or refusing holds that tenant alone, charging nothing.
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import fs from "node:fs";
import { defineConfig } from "../src/config/define.ts";
import { createWriters } from "../src/config/writers.ts";
import { OutboxSyncService } from "../src/drain/service.ts";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { verifyFile } from "../src/outbox/inspect.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { FAST, memoryLogger } from "./support/drain-harness.ts";
import { createServerDb, PG_BASE_URL } from "./support/server-db.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();
cleanups.push(() => closeSharedOutboxes());

const INSERT = "INSERT INTO ev (k, n) VALUES (?, ?)";
const SCHEMA = "CREATE TABLE ev (pos INTEGER PRIMARY KEY, k TEXT NOT NULL, n INTEGER NOT NULL CHECK (n >= 0))";

/** A template over SQLite files `remote/{tenant}.db`, whose tenants' databases `make` creates with the schema. */
async function sqliteTemplate(given: Record<string, unknown> = {}, tables: unknown[] = ["ev"]) {
  const { maxOpenTenants, ...tuning } = given;
  const dir = tempDirCleanedBy(cleanups);
  fs.mkdirSync(dir.file("remote"));
  const make = (tenant: string, ddl = SCHEMA) => {
    const db = new Database(dir.file(`remote/${tenant}.db`), { create: true });
    db.run("PRAGMA journal_mode = WAL");
    db.run(ddl);
    db.close();
  };
  const rows = (tenant: string): Array<[string, number]> => {
    const path = dir.file(`remote/${tenant}.db`);
    if (!fs.existsSync(path)) return [];
    const db = new Database(path, { readonly: true });
    try {
      return db
        .query<{ k: string; n: number }, []>("SELECT k, n FROM ev ORDER BY pos")
        .all()
        .map((r) => [r.k, r.n]);
    } catch {
      return [];
    } finally {
      db.close();
    }
  };
  const config = defineConfig({
    app: {
      app: {
        dbDir: dir.file("queue"),
        ...FAST,
        backoffUnitSeconds: 30, // a failed head waits for the test's kick
        ...tuning,
        db: {
          r: {
            writer: "sqlite",
            connection: { path: dir.file("remote/{tenant}.db") },
            tables: tables as never,
            ...(maxOpenTenants === undefined ? {} : { maxOpenTenants: maxOpenTenants as number }),
          },
        },
      },
    },
  });
  const log = memoryLogger();
  const svc = new OutboxSyncService(config, await createWriters(config), { logger: log });
  cleanups.push(() => svc.stop(2000));
  const producer = new SQLMiddleware({ dbDir: dir.file("queue") });
  /** Descriptors this process holds open on the tenants' files. */
  const openFiles = () =>
    fs.readdirSync("/proc/self/fd").filter((fd) => {
      try {
        return fs.readlinkSync(`/proc/self/fd/${fd}`).startsWith(dir.file("remote/"));
      } catch {
        return false;
      }
    }).length;
  return { dir, make, rows, svc, log, producer, openFiles };
}

describe("a tenant template on SQLite files", () => {
  test("1 000 tenants: every row lands once in its own tenant's database, in order, with at most max_open_tenants open", async () => {
    const s = await sqliteTemplate({ maxOpenTenants: 16, tableFlushThreshold: 1 });
    const tenants = Array.from({ length: 1000 }, (_, i) => `t${i}`);
    for (const t of tenants) s.make(t);
    // Rows of several tenants interleaved, as an application writes them.
    for (let n = 1; n <= 3; n++) for (const t of tenants) s.producer.push("ev", INSERT, [t, n], { tenant: t });
    let mostOpen = 0;
    let mostFiles = 0;
    await waitFor(
      async () => {
        await s.svc.runOnce();
        mostOpen = Math.max(mostOpen, s.svc.targets()[0]!.view().tenants!.open);
        mostFiles = Math.max(mostFiles, s.openFiles());
        return s.svc.totalPending() === 0;
      },
      "every tenant's rows",
      120_000,
    );
    for (const t of tenants)
      expect(s.rows(t)).toEqual([
        [t, 1],
        [t, 2],
        [t, 3],
      ]);
    const view = s.svc.targets()[0]!.view().tenants!;
    expect(mostOpen).toBeLessThanOrEqual(16);
    // A SQLite file open takes its database and its WAL (and the WAL index): three descriptors a tenant at most.
    expect(mostFiles).toBeLessThanOrEqual(16 * 3);
    expect(view.opened).toBeGreaterThanOrEqual(1000);
    expect(view.held).toEqual([]);
  }, 180_000);

  test("a tenant whose database lacks the table is held alone, nothing charged; the others land; once it has the table, it lands once", async () => {
    const s = await sqliteTemplate();
    s.make("acme");
    s.make("globex");
    s.make("broken", "CREATE TABLE other (id INTEGER)"); // its ev is missing
    for (let n = 1; n <= 5; n++)
      for (const t of ["acme", "broken", "globex"]) s.producer.push("ev", INSERT, [t, n], { tenant: t });
    await waitFor(
      async () => (await s.svc.runOnce(), s.rows("acme").length === 5 && s.rows("globex").length === 5),
      "the other tenants",
    );
    for (let i = 0; i < 3; i++) await s.svc.runOnce();
    // Held, it is not looked at again before its hold ends: the drain does not spin on it.
    expect((await s.svc.runOnce()).more).toBe(false);
    const view = s.svc.targets()[0]!.view();
    expect(view.tenants!.held).toMatchObject([{ tenant: "broken", reason: "remote schema" }]);
    expect(view.tables[0]!.held).toBeNull(); // the table is not held: its tenant is
    // Tried again when its hold ends, and still lacking the table: the same hold, since the first
    // failure, its next try further off (reading its ledger again does not end it).
    const first = view.tenants!.held[0]!;
    await Bun.sleep(first.until - Date.now() + 50);
    await waitFor(
      async () => (await s.svc.runOnce(), s.svc.targets()[0]!.view().tenants!.held[0]!.until > first.until),
      "the next try",
    );
    const again = s.svc.targets()[0]!.view().tenants!.held[0]!;
    expect(again.since).toBe(first.since);
    expect(again.until - Date.now()).toBeGreaterThan(first.until - first.since);
    const q = new Outbox(s.dir.file("queue/ev.db"), "ev");
    cleanups.push(() => q.close());
    // Nothing charged; the other tenants' rows are marked applied behind its rows (the confirmation
    // is a prefix): pending are its rows alone — and the queue's last row, never marked (the next
    // row's position follows it) — and the file verifies clean.
    const pending = q.fetchUnsynced(20);
    expect(pending.map((r) => `${r.tenant}:${r.attempts}`)).toEqual([...Array<string>(5).fill("broken:0"), "globex:0"]);
    expect(q.pendingCount()).toBe(6);
    expect(verifyFile(s.dir.file("queue/ev.db")).ok).toBe(true);
    const db = new Database(s.dir.file("remote/broken.db"));
    db.run(SCHEMA);
    db.close();
    s.svc.retryNow();
    await waitFor(async () => (await s.svc.runOnce(), s.svc.totalPending() === 0), "the held tenant", 20_000);
    expect(s.rows("broken").map(([, n]) => n)).toEqual([1, 2, 3, 4, 5]);
    expect(s.rows("acme").map(([, n]) => n)).toEqual([1, 2, 3, 4, 5]);
    // Every row confirmed, the marked ones with the rest: the queue is empty, the file clean.
    expect(
      new Database(s.dir.file("queue/ev.db"), { readonly: true }).query("SELECT count(*) AS n FROM outbox_queue").get(),
    ).toEqual({ n: 0 });
    expect(verifyFile(s.dir.file("queue/ev.db")).ok).toBe(true);
  });

  test("a poison row in one tenant holds that tenant (its lane) alone; after the fix and a kick it lands once", async () => {
    const s = await sqliteTemplate({}, [{ name: "ev", lanes: 4 }]);
    for (const t of ["acme", "globex"]) s.make(t);
    s.producer.push("ev", INSERT, ["acme", -1], { tenant: "acme", key: "k1" }); // refused by the CHECK
    for (let n = 1; n <= 4; n++)
      for (const t of ["acme", "globex"]) s.producer.push("ev", INSERT, [t, n], { tenant: t, key: "k1" });
    await waitFor(async () => (await s.svc.runOnce(), s.rows("globex").length === 4), "the other tenant");
    for (let i = 0; i < 3; i++) await s.svc.runOnce();
    expect(s.rows("acme")).toEqual([]);
    const q = new Outbox(s.dir.file("queue/ev.db"), "ev");
    cleanups.push(() => q.close());
    expect(q.head()).toMatchObject({ tenant: "acme", attempts: 1 });
    q.skipHead(q.head()!.seq); // the operator moves the poison aside
    s.svc.retryNow();
    await waitFor(async () => (await s.svc.runOnce(), s.svc.totalPending() === 0), "acme", 20_000);
    expect(s.rows("acme").map(([, n]) => n)).toEqual([1, 2, 3, 4]);
    expect(s.rows("globex").map(([, n]) => n)).toEqual([1, 2, 3, 4]);
  });

  test("a row without a tenant on a template is refused as its own fault, naming the table and the fix, and never sent; the rest goes", async () => {
    const s = await sqliteTemplate();
    s.make("acme");
    s.producer.push("ev", INSERT, ["nobody", 1]);
    s.producer.push("ev", INSERT, ["acme", 1], { tenant: "acme" });
    await waitFor(async () => (await s.svc.runOnce(), s.rows("acme").length === 1), "acme");
    expect(
      s.log.has(
        /seq 1 of table "ev" names no tenant, but target app\.r delivers each row to its tenant's database.*push it with \{ tenant \}/,
      ),
    ).toBe(true);
    const q = new Outbox(s.dir.file("queue/ev.db"), "ev");
    cleanups.push(() => q.close());
    expect(q.head()).toMatchObject({ seq: 1, attempts: 1 });
    expect(
      fs
        .readdirSync(s.dir.file("remote"))
        .filter((f) => f.endsWith(".db"))
        .sort(),
    ).toEqual(["acme.db"]);
  });
});

test("a row for a tenant on a target that is one database is refused as its own fault, never delivered to it", async () => {
  const dir = tempDirCleanedBy(cleanups);
  const remote = dir.file("remote.db");
  const db = new Database(remote, { create: true });
  db.run("PRAGMA journal_mode = WAL");
  db.run(SCHEMA);
  db.close();
  const config = defineConfig({
    app: {
      app: {
        dbDir: dir.file("queue"),
        ...FAST,
        backoffUnitSeconds: 30,
        db: { r: { writer: "sqlite", connection: { path: remote }, tables: ["ev"] } },
      },
    },
  });
  const log = memoryLogger();
  const svc = new OutboxSyncService(config, await createWriters(config), { logger: log });
  cleanups.push(() => svc.stop(2000));
  new SQLMiddleware({ dbDir: dir.file("queue") }).push("ev", INSERT, ["acme", 1], { tenant: "acme" });
  await waitFor(
    async () => (await svc.runOnce(), log.has(/is for tenant "acme", but target app\.r is one database/)),
    "the refusal",
  );
  const check = new Database(remote, { readonly: true });
  cleanups.push(() => check.close());
  expect(check.query("SELECT count(*) AS c FROM ev").get()).toEqual({ c: 0 });
});

test("PostgreSQL: a tenant whose database does not exist is held alone (misconfigured); once it is created and kicked, its rows land once", async () => {
  const a = await createServerDb("postgres", "sqloutbox_tenant");
  cleanups.push(() => a.drop());
  const base = a.name.replace(/_[^_]*$/, ""); // tenant "x" is database `${base}_x`
  const present = a.name.slice(base.length + 1);
  const absent = `${present}x`; // a tenant whose database is missing (unique to this run)
  const missing = `${base}_${absent}`;
  await a.sql.unsafe("CREATE TABLE ev (pos bigserial PRIMARY KEY, k text NOT NULL, n integer NOT NULL)");
  const dir = tempDirCleanedBy(cleanups);
  const config = defineConfig({
    app: {
      app: {
        dbDir: dir.file("queue"),
        ...FAST,
        outageBackoffCapMinutes: 1, // the missing tenant stays held until the test's kick
        db: { r: { writer: "postgres", connection: { url: `${PG_BASE_URL}/${base}_{tenant}` }, tables: ["ev"] } },
      },
    },
  });
  const log = memoryLogger();
  const svc = new OutboxSyncService(config, await createWriters(config), { logger: log });
  cleanups.push(() => svc.stop(2000));
  const producer = new SQLMiddleware({ dbDir: dir.file("queue") });
  for (let n = 1; n <= 3; n++)
    for (const t of [present, absent])
      producer.push("ev", "INSERT INTO ev (k, n) VALUES (?, ?)", [t, n], { tenant: t });
  const landed = async (sql: typeof a.sql) =>
    (await sql.unsafe("SELECT n FROM ev ORDER BY pos").values()).map((r: unknown[]) => Number(r[0]));
  await waitFor(async () => (await svc.runOnce(), (await landed(a.sql)).length === 3), "the present tenant");
  const held = svc.targets()[0]!.view().tenants!.held;
  expect(held).toMatchObject([{ tenant: absent, reason: "misconfigured" }]);
  expect(held[0]!.message).toContain(missing); // where: the database, never a password
  const admin = new Bun.SQL(`${PG_BASE_URL}/postgres`);
  cleanups.push(() => admin.close());
  await admin.unsafe(`CREATE DATABASE ${missing}`);
  const created = new Bun.SQL(`${PG_BASE_URL}/${missing}`);
  cleanups.push(async () => {
    await created.close();
    await admin.unsafe(`DROP DATABASE IF EXISTS ${missing} WITH (FORCE)`);
  });
  await created.unsafe("CREATE TABLE ev (pos bigserial PRIMARY KEY, k text NOT NULL, n integer NOT NULL)");
  svc.retryNow();
  await waitFor(async () => (await svc.runOnce(), svc.totalPending() === 0), "the created tenant", 20_000);
  expect(await landed(created)).toEqual([1, 2, 3]);
  expect(await landed(a.sql)).toEqual([1, 2, 3]);
});
