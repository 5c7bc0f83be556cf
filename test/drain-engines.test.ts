// One delivery scenario list run against every built-in writer on its real engine.
import { Database } from "bun:sqlite";
import { HttpClient } from "@libsql/client/http";
import { Sqlite3Client } from "@libsql/client/sqlite3";
import { describe, expect, spyOn, test } from "bun:test";
import { OutboxSyncService } from "../src/drain/service.ts";
import { verifyFile } from "../src/outbox/inspect.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { SQLMiddleware } from "../src/outbox/middleware.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { FaultyWriter, memoryLogger, oneApp } from "./support/drain-harness.ts";
import { AUTO_POS, ENGINES, type Engine, openRemote } from "./support/remote.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();

/**
 * For the file engines, where the engine cannot count statements: from now until the test's
 * clean-ups, counts the INSERTs into `table` the writer hands to its driver — bun:sqlite's
 * prepare/query for `sqlite`, the libsql client's batch/execute for `libsql` (file:) and
 * `libsql-http`. A merged multi-row INSERT counts once. Returns the reader of the count.
 */
function sentInserts(engine: Engine, table: string): () => Promise<number> {
  const insert = new RegExp(`^\\s*INSERT\\s+INTO\\s+${table}\\b`, "i");
  const isInsert = (stmt: unknown) =>
    insert.test(typeof stmt === "string" ? stmt : String((stmt as { sql?: unknown } | null)?.sql ?? ""));
  // Spies call through; each call's first argument is one statement (a batch for `batch`).
  const libsql = (engine === "libsql" ? Sqlite3Client.prototype : HttpClient.prototype) as unknown as Record<
    "batch" | "execute",
    () => unknown
  >;
  const spies =
    engine === "sqlite"
      ? [spyOn(Database.prototype, "query"), spyOn(Database.prototype, "prepare")]
      : [spyOn(libsql, "batch"), spyOn(libsql, "execute")];
  cleanups.push(() => {
    for (const spy of spies) spy.mockRestore();
  });
  return async () =>
    spies
      .flatMap((spy) =>
        (spy.mock.calls as unknown[][]).flatMap((call) => (Array.isArray(call[0]) ? call[0] : [call[0]])),
      )
      .filter(isInsert).length;
}

