import fs from "node:fs";
import { Database } from "bun:sqlite";
import { afterEach, describe, expect, test } from "bun:test";
import { OutboxSyncService } from "../src/drain/service.ts";
import { acquireLock } from "../src/drain/lock.ts";
import { LockedError, StorageError } from "../src/errors.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { createWriter } from "../src/writers/registry.ts";
import { FaultyWriter, memoryLogger, oneApp, waitFor } from "./fixtures/drain-harness.ts";
import { createPgDb, type PgTestDb } from "./support/pg.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";

let cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.reverse()) await c();
  cleanups = [];
  closeSharedOutboxes(); // producers' per-process Outbox handles on the removed temp dirs
});

function tmp(): TempDir {
  const t = makeTempDir();
  cleanups.push(() => t.cleanup());
  return t;
}
async function pg(): Promise<PgTestDb> {
  const db = await createPgDb();
  cleanups.push(() => db.drop());
  return db;
}
function remoteSqlite(path: string, ddl: string[]): Database {
  const db = new Database(path, { create: true });
  db.run("PRAGMA journal_mode = WAL");
  for (const s of ddl) db.run(s);
  cleanups.push(() => db.close());
  return db;
}
function service(...args: ConstructorParameters<typeof OutboxSyncService>): OutboxSyncService {
  const s = new OutboxSyncService(...args);
  cleanups.push(() => s.stop(2000));
  return s;
}

