// A fleet: several hosts, each with its own db_dir, its own drain process and its own producer
// process, feeding the same remote tables at once — the normal way to scale out. Every event must
// land exactly once and each origin's rows in the order its producer wrote them, on every engine.
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import fs from "node:fs";
import { OutboxSyncService } from "../src/drain/service.ts";
import { laneOf } from "../src/lane-key.ts";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import type { OutboxWriter, Statement } from "../src/writers/writer.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { memoryLogger, oneApp } from "./support/drain-harness.ts";
import { AUTO_POS, openRemote } from "./support/remote.ts";
import { describeSlow } from "./support/slow.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();

const HOSTS = 3;
const TABLES = ["orders", "events"];

describeSlow(
  "a fleet of drain and producer processes",
  "run three hosts' drains and producers as processes per engine",
  () => {
    describe.each(["sqlite", "libsql-http", "postgres", "mysql"] as const)("a fleet feeding %s", (engine) => {
      test(`${HOSTS} hosts, each with its own drain and producer process, feed the same tables at once: every event lands exactly once, each origin's in order`, async () => {
        const dir = tempDirCleanedBy(cleanups);
        const remote = await openRemote(engine, { cleanups });
        for (const t of TABLES)
          await remote.exec(
            `CREATE TABLE ${t} (${AUTO_POS[remote.dialect]}, producer INTEGER NOT NULL, n INTEGER NOT NULL)`,
          );
        const stopFile = dir.file("stop-producing");
        const hosts = Array.from({ length: HOSTS }, (_, h) => ({ h, dbDir: dir.file(`host${h}/queue`) }));
        const spawnDrain = (dbDir: string, h: number) =>
          Bun.spawn(
            [
              "bun",
              `${import.meta.dir}/support/children/drain-child.ts`,
              JSON.stringify({
                dbDir,
                targets: { main: { writer: remote.writer, connection: remote.connection, tables: TABLES } },
                tuning: {
                  flushInterval: 0.01,
                  tableFlushThreshold: 1,
                  tableMaxWait: 0,
                  batchSize: 50,
                  originLabel: `host-${h}`,
                  outageBackoffCapMinutes: 0.01,
                },
              }),
            ],
            { stdout: "pipe", stderr: "pipe" },
          );
        const drains = hosts.map(({ dbDir, h }) => spawnDrain(dbDir, h));
        cleanups.push(() => {
          for (const d of drains) d.kill("SIGKILL");
        });
        const producers = hosts.map(({ dbDir, h }) =>
          Bun.spawn(
            [
              "bun",
              `${import.meta.dir}/support/children/drain-producer.ts`,
              JSON.stringify({ dbDir, tables: TABLES, producer: h, stopFile, pauseEvery: 10, pauseMs: 5 }),
            ],
            { stdout: "pipe", stderr: "inherit" },
          ),
        );
        cleanups.push(() => {
          for (const p of producers) p.kill("SIGKILL");
        });
        // Let every host produce and deliver a while, concurrently, whatever the machine's load.
        await waitFor(
          async () => {
            const counts = (await remote.rows(`SELECT producer, count(*) FROM ${TABLES[0]} GROUP BY producer`)).map(
              ([, n]) => Number(n),
            );
            return counts.length === HOSTS && Math.min(...counts) >= 30;
          },
          "every host to deliver at least 30 rows",
          30_000,
        );
        fs.writeFileSync(stopFile, "");
        const produced: number[] = [];
        for (const p of producers) {
          expect(await p.exited).toBe(0);
          produced.push(Number((await new Response(p.stdout).text()).split(" ")[1]));
        }
        const queues = hosts.flatMap(({ dbDir }) => TABLES.map((t) => new Outbox(`${dbDir}/${t}.db`, t)));
        cleanups.push(() => {
          for (const q of queues) q.close();
        });
        await waitFor(
          () => queues.every((q) => q.pendingCount() === 0),
          "every host's drain to empty its queues",
          30_000,
        );
        for (const d of drains) d.kill("SIGTERM");
        for (const d of drains) expect(await d.exited).toBe(0);

        const total = produced.reduce((a, b) => a + b, 0);
        expect(Math.min(...produced)).toBeGreaterThanOrEqual(30); // every host really produced
        for (const t of TABLES) {
          const rows = (await remote.rows(`SELECT producer, n FROM ${t} ORDER BY pos`)).map(([p, n]) => [
            Number(p),
            Number(n),
          ]);
          expect({ table: t, rows: rows.length }).toEqual({ table: t, rows: total });
          expect(new Set(rows.map(([p, n]) => `${p}/${n}`)).size).toBe(total); // no duplicate
          for (const { h } of hosts) {
            // Each origin's rows in the order its producer wrote them, none missing.
            expect(rows.filter(([p]) => p === h).map(([, n]) => n)).toEqual([...Array(produced[h]).keys()]);
          }
          // The ledger holds one row per origin, at that file's last delivered seq, under its label.
          const ledger = (
            await remote.rows(
              `SELECT origin, through, label FROM sqloutbox_ledger WHERE namespace = '${t}' ORDER BY label`,
            )
          ).map(([o, th, l]) => [String(o), Number(th), String(l)]);
          const expected = hosts.map(({ dbDir, h }) => {
            const q = queues.find((x) => x.path === `${dbDir}/${t}.db`)!;
            const log = new Database(q.path, { readonly: true });
            const last = log
              .query<{ s: number }, [string]>("SELECT max(last_seq) AS s FROM outbox_delivered WHERE namespace = ?")
              .get(t)!.s;
            log.close();
            return [q.origin, last, `host-${h}`];
          });
          expect(ledger).toEqual(expected);
        }
      }, 60_000);
    });
  },
);