describe.each(ENGINES)("delivery to %s", (engine) => {
  async function setup(options: { inject?: boolean } = {}) {
    const dir = tempDirCleanedBy(cleanups);
    const remote = await openRemote(engine, { cleanups, token: "drain-token" });
    for (const t of ["a", "b"])
      await remote.exec(
        `CREATE TABLE ${t} (${AUTO_POS[remote.dialect]}, id BIGINT NOT NULL CHECK (id >= 0), note VARCHAR(32))`,
      );
    const target = {
      writer: remote.writer,
      connection: remote.connection,
      tables: ["a", "b"],
      injectOutboxSeq: options.inject ?? false,
    };
    const config = oneApp(dir.file("outbox"), { r: target }, { maxAttempts: 2, backoffUnitSeconds: 0.01 });
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    const queue = (t: string) => {
      const q = new Outbox(dir.file(`outbox/${t}.db`), t);
      cleanups.push(() => q.close());
      return q;
    };
    const drain = (writer = remote.createWriter()) => {
      const log = memoryLogger();
      const svc = new OutboxSyncService(config, { "app.r": writer }, { logger: log });
      cleanups.push(() => svc.stop(2000));
      return { svc, log };
    };
    return { dir, remote, producer, queue, drain };
  }

  test("compatibility mode: auto_schema twice on an existing table, then seeding above the remote MAX(outbox_seq)", async () => {
    const s = await setup({ inject: true });
    await s.remote.exec("INSERT INTO a (id) VALUES (7)");
    const first = s.drain();
    await first.svc.runOnce();
    await first.svc.stop();
    expect(first.log.lines.filter((l) => /^(warn|error)/.test(l))).toEqual([]);
    // Rows delivered by an earlier deployment of this outbox, up to seq 1000.
    await s.remote.exec("INSERT INTO a (id, outbox_seq) VALUES (8, 1000)");
    const second = s.drain();
    await second.svc.start();
    expect(second.log.lines.filter((l) => /^(warn|error)/.test(l))).toEqual([]);
    const seq = s.producer.push("a", "INSERT INTO a (id, note) VALUES (?, ?)", [9, "new"]);
    expect(seq).toBeGreaterThan(1000);
    await waitFor(() => second.svc.totalPending() === 0, "delivery");
    expect(await s.remote.ints("SELECT id FROM a ORDER BY id")).toEqual([[7], [8], [9]]);
    expect(await s.remote.ints("SELECT outbox_seq FROM a WHERE id = 9")).toEqual([[seq]]);
  });

  test("a poison row holds only its table: the rows before it go first, then it alone is charged and dead-lettered after max_attempts", async () => {
    const s = await setup();
    const { svc } = s.drain();
    await svc.runOnce();
    s.producer.push("a", "INSERT INTO a (id) VALUES (?)", [1]);
    const poison = s.producer.push("a", "INSERT INTO a (id) VALUES (?)", [-1]);
    s.producer.push("a", "INSERT INTO a (id) VALUES (?)", [2]);
    for (let i = 0; i < 20; i++) s.producer.push("b", "INSERT INTO b (id) VALUES (?)", [i]);
    const first = await svc.runOnce();
    // a's batch rolled back whole (the ledger fence with it); b landed. Nothing is charged: the failed row is not the head.
    expect(first).toMatchObject({ delivered: 20, failed: 0, deadLettered: 0, more: true });
    expect(await s.remote.ints("SELECT id FROM a ORDER BY pos")).toEqual([]);
    expect((await s.remote.ints("SELECT count(*) FROM b"))[0]).toEqual([20]);
    const second = await svc.runOnce();
    expect(second).toMatchObject({ delivered: 1, failed: 0 }); // the row before the poison, alone
    expect(await s.remote.ints("SELECT id FROM a ORDER BY pos")).toEqual([[1]]);
    const a = s.queue("a");
    await waitFor(async () => (await svc.runOnce(), a.pendingCount() === 0), "the poison row to be dead-lettered");
    expect(a.getDead(poison)).toMatchObject({ reason: "max_attempts", attempts: 2 });
    expect(await s.remote.ints("SELECT id FROM a ORDER BY pos")).toEqual([[1], [2]]);
  });

  test("coalesced: a run of same-text INSERTs goes as multi-row statements; a poison row in the middle lets the rows before it land, holds the rest and is charged alone", async () => {
    const s = await setup();
    const { svc } = s.drain();
    await svc.runOnce();
    // How many INSERT statements the engine itself executed (server engines can tell; MySQL's
    // counter is server-wide, and counts the ledger's own INSERT … ON DUPLICATE KEY UPDATE), or —
    // for the file engines — how many INSERTs into b the writer handed to its driver.
    const statements =
      engine === "postgres"
        ? async () => {
            await s.remote.exec(`CREATE TABLE IF NOT EXISTS stmt_count (n INT); CREATE OR REPLACE FUNCTION count_stmt() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO stmt_count VALUES (1); RETURN NULL; END $$;
            CREATE TRIGGER count_b AFTER INSERT ON b FOR EACH STATEMENT EXECUTE FUNCTION count_stmt()`);
            return async () => (await s.remote.ints("SELECT count(*) FROM stmt_count"))[0]![0]!;
          }
        : engine === "mysql"
          ? async () => {
              const comInsert = async () =>
                (
                  await s.remote.ints(
                    "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'COM_INSERT'",
                  )
                )[0]![0]!;
              const before = await comInsert();
              return async () => (await comInsert()) - before;
            }
          : async () => sentInserts(engine, "b");
    const count = await statements();
    for (let i = 0; i < 200; i++) s.producer.push("b", "INSERT INTO b (id, note) VALUES (?, ?)", [i, `n${i}`]);
    await waitFor(async () => (await svc.runOnce(), svc.totalPending() === 0), "200 clean rows");
    expect((await s.remote.ints("SELECT id FROM b ORDER BY pos")).flat()).toEqual([...Array(200).keys()]);
    // 200 rows in far fewer statements (the ledger's own statements are not INSERTs into b).
    const sent = await count();
    expect(sent).toBeGreaterThan(0); // the count sees the statements at all
    expect(sent).toBeLessThan(20);
    const seqs = Array.from({ length: 300 }, (_, i) =>
      s.producer.push("a", "INSERT INTO a (id, note) VALUES (?, ?)", [i === 200 ? -1 : i, `n${i}`]),
    );
    const a = s.queue("a");
    await waitFor(
      async () => (await svc.runOnce(), (await s.remote.ints("SELECT count(*) FROM a"))[0]![0] === 200),
      "the 200 rows before the poison",
    );
    await svc.runOnce(); // the poison, now the head, runs alone and is charged
    expect((await s.remote.ints("SELECT id FROM a ORDER BY pos")).flat()).toEqual([...Array(200).keys()]);
    const pending = a.fetchUnsynced(1_000);
    expect(pending.map((r) => r.seq)).toEqual(seqs.slice(200));
    expect(pending[0]).toMatchObject({ attempts: 1, lastErrorClass: expect.any(String) });
    expect(pending.slice(1).every((r) => r.attempts === 0)).toBe(true);
    await waitFor(
      async () => (await svc.runOnce(), a.pendingCount() === 0),
      "the poison dead-lettered and the rest delivered",
    );
    expect(a.getDead(seqs[200]!)).toMatchObject({ reason: "max_attempts", attempts: 2 });
    const ids = (await s.remote.ints("SELECT id FROM a ORDER BY pos")).flat();
    expect(ids).toEqual([...Array(300).keys()].filter((i) => i !== 200));
  });

  test("a batch whose outcome was lost after the remote committed is settled from the ledger: no duplicate, even an INSERT updated in the same batch", async () => {
    const s = await setup();
    const writer = new FaultyWriter(s.remote.createWriter());
    const { svc } = s.drain(writer);
    await svc.runOnce();
    for (let i = 0; i < 30; i++) s.producer.push("a", "INSERT INTO a (id, note) VALUES (?, ?)", [i, "v1"]);
    await svc.runOnce();
    for (let i = 30; i < 60; i++) s.producer.push("a", "INSERT INTO a (id, note) VALUES (?, ?)", [i, "v1"]);
    s.producer.push("a", "UPDATE a SET note = ? WHERE id = ?", ["v2", 45]);
    writer.faults.push("commit-then-throw");
    expect((await svc.runOnce()).outages).toEqual(["app.r"]);
    await waitFor(async () => (await svc.runOnce(), svc.totalPending() === 0), "the redelivery");
    expect(await s.remote.ints("SELECT count(*), count(DISTINCT id) FROM a")).toEqual([[60, 60]]);
    expect(await s.remote.ints("SELECT id FROM a WHERE note = 'v2'")).toEqual([[45]]);
    expect((await s.remote.ints("SELECT id FROM a ORDER BY pos")).flat()).toEqual([...Array(60).keys()]);
    expect(s.queue("a").listDead()).toEqual([]); // settled from the ledger, nothing resequenced
  });

  test("compatibility mode: a fresh queue whose pending seqs collide with another machine's rows is moved above the remote MAX: nothing absorbed, order kept", async () => {
    const s = await setup({ inject: true });
    const prep = s.drain();
    await prep.svc.runOnce(); // auto_schema on the empty remote
    await prep.svc.stop();
    // The old machine delivered outbox_seq 1..50 (ids 1000..1049) before the migration.
    const old = Array.from({ length: 50 }, (_, i) => `(${1000 + i}, 'old', ${i + 1})`).join(", ");
    await s.remote.exec(`INSERT INTO a (id, note, outbox_seq) VALUES ${old}`);
    // On the new machine producers fill a fresh queue (seq 1..20) before the drain first runs.
    const seqs: number[] = [];
    for (let id = 1; id <= 10; id++)
      seqs.push(s.producer.push("a", "INSERT INTO a (id, note) VALUES (?, ?)", [id, "v1"]));
    for (let id = 1; id <= 5; id++) seqs.push(s.producer.push("a", "UPDATE a SET note = ? WHERE id = ?", ["v2", id]));
    for (let id = 1000; id < 1005; id++)
      seqs.push(s.producer.push("a", "UPDATE a SET note = ? WHERE id = ?", ["new", id]));
    expect(seqs).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    const { svc, log } = s.drain();
    await svc.start();
    await waitFor(() => svc.totalPending() === 0, "delivery of the resequenced queue");
    expect(
      log.has(
        /warn drain: "a" on app\.r already holds outbox_seq up to 50 .*moved 20 pending rows from seq 1\.\.20 to 51\.\.70/,
      ),
    ).toBe(true);
    expect(
      await s.remote.ints("SELECT count(*), count(DISTINCT outbox_seq), min(outbox_seq), max(outbox_seq) FROM a"),
    ).toEqual([[60, 60, 6, 70]]); // the old rows 1..5 were updated (66..70)
    // Every new row landed once; updated rows carry the UPDATE's (later) seq, so order is visible.
    expect((await s.remote.ints("SELECT id FROM a WHERE id < 1000 ORDER BY outbox_seq")).flat()).toEqual([
      6, 7, 8, 9, 10, 1, 2, 3, 4, 5,
    ]);
    expect((await s.remote.ints("SELECT id FROM a WHERE note = 'v2' ORDER BY id")).flat()).toEqual([1, 2, 3, 4, 5]);
    expect((await s.remote.ints("SELECT id FROM a WHERE note = 'new' ORDER BY id")).flat()).toEqual([
      1000, 1001, 1002, 1003, 1004,
    ]);
    expect((await s.remote.ints("SELECT count(*) FROM a WHERE note = 'old'")).flat()).toEqual([45]);
    await svc.stop();
    const q = s.queue("a");
    const dead = q.listDead();
    expect(dead.map((d) => [d.seq, d.reason, d.replayedAsSeq])).toEqual(
      seqs.map((seq) => [seq, "resequenced", seq + 50]),
    );
    expect(q.deadCount()).toBe(0);
    expect(verifyFile(s.dir.file("outbox/a.db"))).toMatchObject({ ok: true });

    // A normal restart afterwards (the remote MAX is our own) moves nothing.
    const more = s.producer.push("a", "INSERT INTO a (id, note) VALUES (?, ?)", [11, "v1"]);
    expect(more).toBe(71);
    const again = s.drain();
    await again.svc.start();
    await waitFor(() => again.svc.totalPending() === 0, "delivery after a normal restart");
    expect(again.log.has(/already holds outbox_seq/)).toBe(false);
    expect(q.listDead()).toHaveLength(20);
    expect(await s.remote.ints("SELECT outbox_seq FROM a WHERE id = 11")).toEqual([[71]]);
  });
});