describe("delivery", () => {
  test("delivers several thousand rows across tables and two targets, in order per table", async () => {
    const dir = tmp();
    const remote = remoteSqlite(dir.file("remote.db"), [
      "CREATE TABLE events (id INTEGER NOT NULL, body TEXT)",
      "CREATE TABLE metrics (name TEXT NOT NULL, value REAL)",
    ]);
    const db = await pg();
    await db.sql.unsafe("CREATE TABLE orders (id BIGINT PRIMARY KEY, amount NUMERIC)");
    await db.sql.unsafe("CREATE TABLE balance (k TEXT PRIMARY KEY, v BIGINT)");
    const config = oneApp(dir.file("outbox"), {
      local: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["events", "metrics"] },
      pg: { writer: "postgres", connection: { url: db.url }, tables: ["orders", "balance"] },
    }, { batchSize: 300 });
    const writers = {
      "app.local": createWriter("sqlite", { path: dir.file("remote.db") }),
      "app.pg": createWriter("postgres", { url: db.url }),
    };
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    const svc = service(config, writers);
    const N = 1500;
    const eventSeqs: number[] = [];
    producer.push("balance", "INSERT INTO balance (k, v) VALUES (?, ?)", ["total", 0]);
    await svc.start();
    for (let i = 0; i < N; i++) {
      eventSeqs.push(producer.push("events", "INSERT INTO events (id, body) VALUES (?, ?)", [i, `e${i}`]));
      if (i % 3 === 0) producer.pushMany("metrics", [["INSERT INTO metrics (name, value) VALUES (?, ?)", [`m${i}`, i / 2]]]);
      producer.push("orders", "INSERT INTO orders (id, amount) VALUES (?, ?)", [i, i * 1.5]);
      producer.push("balance", "UPDATE balance SET v = ? WHERE k = ?", [i + 1, "total"]);
      if (i % 250 === 0) await Bun.sleep(1); // let the drain interleave with the producer
    }
    await waitFor(() => svc.totalPending() === 0, "the queues to drain");
    await svc.stop();

    const events = remote.query<{ id: number; outbox_seq: number }, []>("SELECT id, outbox_seq FROM events ORDER BY outbox_seq").all();
    expect(events.map((r) => r.id)).toEqual([...Array(N).keys()]);
    expect(events.map((r) => r.outbox_seq)).toEqual(eventSeqs);
    expect(remote.query<{ n: number }, []>("SELECT count(*) AS n FROM metrics").get()!.n).toBe(N / 3);
    const orders = await db.sql.unsafe("SELECT id::int AS id FROM orders ORDER BY outbox_seq");
    expect(orders.map((r: { id: number }) => r.id)).toEqual([...Array(N).keys()]);
    // Every UPDATE was applied in seq order: the last one wins, none was dropped or reordered.
    const [bal] = await db.sql.unsafe("SELECT v::int AS v FROM balance WHERE k = 'total'");
    expect(bal.v).toBe(N);
  });

  test("a poison row holds its table (and only it), dead-letters after max_attempts, and replays once fixed", async () => {
    const dir = tmp();
    const remote = remoteSqlite(dir.file("remote.db"), [
      "CREATE TABLE a (id INTEGER NOT NULL CHECK (id >= 0))",
      "CREATE TABLE b (id INTEGER NOT NULL)",
    ]);
    const config = oneApp(dir.file("outbox"), {
      r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["a", "b"] },
    }, { maxAttempts: 3, backoffUnitSeconds: 0.02 });
    const log = memoryLogger();
    const svc = service(config, { "app.r": createWriter("sqlite", { path: dir.file("remote.db") }) }, { logger: log });
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    producer.push("a", "INSERT INTO a (id) VALUES (?)", [1]);
    const poison = producer.push("a", "INSERT INTO a (id) VALUES (?)", [-5]);
    producer.push("a", "INSERT INTO a (id) VALUES (?)", [3]);
    await svc.start();
    const aq = new Outbox(dir.file("outbox/a.db"), "a");
    cleanups.push(() => aq.close());

    // While the poison head backs off, table b keeps flowing and a holds everything behind it.
    await waitFor(() => aq.head()?.seq === poison && aq.head()!.attempts >= 1, "the poison row to be charged");
    for (let i = 0; i < 50; i++) producer.push("b", "INSERT INTO b (id) VALUES (?)", [i]);
    await waitFor(() => remote.query("SELECT 1 FROM b").all().length === 50, "b to flow past a's poison row");
    const held = aq.head();
    expect(held?.seq).toBe(poison);
    expect(held?.lastErrorClass).toContain("CONSTRAINT");
    expect(remote.query<{ id: number }, []>("SELECT id FROM a ORDER BY outbox_seq").all().map((r) => r.id)).toEqual([1]);

    await waitFor(() => aq.deadCount() === 1, "the poison row to be dead-lettered");
    await waitFor(() => aq.pendingCount() === 0, "a to advance past the dead letter");
    const dead = aq.getDead(poison)!;
    expect(dead.reason).toBe("max_attempts");
    expect(dead.attempts).toBe(3);
    expect(remote.query<{ id: number }, []>("SELECT id FROM a ORDER BY outbox_seq").all().map((r) => r.id)).toEqual([1, 3]);
    expect(log.has(/dead-lettered seq \d+ of namespace "a"/)).toBe(true);

    // The operator fixes the cause and replays: the row lands at the tail, once.
    remote.run("CREATE TABLE a2 AS SELECT * FROM a");
    remote.run("DROP TABLE a");
    remote.run("ALTER TABLE a2 RENAME TO a");
    remote.run("CREATE UNIQUE INDEX idx_a_outbox_seq ON a (outbox_seq) WHERE outbox_seq != 0");
    const replayed = aq.replayDead(poison);
    await waitFor(() => aq.pendingCount() === 0, "the replayed row to be delivered");
    const rows = remote.query<{ id: number; outbox_seq: number }, []>("SELECT id, outbox_seq FROM a ORDER BY outbox_seq").all();
    expect(rows.map((r) => r.id)).toEqual([1, 3, -5]);
    expect(rows.at(-1)!.outbox_seq).toBe(replayed);
  });

  test("an undecodable payload and an unsupported statement are dead-lettered at once, the rest flows", async () => {
    const dir = tmp();
    const remote = remoteSqlite(dir.file("remote.db"), ["CREATE TABLE t (id INTEGER)"]);
    const config = oneApp(dir.file("outbox"), { r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["t"] } });
    fs.mkdirSync(dir.file("outbox"));
    const q = new Outbox(dir.file("outbox/t.db"), "t");
    cleanups.push(() => q.close());
    const bad1 = q.enqueue("INSERT INTO t (id) VALUES (?)", "{not json");
    const bad2 = q.enqueue("INSERT INTO t (id) SELECT 1", "[]");
    q.enqueue("INSERT INTO t (id) VALUES (?)", "[7]");
    const svc = service(config, { "app.r": createWriter("sqlite", { path: dir.file("remote.db") }) });
    const report = await svc.runOnce();
    expect(report.deadLettered).toBe(2);
    expect(report.delivered).toBe(1);
    expect(q.getDead(bad1)!.reason).toBe("undecodable");
    expect(q.getDead(bad1)!.attempts).toBe(0);
    expect(q.getDead(bad2)!.reason).toBe("unsupported_statement");
    expect(remote.query<{ id: number }, []>("SELECT id FROM t").all()).toEqual([{ id: 7 }]);
  });

  test("a lost row (chain gap) holds its table, is reported once, and delivery resumes once the gap is bridged", async () => {
    const dir = tmp();
    const remote = remoteSqlite(dir.file("remote.db"), ["CREATE TABLE t (id INTEGER)"]);
    fs.mkdirSync(dir.file("outbox"));
    const q = new Outbox(dir.file("outbox/t.db"), "t");
    cleanups.push(() => q.close());
    const seqs = [1, 2, 3, 4].map((id) => q.enqueue("INSERT INTO t (id) VALUES (?)", `[${id}]`));
    const raw = new Database(dir.file("outbox/t.db"));
    raw.run("DELETE FROM outbox_queue WHERE seq = ?", [seqs[1]!]); // lost: neither delivered nor dead-lettered
    raw.close();
    const log = memoryLogger();
    const config = oneApp(dir.file("outbox"), { r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["t"] } }, { batchSize: 2 });
    const svc = service(config, { "app.r": createWriter("sqlite", { path: dir.file("remote.db") }) }, { logger: log });
    for (let i = 0; i < 5; i++) await svc.runOnce();
    expect(remote.query<{ id: number }, []>("SELECT id FROM t").all()).toEqual([{ id: 1 }]);
    expect(q.pendingCount()).toBe(2);
    expect(q.deadCount()).toBe(0);
    expect(log.lines.filter((l) => l.includes(`seq ${seqs[2]} links to prev_seq ${seqs[1]}`)).length).toBe(1);
    // The operator accepts the loss (the reference's recovery recipe): the gap is bridged.
    const fix = new Database(dir.file("outbox/t.db"));
    fix.run("INSERT INTO outbox_sync_log (seq, namespace, synced_at) VALUES (?, 't', '2026-01-01T00:00:00.000000+00:00')", [seqs[1]!]);
    fix.close();
    await waitFor(async () => (await svc.runOnce(), q.pendingCount() === 0), "delivery after the gap is bridged");
    expect(remote.query<{ id: number }, []>("SELECT id FROM t ORDER BY outbox_seq").all().map((r) => r.id)).toEqual([1, 3, 4]);
  });

  test("a batch whose outcome was lost after the remote commit is settled from the remote high-water mark: no duplicate, nothing resent", async () => {
    const dir = tmp();
    const db = await pg();
    await db.sql.unsafe("CREATE TABLE t (id BIGINT NOT NULL, note TEXT)");
    const config = oneApp(dir.file("outbox"), { r: { writer: "postgres", connection: { url: db.url }, tables: ["t"] } });
    const writer = new FaultyWriter(createWriter("postgres", { url: db.url }));
    const svc = service(config, { "app.r": writer });
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    for (let i = 0; i < 100; i++) producer.push("t", "INSERT INTO t (id, note) VALUES (?, ?)", [i, "x"]);
    await svc.runOnce(); // startup (schema + seed) and the first 100 rows, confirmed
    for (let i = 100; i < 200; i++) producer.push("t", "INSERT INTO t (id, note) VALUES (?, ?)", [i, "x"]);
    // An INSERT and an UPDATE of the same row in one batch, on a table without a key: resending
    // the INSERT after the UPDATE moved the row's outbox_seq on would land a second copy.
    producer.push("t", "UPDATE t SET note = ? WHERE id = ?", ["updated", 150]);
    // The batch commits remotely but the drain never learns: exactly a crash before confirm.
    writer.faults.push("commit-then-throw");
    const first = await svc.runOnce();
    expect(first.outages).toEqual(["app.r"]);
    const q = new Outbox(dir.file("outbox/t.db"), "t");
    cleanups.push(() => q.close());
    expect(q.pendingCount()).toBe(101);
    expect(q.head()!.attempts).toBe(0);
    expect(q.head()!.sentThrough).toBe(q.fetchUnsynced(1000).at(-1)!.seq);
    await waitFor(async () => (await svc.runOnce(), svc.totalPending() === 0), "the settlement");
    const [{ n, d, u }] = await db.sql.unsafe(
      "SELECT count(*)::int AS n, count(DISTINCT outbox_seq)::int AS d, sum(CASE WHEN note = 'updated' THEN 1 ELSE 0 END)::int AS u FROM t",
    );
    expect({ n, d, u }).toEqual({ n: 200, d: 200, u: 1 });
    expect(q.deadCount()).toBe(0);
    expect(writer.statements.filter((s) => s.seq > 0).length).toBe(100 + 101); // the second batch went once
  });

  test("after settling an interrupted batch, pending rows still at or below the remote MAX are moved above it, not absorbed", async () => {
    const dir = tmp();
    const remote = remoteSqlite(dir.file("remote.db"), ["CREATE TABLE t (id INTEGER NOT NULL)"]);
    const config = oneApp(dir.file("outbox"), { r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["t"] } });
    const prep = service(config, { "app.r": createWriter("sqlite", { path: dir.file("remote.db") }) });
    await prep.runOnce(); // auto_schema
    await prep.stop();
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    for (let id = 1; id <= 20; id++) producer.push("t", "INSERT INTO t (id) VALUES (?)", [id]);
    const q = new Outbox(dir.file("outbox/t.db"), "t");
    cleanups.push(() => q.close());
    // Our rows 1..5 were sent and committed before a crash; seqs 6..50 came from another queue.
    q.recordAttempt(1, new Date(), 5);
    for (let seq = 1; seq <= 50; seq++) remote.run("INSERT INTO t (id, outbox_seq) VALUES (?, ?)", [seq <= 5 ? seq : 1000 + seq, seq]);
    const log = memoryLogger();
    const svc = service(config, { "app.r": createWriter("sqlite", { path: dir.file("remote.db") }) }, { logger: log });
    await waitFor(async () => (await svc.runOnce(), svc.totalPending() === 0), "delivery");
    const ours = remote.query<{ id: number; s: number }, []>("SELECT id, outbox_seq AS s FROM t WHERE id < 1000 ORDER BY outbox_seq").all();
    expect(ours.map((r) => r.id)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    expect(ours.map((r) => r.s)).toEqual([1, 2, 3, 4, 5, ...Array.from({ length: 15 }, (_, i) => 51 + i)]);
    expect(remote.query("SELECT count(*) AS n FROM t").get()).toEqual({ n: 65 });
    expect(log.has(/moved 15 pending rows from seq 6\.\.20 to 51\.\.65/)).toBe(true);
    expect(q.listDead().map((d) => d.seq)).toEqual(Array.from({ length: 15 }, (_, i) => 6 + i));
  });

  test("a queue that has delivered before is not resequenced: rows an earlier drain applied without confirming are absorbed, not duplicated", async () => {
    const dir = tmp();
    const remote = remoteSqlite(dir.file("remote.db"), ["CREATE TABLE t (id INTEGER NOT NULL)"]);
    const config = oneApp(dir.file("outbox"), { r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["t"] } });
    const prep = service(config, { "app.r": createWriter("sqlite", { path: dir.file("remote.db") }) });
    await prep.runOnce(); // auto_schema
    await prep.stop();
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    for (let id = 1; id <= 20; id++) producer.push("t", "INSERT INTO t (id) VALUES (?)", [id]);
    // What the reference's drain leaves when it dies after the remote commit of 6..15: rows 1..5
    // confirmed, 6..15 applied remotely but still pending, and no sent_through mark.
    const q = new Outbox(dir.file("outbox/t.db"), "t");
    cleanups.push(() => q.close());
    q.confirm([1, 2, 3, 4, 5]);
    for (let seq = 1; seq <= 15; seq++) remote.run("INSERT INTO t (id, outbox_seq) VALUES (?, ?)", [seq, seq]);
    const log = memoryLogger();
    const svc = service(config, { "app.r": createWriter("sqlite", { path: dir.file("remote.db") }) }, { logger: log });
    await waitFor(async () => (await svc.runOnce(), svc.totalPending() === 0), "delivery");
    const rows = remote.query<{ id: number; s: number }, []>("SELECT id, outbox_seq AS s FROM t ORDER BY outbox_seq").all();
    expect(rows.map((r) => r.id)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    expect(rows.map((r) => r.s)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    expect(q.listDead()).toEqual([]);
    expect(log.has(/a queue that has delivered before: treating those rows as applied by an earlier drain/)).toBe(true);
  });

  test("seeds the local sequence above the remote MAX(outbox_seq)", async () => {
    const dir = tmp();
    const db = await pg();
    await db.sql.unsafe("CREATE TABLE t (id BIGINT NOT NULL, outbox_seq BIGINT NOT NULL DEFAULT 0)");
    await db.sql.unsafe("CREATE UNIQUE INDEX idx_t_outbox_seq ON t (outbox_seq) WHERE outbox_seq != 0");
    await db.sql.unsafe("INSERT INTO t (id, outbox_seq) VALUES (1, 5000), (2, 4999)");
    const config = oneApp(dir.file("outbox"), { r: { writer: "postgres", connection: { url: db.url }, tables: ["t"] } });
    const svc = service(config, { "app.r": createWriter("postgres", { url: db.url }) });
    await svc.start();
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    const seq = producer.push("t", "INSERT INTO t (id) VALUES (?)", [3]);
    expect(seq).toBeGreaterThan(5000);
    await waitFor(() => svc.totalPending() === 0, "delivery");
    const rows = await db.sql.unsafe("SELECT id::int AS id, outbox_seq::int AS s FROM t ORDER BY outbox_seq");
    expect(rows.map((r: { id: number }) => r.id)).toEqual([2, 1, 3]);
  });

  test("a remote table that does not exist is one warning line at startup; the other tables are seeded and flow", async () => {
    const dir = tmp();
    const db = await pg();
    await db.sql.unsafe("CREATE TABLE present (id BIGINT NOT NULL, outbox_seq BIGINT NOT NULL DEFAULT 0)");
    await db.sql.unsafe("INSERT INTO present (id, outbox_seq) VALUES (1, 700)");
    const config = oneApp(dir.file("outbox"), { r: { writer: "postgres", connection: { url: db.url }, tables: ["present", "absent"] } });
    const log = memoryLogger();
    const svc = service(config, { "app.r": createWriter("postgres", { url: db.url }) }, { logger: log });
    await svc.start();
    const warnings = log.lines.filter((l) => l.startsWith("warn") || l.startsWith("error"));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/table "absent" on app\.r: local sequence not seeded.*auto_schema failed.*MAX\(outbox_seq\) failed/);
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    expect(producer.push("present", "INSERT INTO present (id) VALUES (?)", [2])).toBeGreaterThan(700);
    await waitFor(() => svc.pendingCount().present === 0, "delivery to the present table");
  });

  test("a drain without ALTER rights seeds from a column its DBA added, and warns once that auto_schema could not run", async () => {
    const dir = tmp();
    const db = await pg();
    const role = `drain_${crypto.randomUUID().replaceAll("-", "").slice(0, 10)}`;
    await db.sql.unsafe("CREATE TABLE t (id BIGINT NOT NULL, outbox_seq BIGINT NOT NULL DEFAULT 0)");
    await db.sql.unsafe("CREATE UNIQUE INDEX idx_t_outbox_seq ON t (outbox_seq) WHERE outbox_seq != 0");
    await db.sql.unsafe("INSERT INTO t (id, outbox_seq) VALUES (1, 500)");
    await db.sql.unsafe(`CREATE ROLE ${role} LOGIN`);
    cleanups.push(() => db.sql.unsafe(`DROP OWNED BY ${role}; DROP ROLE ${role}`).catch(() => {}));
    await db.sql.unsafe(`GRANT SELECT, INSERT, UPDATE ON t TO ${role}`);
    const url = db.url.replace("postgres@", `${role}@`);
    const config = oneApp(dir.file("outbox"), { r: { writer: "postgres", connection: { url }, tables: ["t"] } });
    const log = memoryLogger();
    const svc = service(config, { "app.r": createWriter("postgres", { url }) }, { logger: log });
    await svc.start();
    const warnings = log.lines.filter((l) => l.startsWith("warn") || l.startsWith("error"));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/table "t" on app\.r: auto_schema failed: .*owner.*check that its unique outbox_seq index exists/);
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    expect(producer.push("t", "INSERT INTO t (id) VALUES (?)", [2])).toBeGreaterThan(500);
    await waitFor(() => svc.totalPending() === 0, "delivery");
  });

  test("auto_schema adds outbox_seq and its index to an existing remote table, and a second start tolerates them", async () => {
    const dir = tmp();
    const db = await pg();
    await db.sql.unsafe("CREATE TABLE t (id BIGINT NOT NULL)");
    await db.sql.unsafe("INSERT INTO t (id) VALUES (100)");
    const config = oneApp(dir.file("outbox"), { r: { writer: "postgres", connection: { url: db.url }, tables: ["t"] } });
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    for (const round of [1, 2]) {
      const log = memoryLogger();
      const svc = new OutboxSyncService(config, { "app.r": createWriter("postgres", { url: db.url }) }, { logger: log });
      await svc.start();
      producer.push("t", "INSERT INTO t (id) VALUES (?)", [round]);
      await waitFor(() => svc.totalPending() === 0, `delivery in round ${round}`);
      await svc.stop();
      expect(log.lines.filter((l) => l.startsWith("warn") || l.startsWith("error"))).toEqual([]);
    }
    const cols = await db.sql.unsafe("SELECT column_name FROM information_schema.columns WHERE table_name = 't' ORDER BY column_name");
    expect(cols.map((c: { column_name: string }) => c.column_name)).toEqual(["id", "outbox_seq"]);
    const idx = await db.sql.unsafe("SELECT indexname FROM pg_indexes WHERE tablename = 't'");
    expect(idx.map((i: { indexname: string }) => i.indexname)).toEqual(["idx_t_outbox_seq"]);
    const rows = await db.sql.unsafe("SELECT id::int AS id, outbox_seq::int AS s FROM t ORDER BY id");
    expect(rows.map((r: { id: number }) => r.id)).toEqual([1, 2, 100]);
    expect(rows.find((r: { id: number }) => r.id === 100).s).toBe(0);
  });

  test("a second drain on the same db_dir fails fast with LockedError", async () => {
    const dir = tmp();
    const config = oneApp(dir.file("outbox"), { r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["t"] } });
    const first = service(config, { "app.r": createWriter("sqlite", { path: dir.file("remote.db") }) });
    await first.start();
    const second = new OutboxSyncService(config, { "app.r": createWriter("sqlite", { path: dir.file("remote2.db") }) });
    const error = await second.start().then(() => null, (e: unknown) => e);
    expect(error).toBeInstanceOf(LockedError);
    expect((error as LockedError).code).toBe("E_LOCKED");
    expect((error as LockedError).lockFile).toBe(`${dir.file("outbox")}/.sqloutbox.lock`);
    await first.stop();
    // Released on stop: a new drain can take over.
    const third = service(config, { "app.r": createWriter("sqlite", { path: dir.file("remote.db") }) });
    await third.start();
  });

  test("a queue file that is not a database fails start() with a StorageError naming it, and releases the lock", async () => {
    const dir = tmp();
    fs.mkdirSync(dir.file("outbox"));
    fs.writeFileSync(dir.file("outbox/t.db"), "this is not a database ".repeat(100));
    const config = oneApp(dir.file("outbox"), { r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["t"] } });
    const svc = new OutboxSyncService(config, { "app.r": createWriter("sqlite", { path: dir.file("remote.db") }) });
    const error = await svc.start().then(() => null, (e: unknown) => e);
    expect(error).toBeInstanceOf(StorageError);
    expect((error as StorageError).code).toBe("E_STORAGE");
    expect((error as StorageError).message).toContain(dir.file("outbox/t.db"));
    acquireLock(dir.file("outbox")).release(); // not left locked behind
  });

  test("one writeBatch per target per cycle carries every ready table, up to batch_size rows each", async () => {
    const dir = tmp();
    const remote = remoteSqlite(dir.file("remote.db"), ["x", "y", "z"].map((t) => `CREATE TABLE ${t} (id INTEGER)`));
    const config = oneApp(dir.file("outbox"), { r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["x", "y", "z"] } }, { batchSize: 4, tableFlushThreshold: 3, tableMaxWait: 60 });
    const writer = new FaultyWriter(createWriter("sqlite", { path: dir.file("remote.db") }));
    const svc = service(config, { "app.r": writer });
    await svc.runOnce(); // startup
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    for (let i = 0; i < 6; i++) producer.push("x", "INSERT INTO x (id) VALUES (?)", [i]);
    for (let i = 0; i < 3; i++) producer.push("y", "INSERT INTO y (id) VALUES (?)", [i]);
    producer.push("z", "INSERT INTO z (id) VALUES (?)", [0]); // below the threshold, not old enough: not ready
    const before = writer.batches;
    const report = await svc.runOnce();
    expect(writer.batches - before).toBe(1);
    expect(report.delivered).toBe(7);
    expect(report.more).toBe(true); // x had more than batch_size
    const namespaces = writer.statements.filter((st) => st.seq > 0).map((st) => st.namespace);
    expect(namespaces).toEqual(["x", "x", "x", "x", "y", "y", "y"]);
    expect(remote.query("SELECT 1 FROM z").all()).toEqual([]);
  });
});