test("a second origin feeding an injected (compatibility-mode) table is refused loudly: the table is held, the log names both origins, nothing is absorbed", async () => {
  cleanups.push(() => closeSharedOutboxes());
  const dir = tempDirCleanedBy(cleanups);
  const remote = await openRemote("sqlite", { cleanups });
  await remote.exec("CREATE TABLE t (id INTEGER NOT NULL)");
  let clock = Date.now();
  let refuseFleetRead = false;
  const host = (h: number) => {
    const dbDir = dir.file(`host${h}/queue`);
    const config = oneApp(
      dbDir,
      { r: { writer: "sqlite", connection: remote.connection, tables: ["t"], injectOutboxSeq: true } },
      { originLabel: `host-${h}` },
    );
    const log = memoryLogger();
    const inner = remote.createWriter();
    // The ledger may answer the fleet read (namespace: the ledger table) with an error.
    const writer: OutboxWriter = {
      dialect: "sqlite",
      writeBatch: (stmts) =>
        refuseFleetRead && stmts.some((st) => st.namespace === "sqloutbox_ledger")
          ? Promise.resolve(
              stmts.map(() => ({
                ok: false as const,
                error: "injected: permission denied for table sqloutbox_ledger",
              })),
            )
          : inner.writeBatch(stmts),
    };
    const svc = new OutboxSyncService(config, { "app.r": writer }, { logger: log, now: () => clock });
    cleanups.push(() => svc.stop(2000));
    return { svc, log, producer: new SQLMiddleware({ dbDir }), dbDir };
  };
  const a = host(0);
  for (let i = 0; i < 5; i++) a.producer.push("t", "INSERT INTO t (id) VALUES (?)", [i]);
  await a.svc.start();
  await waitFor(() => a.svc.totalPending() === 0, "host 0 to deliver");
  const b = host(1);
  for (let i = 100; i < 105; i++) b.producer.push("t", "INSERT INTO t (id) VALUES (?)", [i]);
  await b.svc.start();
  await waitFor(() => b.log.has(/is held \(origin\)/), "host 1 to refuse the shared injected table");
  await b.svc.runOnce();
  expect(b.svc.totalPending()).toBe(5); // held, not absorbed by ON CONFLICT (outbox_seq)
  const originA = new Outbox(`${a.dbDir}/t.db`, "t");
  const originB = new Outbox(`${b.dbDir}/t.db`, "t");
  cleanups.push(() => (originA.close(), originB.close()));
  const line = b.log.lines.find((l) => /is held \(origin\)/.test(l))!;
  expect(line).toContain(originA.origin);
  expect(line).toContain(originB.origin);
  expect(line).toContain("host-0");
  expect(line).toStartWith("error");
  expect((await remote.ints("SELECT id FROM t ORDER BY rowid")).flat()).toEqual([0, 1, 2, 3, 4]);
  // A fleet read the ledger refuses keeps the hold: it must not lapse for want of an answer.
  refuseFleetRead = true;
  clock += 60_000; // the fleet view is due again
  await b.svc.runOnce();
  await b.svc.runOnce();
  expect(b.svc.totalPending()).toBe(5);
  expect(b.svc.targets()[0]!.tables[0]!.view().held?.reason).toBe("origin");
});