describe.each(["postgres", "mysql"] as const)("three targets on one fresh %s database", (engine) => {
  test("start at once without an error or warning though their ledger DDL races, and every row lands", async () => {
    const dir = tempDirCleanedBy(cleanups);
    const remote = await openRemote(engine, { cleanups });
    const names = ["r1", "r2", "r3"];
    for (const t of names) await remote.exec(`CREATE TABLE t_${t} (id BIGINT PRIMARY KEY)`);
    const config = oneApp(
      dir.file("outbox"),
      Object.fromEntries(names.map((n) => [n, { writer: engine, connection: remote.connection, tables: [`t_${n}`] }])),
    );
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    for (const n of names)
      producer.pushMany(
        `t_${n}`,
        [1, 2, 3].map((id) => [`INSERT INTO t_${n} (id) VALUES (?)`, [id]]),
      );
    const log = memoryLogger();
    const svc = new OutboxSyncService(
      config,
      Object.fromEntries(names.map((n) => [`app.${n}`, remote.createWriter()])),
      { logger: log },
    );
    cleanups.push(() => svc.stop(2000));
    await svc.start(); // every target's setup at once: each probes, finds no ledger and creates it
    await waitFor(() => svc.totalPending() === 0, "delivery to the three targets");
    expect(log.lines.filter((l) => /^(warn|error)/.test(l))).toEqual([]);
    expect(log.lines.filter((l) => /created the delivery ledger/.test(l)).length).toBeGreaterThanOrEqual(1);
    for (const n of names) expect(await remote.ints(`SELECT id FROM t_${n} ORDER BY id`)).toEqual([[1], [2], [3]]);
  });
});
