import fs from "node:fs";
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { OutboxSyncService } from "../src/drain/service.ts";
import { drainHome } from "../src/drain/home.ts";
import { readDrainState } from "../src/drain/state-file.ts";
import { LockedError } from "../src/errors.ts";
import { verifyFile } from "../src/outbox/inspect.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { SQLMiddleware } from "../src/outbox/middleware.ts";
import { createWriter } from "../src/writers/registry.ts";
import type { OutboxWriter } from "../src/writers/writer.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { FaultyWriter, memoryLogger, oneApp } from "./support/drain-harness.ts";
import { createPgDb, type ServerDb } from "./support/server-db.ts";
import type { TempDir } from "./support/tmp.ts";
import { waitFor } from "./support/wait.ts";
import { drainSide } from "./support/queue.ts";
import { QueueForDrain } from "../src/outbox/queue-for-drain.ts";

const cleanups = cleanupsAfterEach();
const tmp = (): TempDir => tempDirCleanedBy(cleanups);
async function pg(): Promise<ServerDb> {
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
    await db.sql.unsafe("CREATE TABLE orders (pos BIGSERIAL, id BIGINT PRIMARY KEY, amount NUMERIC)");
    await db.sql.unsafe("CREATE TABLE balance (k TEXT PRIMARY KEY, v BIGINT)");
    const config = oneApp(
      dir.file("outbox"),
      {
        local: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["events", "metrics"] },
        pg: { writer: "postgres", connection: { url: db.url }, tables: ["orders", "balance"] },
      },
      { batchSize: 300 },
    );
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
      if (i % 3 === 0)
        producer.pushMany("metrics", [["INSERT INTO metrics (name, value) VALUES (?, ?)", [`m${i}`, i / 2]]]);
      producer.push("orders", "INSERT INTO orders (id, amount) VALUES (?, ?)", [i, i * 1.5]);
      producer.push("balance", "UPDATE balance SET v = ? WHERE k = ?", [i + 1, "total"]);
      if (i % 250 === 0) await Bun.sleep(1); // let the drain interleave with the producer
    }
    await waitFor(() => svc.totalPending() === 0, "the queues to drain");
    await svc.stop();

    // Rowid order is the order the remote inserted them in: the seq order, each exactly once.
    const events = remote.query<{ id: number }, []>("SELECT id FROM events ORDER BY rowid").all();
    expect(events.map((r) => r.id)).toEqual([...Array(N).keys()]);
    expect(remote.query<{ n: number }, []>("SELECT count(*) AS n FROM metrics").get()!.n).toBe(N / 3);
    // The ledger accounts for every table: its through is the last seq delivered.
    const origin = new Outbox(dir.file("outbox/events.db"), "events");
    cleanups.push(() => origin.close());
    expect(
      remote.query("SELECT through FROM sqloutbox_ledger WHERE origin = ? AND namespace = 'events'").get(origin.origin),
    ).toEqual({ through: eventSeqs.at(-1) });
    const orders = await db.sql.unsafe("SELECT id::int AS id FROM orders ORDER BY pos");
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
    const config = oneApp(
      dir.file("outbox"),
      {
        r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["a", "b"] },
      },
      { maxAttempts: 3, backoffUnitSeconds: 0.02 },
    );
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
    expect(
      remote
        .query<{ id: number }, []>("SELECT id FROM a ORDER BY rowid")
        .all()
        .map((r) => r.id),
    ).toEqual([1]);

    await waitFor(() => aq.deadCount() === 1, "the poison row to be dead-lettered");
    await waitFor(() => aq.pendingCount() === 0, "a to advance past the dead letter");
    const dead = aq.getDead(poison)!;
    expect(dead.reason).toBe("max_attempts");
    expect(dead.attempts).toBe(3);
    expect(
      remote
        .query<{ id: number }, []>("SELECT id FROM a ORDER BY rowid")
        .all()
        .map((r) => r.id),
    ).toEqual([1, 3]);
    expect(log.has(/dead-lettered seq \d+ of namespace "a"/)).toBe(true);

    // The operator fixes the cause and replays: the row lands at the tail, once.
    remote.run("CREATE TABLE a2 AS SELECT * FROM a");
    remote.run("DROP TABLE a");
    remote.run("ALTER TABLE a2 RENAME TO a");
    const replayed = aq.replayDead(poison);
    await waitFor(() => aq.pendingCount() === 0, "the replayed row to be delivered");
    const rows = remote.query<{ id: number }, []>("SELECT id FROM a ORDER BY rowid").all();
    expect(rows.map((r) => r.id)).toEqual([1, 3, -5]);
    expect(remote.query("SELECT through FROM sqloutbox_ledger WHERE namespace = 'a'").get()).toEqual({
      through: replayed,
    });
  });

  test("an undecodable payload and an unsupported statement are dead-lettered at once, the rest flows", async () => {
    const dir = tmp();
    const remote = remoteSqlite(dir.file("remote.db"), ["CREATE TABLE t (id INTEGER)"]);
    const config = oneApp(dir.file("outbox"), {
      r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["t"] },
    });
    fs.mkdirSync(dir.file("outbox"));
    const q = new Outbox(dir.file("outbox/t.db"), "t");
    cleanups.push(() => q.close());
    const bad1 = q.enqueue("INSERT INTO t (id) VALUES (?)", "{not json");
    const bad2 = q.enqueue("INSERT INTO t (id) VALUES (1); DROP TABLE t", "[]"); // queued before push refused it
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
    const config = oneApp(
      dir.file("outbox"),
      { r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["t"] } },
      { batchSize: 2 },
    );
    const svc = service(config, { "app.r": createWriter("sqlite", { path: dir.file("remote.db") }) }, { logger: log });
    for (let i = 0; i < 5; i++) await svc.runOnce();
    expect(remote.query<{ id: number }, []>("SELECT id FROM t").all()).toEqual([{ id: 1 }]);
    expect(q.pendingCount()).toBe(2);
    expect(q.deadCount()).toBe(0);
    expect(log.lines.filter((l) => l.includes(`seq ${seqs[2]} links to prev_seq ${seqs[1]}`)).length).toBe(1);
    // status and the metrics show it as a held table, as they show every other stop.
    expect(svc.targets()[0]!.tables[0]!.view().held).toMatchObject({
      reason: "chain gap",
      message: expect.stringContaining(`seq ${seqs[2]} links to prev_seq ${seqs[1]}`),
    });
    // The operator accepts the loss (the reference's recovery recipe): the gap is bridged, then `kick`.
    const fix = new Database(dir.file("outbox/t.db"));
    fix.run(
      "INSERT INTO outbox_delivered (last_seq, namespace, first_seq, rows, first_prev, first_at, last_at) VALUES (?1, 't', ?1, 1, NULL, '2026-01-01T00:00:00.000000+00:00', '2026-01-01T00:00:00.000000+00:00')",
      [seqs[1]!],
    );
    fix.close();
    svc.retryNow();
    await waitFor(async () => (await svc.runOnce(), q.pendingCount() === 0), "delivery after the gap is bridged");
    expect(
      remote
        .query<{ id: number }, []>("SELECT id FROM t ORDER BY rowid")
        .all()
        .map((r) => r.id),
    ).toEqual([1, 3, 4]);
    expect(svc.targets()[0]!.tables[0]!.view().held).toBeNull();
  });

  test("a batch whose outcome was lost after the remote commit is settled from the ledger: no duplicate, nothing resent", async () => {
    const dir = tmp();
    const db = await pg();
    await db.sql.unsafe("CREATE TABLE t (id BIGINT NOT NULL, note TEXT)");
    const config = oneApp(dir.file("outbox"), {
      r: { writer: "postgres", connection: { url: db.url }, tables: ["t"] },
    });
    const writer = new FaultyWriter(createWriter("postgres", { url: db.url }));
    const svc = service(config, { "app.r": writer });
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    for (let i = 0; i < 100; i++) producer.push("t", "INSERT INTO t (id, note) VALUES (?, ?)", [i, "x"]);
    await svc.runOnce(); // setup (the ledger) and the first 100 rows, confirmed
    for (let i = 100; i < 200; i++) producer.push("t", "INSERT INTO t (id, note) VALUES (?, ?)", [i, "x"]);
    // An INSERT and an UPDATE of the same row in one batch, on a table without a key: resending
    // both would land a second copy of the row.
    producer.push("t", "UPDATE t SET note = ? WHERE id = ?", ["updated", 150]);
    // The batch commits remotely but the drain never learns: exactly a crash before confirm.
    writer.faults.push("commit-then-throw");
    const first = await svc.runOnce();
    expect(first.outages).toEqual(["app.r"]);
    const q = new Outbox(dir.file("outbox/t.db"), "t");
    cleanups.push(() => q.close());
    expect(q.pendingCount()).toBe(101);
    expect(q.head()!.attempts).toBe(0);
    expect(drainSide(q).sentMark()).toBe(q.fetchUnsynced(1000).at(-1)!.seq);
    await waitFor(async () => (await svc.runOnce(), svc.totalPending() === 0), "the settlement");
    const [{ n, d, u }] = await db.sql.unsafe(
      "SELECT count(*)::int AS n, count(DISTINCT id)::int AS d, sum(CASE WHEN note = 'updated' THEN 1 ELSE 0 END)::int AS u FROM t",
    );
    expect({ n, d, u }).toEqual({ n: 200, d: 200, u: 1 });
    expect(q.deadCount()).toBe(0);
    expect(writer.statements.filter((s) => s.seq > 0).length).toBe(100 + 101); // the second batch went once
    // The settled rows are in the delivered log once: its ranges cover all 201 rows, none twice.
    const ranges = new Database(dir.file("outbox/t.db"), { readonly: true });
    cleanups.push(() => ranges.close());
    expect(
      ranges
        .query<{ rows: number; first: number; last: number }, []>(
          "SELECT sum(rows) AS rows, min(first_seq) AS first, max(last_seq) AS last FROM outbox_delivered",
        )
        .get(),
    ).toEqual({ rows: 201, first: 1, last: 201 });
    expect(verifyFile(dir.file("outbox/t.db"))).toMatchObject({ ok: true, problems: [] }); // the range audit: no overlap, nothing pending inside
  });

  test("a remote table that does not exist holds its table (nothing charged, nothing dead-lettered), the others flow, and it resumes by itself once created", async () => {
    const dir = tmp();
    const db = await pg();
    await db.sql.unsafe("CREATE TABLE present (id BIGINT NOT NULL)");
    const config = oneApp(
      dir.file("outbox"),
      { r: { writer: "postgres", connection: { url: db.url }, tables: ["present", "absent"] } },
      { maxAttempts: 2 },
    );
    const log = memoryLogger();
    let shiftMs = 0; // the drain's clock runs ahead by this much
    const svc = service(
      config,
      { "app.r": createWriter("postgres", { url: db.url }) },
      { logger: log, now: () => Date.now() + shiftMs },
    );
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    for (let i = 0; i < 5; i++) producer.push("absent", "INSERT INTO absent (id) VALUES (?)", [i]);
    for (let i = 0; i < 5; i++) producer.push("present", "INSERT INTO present (id) VALUES (?)", [i]);
    await svc.start();
    await waitFor(() => svc.pendingCount().present === 0, "delivery to the present table");
    await waitFor(() => log.has(/"absent" is held \(remote schema\)/), "the hold to be reported");
    const q = new Outbox(dir.file("outbox/absent.db"), "absent");
    cleanups.push(() => q.close());
    expect(q.pendingCount()).toBe(5);
    expect(q.deadCount()).toBe(0);
    expect(q.head()!.attempts).toBe(0);
    expect(log.lines.filter((l) => l.includes('"absent" is held'))).toHaveLength(1); // said once, not per retry
    await db.sql.unsafe("CREATE TABLE absent (id BIGINT NOT NULL)");
    shiftMs = 2_000; // the first schema retry is 2 s after the hold: move the clock past it instead of waiting
    await waitFor(() => svc.pendingCount().absent === 0, "the held table to resume once its table exists", 20_000);
    const rows = await db.sql.unsafe("SELECT id::int AS id FROM absent ORDER BY id");
    expect(rows.map((r: { id: number }) => r.id)).toEqual([0, 1, 2, 3, 4]);
  });

  test("drain start takes no lock on served tables: a query holding one open does not delay it, nothing is ALTERed", async () => {
    const dir = tmp();
    const db = await pg();
    await db.sql.unsafe("CREATE TABLE t (id BIGINT NOT NULL)");
    // Another session holds ACCESS SHARE on t for the whole test: an ALTER would wait for it.
    const other = await db.sql.reserve();
    cleanups.push(() => other.release());
    await other.unsafe("BEGIN");
    await other.unsafe("SELECT * FROM t");
    const config = oneApp(
      dir.file("outbox"),
      { r: { writer: "postgres", connection: { url: db.url }, tables: ["t"] } },
      { writeTimeout: 3 },
    );
    const svc = service(config, { "app.r": createWriter("postgres", { url: db.url }) });
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    producer.push("t", "INSERT INTO t (id) VALUES (?)", [1]);
    await svc.start();
    await waitFor(() => svc.totalPending() === 0, "delivery while another session holds the table", 5000);
    await other.unsafe("COMMIT");
    const cols = await db.sql.unsafe("SELECT column_name FROM information_schema.columns WHERE table_name = 't'");
    expect(cols.map((c: { column_name: string }) => c.column_name)).toEqual(["id"]);
  });

  test("the state file says what each target delivered since its previous write, and over how long (status's rows/s)", async () => {
    const dir = tmp();
    remoteSqlite(dir.file("remote.db"), ["CREATE TABLE t (id INTEGER)"]);
    const config = oneApp(dir.file("outbox"), {
      r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["t"] },
    });
    const svc = service(config, { "app.r": createWriter("sqlite", { path: dir.file("remote.db") }) });
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    const deliver = async (n: number) => {
      for (let i = 0; i < n; i++) producer.push("t", "INSERT INTO t (id) VALUES (?)", [i]);
      await waitFor(async () => (await svc.runOnce(), svc.totalPending() === 0), `${n} rows delivered`);
    };
    await deliver(3);
    svc.persistState();
    const first = readDrainState(drainHome(dir.file("outbox")).stateFile)!.targets[0]!;
    expect([first.totals.delivered, first.recent]).toEqual([3, null]); // nothing to compare with yet
    await deliver(5);
    svc.persistState();
    const second = readDrainState(drainHome(dir.file("outbox")).stateFile)!.targets[0]!;
    expect(second.totals.delivered).toBe(8);
    expect(second.recent).toEqual({ delivered: 5, ms: expect.any(Number) });
    expect(second.recent!.ms).toBeGreaterThanOrEqual(0);
  });

  test("a second drain on the same db_dir fails fast with LockedError", async () => {
    const dir = tmp();
    const config = oneApp(dir.file("outbox"), {
      r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["t"] },
    });
    const first = service(config, { "app.r": createWriter("sqlite", { path: dir.file("remote.db") }) });
    await first.start();
    const second = new OutboxSyncService(config, { "app.r": createWriter("sqlite", { path: dir.file("remote2.db") }) });
    const error = await second.start().then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(LockedError);
    expect((error as LockedError).code).toBe("E_LOCKED");
    expect((error as LockedError).lockFile).toBe(`${dir.file("outbox")}/.sqloutbox.lock`);
    await first.stop();
    // Released on stop: a new drain can take over.
    const third = service(config, { "app.r": createWriter("sqlite", { path: dir.file("remote.db") }) });
    await third.start();
  });

  test("a queue file that is not a database holds its table only, named in the log; the healthy tables flow beside it", async () => {
    const dir = tmp();
    const remote = remoteSqlite(dir.file("remote.db"), ["CREATE TABLE ok (id INTEGER)"]);
    fs.mkdirSync(dir.file("outbox"));
    const garbage = "this is not a database ".repeat(100);
    fs.writeFileSync(dir.file("outbox/t.db"), garbage);
    fs.writeFileSync(dir.file("outbox/users.db"), ""); // placeholder, replaced by a foreign database below
    fs.rmSync(dir.file("outbox/users.db"));
    const foreign = new Database(dir.file("outbox/users.db"));
    foreign.run("CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)");
    foreign.close();
    const config = oneApp(dir.file("outbox"), {
      r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["t", "users", "ok"] },
    });
    const log = memoryLogger();
    const svc = service(config, { "app.r": createWriter("sqlite", { path: dir.file("remote.db") }) }, { logger: log });
    await svc.start();
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    for (let i = 0; i < 10; i++) producer.push("ok", "INSERT INTO ok (id) VALUES (?)", [i]);
    await waitFor(() => remote.query("SELECT 1 FROM ok").all().length === 10, "the healthy table to flow");
    expect(log.has(new RegExp(`"t" is held \\(file\\).*${dir.file("outbox/t.db").replaceAll("/", "\\/")}`))).toBe(true);
    expect(log.has(/"users" is held \(file\).*not an outbox file.*holds other tables \(users\)/)).toBe(true);
    // Neither file was touched: garbage stays garbage, the foreign database gained no outbox tables.
    expect(fs.readFileSync(dir.file("outbox/t.db"), "utf8")).toBe(garbage);
    const check = new Database(dir.file("outbox/users.db"), { readonly: true });
    expect(check.query("SELECT name FROM sqlite_schema ORDER BY name").all()).toEqual([{ name: "users" }]);
    check.close();
  });

  test("one writeBatch per target per cycle carries every ready table, up to batch_size rows each", async () => {
    const dir = tmp();
    const remote = remoteSqlite(
      dir.file("remote.db"),
      ["x", "y", "z"].map((t) => `CREATE TABLE ${t} (id INTEGER)`),
    );
    const config = oneApp(
      dir.file("outbox"),
      { r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["x", "y", "z"] } },
      { batchSize: 4, tableFlushThreshold: 3, tableMaxWait: 60 },
    );
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

  test("under load the loop confirms a batch locally and reads the next one while a batch is in flight: each batch starts above the last, none is sent twice, and stop confirms the last", async () => {
    const dir = tmp();
    const remote = remoteSqlite(dir.file("remote.db"), ["CREATE TABLE x (id INTEGER)"]);
    const config = oneApp(
      dir.file("outbox"),
      { r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["x"] } },
      { batchSize: 50 },
    );
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    const N = 500;
    for (let i = 0; i < N; i++) producer.push("x", "INSERT INTO x (id) VALUES (?)", [i]);
    const queue = new Outbox(dir.file("outbox/x.db"), "x");
    cleanups.push(() => queue.close());
    let reads = 0;
    let onRead: (() => void) | null = null;
    const { readForDelivery } = QueueForDrain.prototype;
    QueueForDrain.prototype.readForDelivery = function (
      this: QueueForDrain,
      ...args: Parameters<QueueForDrain["readForDelivery"]>
    ) {
      reads += 1;
      onRead?.();
      return readForDelivery.apply(this, args);
    };
    cleanups.push(() => Object.assign(QueueForDrain.prototype, { readForDelivery }));
    // Per batch: its seqs, the rows still pending locally when it was sent, and the queue reads while it was in flight.
    const sent: Array<{ seqs: number[]; pendingAtSend: number; readsInFlight: number }> = [];
    const inner = createWriter("sqlite", { path: dir.file("remote.db") });
    const writer: OutboxWriter = {
      dialect: "sqlite",
      writeBatch: async (stmts) => {
        const batch = {
          seqs: stmts.filter((st) => st.seq > 0 && st.namespace === "x").map((st) => st.seq),
          pendingAtSend: queue.pendingCount(),
          readsInFlight: -reads,
        };
        sent.push(batch);
        // A remote that takes its time: until the drain reads the queue, or 200 ms.
        await Promise.race([new Promise<void>((resolve) => (onRead = resolve)), Bun.sleep(200)]);
        onRead = null;
        batch.readsInFlight += reads;
        return inner.writeBatch(stmts);
      },
    };
    const svc = service(config, { "app.r": writer });
    await svc.start();
    await waitFor(
      () => remote.query<{ n: number }, []>("SELECT count(*) AS n FROM x").get()!.n === N,
      "every row delivered",
    );
    await svc.stop();
    const batches = sent.filter((b) => b.seqs.length > 0);
    const seqs = batches.flatMap((b) => b.seqs);
    expect(new Set(seqs).size).toBe(N); // none sent twice
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b)); // each batch starts above the one before
    // The previous batch's rows were still pending locally when the next one left: it was confirmed while that one was in flight.
    const overlapped = batches.filter(
      (b, k) => k > 0 && b.pendingAtSend === N - seqs.indexOf(b.seqs[0]!) + batches[k - 1]!.seqs.length,
    );
    expect(overlapped.length).toBeGreaterThan(0);
    // The rows of the next batch were read while this one was in flight, and sent without another read.
    expect(batches.slice(0, -2).every((b) => b.readsInFlight === 1)).toBe(true);
    expect(queue.pendingCount()).toBe(0); // stop confirmed the last batch
    expect(
      remote
        .query<{ id: number }, []>("SELECT id FROM x ORDER BY rowid")
        .all()
        .map((r) => r.id),
    ).toEqual([...Array(N).keys()]);
  });

  test("under load, an outage before the next batch leaves no applied row pending: the pending count never holds rows the remote already has", async () => {
    const dir = tmp();
    const remote = remoteSqlite(dir.file("remote.db"), ["CREATE TABLE x (id INTEGER)"]);
    const config = oneApp(
      dir.file("outbox"),
      { r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["x"] } },
      { batchSize: 50, outageBackoffCapMinutes: 1 },
    );
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    for (let i = 0; i < 200; i++) producer.push("x", "INSERT INTO x (id) VALUES (?)", [i]);
    let clock = Date.now();
    const inner = createWriter("sqlite", { path: dir.file("remote.db") });
    let dataBatches = 0;
    let down = false;
    const writer: OutboxWriter = {
      dialect: "sqlite",
      writeBatch: async (stmts) => {
        if (down) throw new Error("injected: connection refused");
        const results = await inner.writeBatch(stmts);
        // After the second batch the remote goes away, and the clock passes the fleet view's
        // refresh: the next cycle fails reading the ledger, before any batch is sent.
        if (stmts.some((st) => st.seq > 0) && ++dataBatches === 2) {
          down = true;
          clock += 16_000;
        }
        return results;
      },
    };
    const svc = service(config, { "app.r": writer }, { now: () => clock });
    await svc.start();
    await waitFor(() => svc.targets()[0]!.reachability.state === "outage", "the outage");
    const queue = new Outbox(dir.file("outbox/x.db"), "x");
    cleanups.push(() => queue.close());
    const applied = remote.query<{ n: number }, []>("SELECT count(*) AS n FROM x").get()!.n;
    expect(applied).toBe(100);
    expect(queue.pendingCount()).toBe(200 - applied);
  });

  test("a failed head's retry time is stored from the drain's clock: with that clock an hour ahead, the head still waits out its backoff", async () => {
    const dir = tmp();
    remoteSqlite(dir.file("remote.db"), ["CREATE TABLE x (id INTEGER NOT NULL CHECK (id >= 0))"]).close();
    const config = oneApp(
      dir.file("outbox"),
      { r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["x"] } },
      { backoffUnitSeconds: 60 },
    );
    new SQLMiddleware({ dbDir: dir.file("outbox") }).push("x", "INSERT INTO x (id) VALUES (?)", [-1]); // poison
    const clock = () => Date.now() + 3_600_000;
    const svc = service(config, { "app.r": createWriter("sqlite", { path: dir.file("remote.db") }) }, { now: clock });
    for (let i = 0; i < 5; i++) await svc.runOnce();
    const queue = new Outbox(dir.file("outbox/x.db"), "x");
    cleanups.push(() => queue.close());
    const head = queue.head()!;
    expect(head.attempts).toBe(1); // tried once, then backing off: a retry time from another clock would be long past
    expect(Date.parse(head.nextAttemptAt!) - clock()).toBeGreaterThan(100_000);
  });

  test("under load, rows read ahead of a batch that fails are not sent: the rows before a poison row land in order, the rest after it, only the culprit charged", async () => {
    const dir = tmp();
    const remote = remoteSqlite(dir.file("remote.db"), ["CREATE TABLE x (id INTEGER NOT NULL CHECK (id >= 0))"]);
    const config = oneApp(
      dir.file("outbox"),
      { r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["x"] } },
      { batchSize: 50, maxAttempts: 2, backoffUnitSeconds: 0.01 },
    );
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    const ids = Array.from({ length: 400 }, (_, i) => (i === 175 ? -1 : i));
    const seqs = ids.map((id) => producer.push("x", "INSERT INTO x (id) VALUES (?)", [id]));
    const writer = new FaultyWriter(createWriter("sqlite", { path: dir.file("remote.db") }));
    const svc = service(config, { "app.r": writer });
    await svc.start();
    const queue = new Outbox(dir.file("outbox/x.db"), "x");
    cleanups.push(() => queue.close());
    await waitFor(() => queue.pendingCount() === 0 && queue.deadCount() === 1, "every row delivered or dead-lettered");
    await svc.stop();
    expect(
      remote
        .query<{ id: number }, []>("SELECT id FROM x ORDER BY rowid")
        .all()
        .map((r) => r.id),
    ).toEqual(ids.filter((id) => id >= 0));
    const dead = queue.getDead(seqs[175]!)!;
    expect(dead.attempts).toBe(2); // charged twice, then dead-lettered: nobody else was
    expect(queue.deadCount()).toBe(1);
    expect(writer.batches).toBeGreaterThan(ids.length / 50); // several batches, the failed ones among them
  });

  test("under load, a table with lanes plans from rows read ahead too, and a poison row among them holds its key only: each key lands in order, only the culprit charged", async () => {
    const dir = tmp();
    const remote = remoteSqlite(dir.file("remote.db"), [
      "CREATE TABLE x (k TEXT NOT NULL, id INTEGER NOT NULL CHECK (id >= 0))",
    ]);
    const config = oneApp(
      dir.file("outbox"),
      { r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: [{ name: "x", lanes: 4 }] } },
      { batchSize: 50, maxAttempts: 2, backoffUnitSeconds: 0.01 },
    );
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    const keyOf = (i: number) => `k${i % 8}`;
    const ids = Array.from({ length: 400 }, (_, i) => (i === 175 ? -1 : i));
    const seqs = ids.map((id, i) =>
      producer.push("x", "INSERT INTO x (k, id) VALUES (?, ?)", [keyOf(i), id], { key: keyOf(i) }),
    );
    const svc = service(config, { "app.r": createWriter("sqlite", { path: dir.file("remote.db") }) });
    await svc.start();
    const queue = new Outbox(dir.file("outbox/x.db"), "x");
    cleanups.push(() => queue.close());
    await waitFor(() => queue.pendingCount() === 0 && queue.deadCount() === 1, "every row delivered or dead-lettered");
    await svc.stop();
    const landed = remote.query<{ k: string; id: number }, []>("SELECT k, id FROM x ORDER BY rowid").all();
    const perKey = (rows: ReadonlyArray<{ k: string; id: number }>) =>
      Object.fromEntries(
        Array.from({ length: 8 }, (_, k) => [`k${k}`, rows.filter((r) => r.k === `k${k}`).map((r) => r.id)]),
      );
    const expected = ids.flatMap((id, i) => (id >= 0 ? [{ k: keyOf(i), id }] : []));
    expect(perKey(landed)).toEqual(perKey(expected));
    expect(landed).toHaveLength(expected.length);
    expect(queue.getDead(seqs[175]!)!.attempts).toBe(2); // charged twice, then dead-lettered: nobody else was
  });
});