test("at start the settlement from the ledger and the fleet view's first read go to the remote in one call", async () => {
  cleanups.push(() => closeSharedOutboxes());
  const dir = tempDirCleanedBy(cleanups);
  const remote = await openRemote("sqlite", { cleanups });
  await remote.exec("CREATE TABLE t (id INTEGER NOT NULL)");
  const dbDir = dir.file("queue");
  const inner = remote.createWriter();
  const calls: Statement[][] = [];
  const writer: OutboxWriter = {
    dialect: "sqlite",
    writeBatch: (stmts) => (calls.push(stmts), inner.writeBatch(stmts)),
  };
  const config = oneApp(dbDir, { r: { writer: "sqlite", connection: remote.connection, tables: ["t"] } });
  const svc = new OutboxSyncService(config, { "app.r": writer }, { logger: memoryLogger() });
  cleanups.push(() => svc.stop(2000));
  const producer = new SQLMiddleware({ dbDir });
  for (let i = 0; i < 5; i++) producer.push("t", "INSERT INTO t (id) VALUES (?)", [i]);
  await svc.runOnce();
  const reads = calls.filter((stmts) => stmts.every((st) => st.seq === 0 && /^SELECT/i.test(st.sql)));
  const settling = reads.filter((stmts) => stmts.some((st) => st.namespace === "t"));
  expect(settling).toHaveLength(1);
  expect(settling[0]!.map((st) => st.namespace)).toEqual(["t", "sqloutbox_ledger"]);
  expect(reads.filter((stmts) => stmts.every((st) => st.namespace === "sqloutbox_ledger"))).toHaveLength(1); // the probe of setup only
  expect((await remote.ints("SELECT id FROM t ORDER BY rowid")).flat()).toEqual([0, 1, 2, 3, 4]);
  expect(svc.targets()[0]!.fleet.map((r) => r.namespace)).toEqual(["t"]);
});

describe.each(["sqlite", "postgres", "mysql"] as const)("the fleet view of a table with lanes, on %s", (engine) => {
  test("each origin's lane rows go together as its table's: the highest through, the freshest move, the slowest lane — as moved and as read from the ledger, never a row the ledger lacks", async () => {
    cleanups.push(() => closeSharedOutboxes());
    const dir = tempDirCleanedBy(cleanups);
    const remote = await openRemote(engine, { cleanups });
    await remote.exec(`CREATE TABLE ev (${AUTO_POS[remote.dialect]}, k VARCHAR(16) NOT NULL)`);
    let clock = Date.now();
    const hosts = ["a", "b"].map((h) => {
      const dbDir = dir.file(`${h}/queue`);
      const config = oneApp(dbDir, {
        r: { writer: remote.writer, connection: remote.connection, tables: [{ name: "ev", lanes: 8 }] },
      });
      const svc = new OutboxSyncService(
        config,
        { "app.r": remote.createWriter() },
        { logger: memoryLogger(), now: () => clock },
      );
      cleanups.push(() => svc.stop(2000));
      return { dbDir, svc, producer: new SQLMiddleware({ dbDir }) };
    });
    // Host a: keys in three lanes, 300 rows in all; host b: one key.
    for (let i = 0; i < 300; i++)
      hosts[0]!.producer.push("ev", "INSERT INTO ev (k) VALUES (?)", [`k${i % 3}`], { key: `k${i % 3}` });
    hosts[1]!.producer.push("ev", "INSERT INTO ev (k) VALUES (?)", ["solo"], { key: "solo" });
    for (const { svc } of hosts)
      await waitFor(async () => (await svc.runOnce(), svc.totalPending() === 0), "delivered");
    const ledgerRows = (await remote.rows("SELECT namespace FROM sqloutbox_ledger ORDER BY namespace")).map(([n]) =>
      String(n),
    );
    expect(ledgerRows.every((n) => /^ev#[0-7]$/.test(n))).toBe(true); // no row for rows without a key: none were pushed
    const a = hosts[0]!.svc;
    const origin = (svc: OutboxSyncService) => svc.targets()[0]!.tables[0]!.origin!;
    const mine = () => a.targets()[0]!.fleet.filter((r) => r.origin === origin(a));
    // As moved by its own batches: one entry for the table, its lanes, no made-up "ev" row at 0.
    expect(mine()).toHaveLength(1);
    expect(mine()[0]).toMatchObject({
      namespace: "ev",
      through: 300,
      lanes: { rows: new Set(["k0", "k1", "k2"].map((k) => laneOf(k, 8))).size },
    });
    // As read from the ledger 15 s later: both origins, each one entry with its lanes.
    clock += 60_000;
    await a.runOnce();
    const fleet = a.targets()[0]!.fleet;
    expect(
      fleet.map((r) => [r.namespace, r.origin === origin(a) ? "a" : "b", r.through, r.lanes?.rows]).sort(),
    ).toEqual(
      [
        ["ev", "a", 300, mine()[0]!.lanes!.rows],
        ["ev", "b", 1, 1],
      ].sort(),
    );
    const slowest = fleet.find((r) => r.origin === origin(a))!.lanes!.slowest;
    expect(slowest.ledgerRow).toMatch(/^ev#[0-7]$/);
    expect(Date.parse(slowest.updatedAt)).toBeLessThanOrEqual(
      Date.parse(fleet.find((r) => r.origin === origin(a))!.updatedAt),
    );
  });
});
