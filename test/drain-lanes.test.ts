// Lanes: in a table with `lanes = N`, rows of one key keep their order in their lane and a failing
// head holds only its lane; a row without a key waits for every lane and holds them all; a
// transaction across keys goes whole when it heads each of its lanes. On every engine, checked by
// what landed (in the order the remote applied it) — and after a restart nothing is applied twice.
import { describe, expect, test } from "bun:test";
import { defineConfig } from "../src/config/define.ts";
import { OutboxSyncService } from "../src/drain/service.ts";
import { laneOf } from "../src/lane-key.ts";
import { fenceSql, ledgerDdl } from "../src/sql/ledger.ts";
import { SQLMiddleware, closeSharedOutboxes } from "../src/outbox/middleware.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { FAST, memoryLogger } from "./support/drain-harness.ts";
import { ORDER_SCHEMA, OrderMix, orderOracle } from "./support/order-mix.ts";
import { AUTO_POS, ENGINES, openRemote } from "./support/remote.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();
cleanups.push(() => closeSharedOutboxes());

const LANES = 8;
const INSERT = "INSERT INTO events (k, n) VALUES (?, ?)";
/** Keys by lane: `keyIn(l, i)` is the i-th key found in lane l. */
function keysOf(lane: number, count: number): string[] {
  const keys: string[] = [];
  for (let i = 0; keys.length < count; i++) if (laneOf(`key-${i}`, LANES) === lane) keys.push(`key-${i}`);
  return keys;
}

describe.each(ENGINES)("lanes, delivered to %s", (engine) => {
  async function setup(tuning: Record<string, unknown> = {}) {
    let lanes = LANES;
    const dir = tempDirCleanedBy(cleanups);
    const remote = await openRemote(engine, { cleanups });
    await remote.exec(
      `CREATE TABLE events (${AUTO_POS[remote.dialect]}, k VARCHAR(32) NOT NULL, n BIGINT NOT NULL, CONSTRAINT n_ok CHECK (n >= 0))`,
    );
    const config = () =>
      defineConfig({
        app: {
          app: {
            dbDir: dir.file("queue"),
            ...FAST,
            backoffUnitSeconds: 30, // a failed head waits for the test's kick
            ...tuning,
            db: {
              r: { writer: remote.writer, connection: remote.connection, tables: [{ name: "events", lanes }] },
            },
          },
        },
      });
    const producer = new SQLMiddleware({ dbDir: dir.file("queue") });
    const log = memoryLogger();
    const start = (count = LANES) => {
      lanes = count;
      const svc = new OutboxSyncService(config(), { "app.r": remote.createWriter() }, { logger: log });
      cleanups.push(() => svc.stop(2000));
      return svc;
    };
    /** What landed, in the order the remote applied it: [key, n]. */
    const landed = async () =>
      (await remote.rows("SELECT k, n FROM events ORDER BY pos")).map(([k, n]) => [String(k), Number(n)] as const);
    const queue = () => {
      const q = new Outbox(dir.file("queue/events.db"), "events");
      cleanups.push(() => q.close());
      return q;
    };
    return { dir, remote, producer, log, start, landed, queue };
  }

  /** Every key's n in the order they landed must be 1, 2, 3, …: per-key order, nothing twice. */
  function perKey(rows: ReadonlyArray<readonly [string, number]>): Map<string, number[]> {
    const by = new Map<string, number[]>();
    for (const [k, n] of rows) by.set(k, [...(by.get(k) ?? []), n]);
    return by;
  }

  test("a poison head holds its lane only: every other lane lands in per-key order; once fixed and kicked, the held lane follows in order", async () => {
    const s = await setup();
    const poisonLane = 3;
    const [poison, neighbour] = keysOf(poisonLane, 2) as [string, string];
    const others = [0, 1, 2, 4, 5, 6, 7].flatMap((l) => keysOf(l, 2));
    s.producer.push("events", INSERT, [poison, -1], { key: poison }); // refused by the CHECK
    for (let n = 1; n <= 5; n++) {
      for (const k of [...others, neighbour!, poison!]) s.producer.push("events", INSERT, [k, n], { key: k });
    }
    const svc = s.start();
    await waitFor(
      async () => (await svc.runOnce(), (await s.landed()).length === others.length * 5),
      "every other lane",
    );
    for (let i = 0; i < 3; i++) await svc.runOnce(); // the held lane stays held
    const before = perKey(await s.landed());
    expect([...before.keys()].sort()).toEqual([...others].sort());
    // What status shows: the table is not held, one of its lanes is, by the poison head.
    const view = svc.targets()[0]!.tables[0]!.view();
    expect(view.held).toBeNull();
    expect(view.lanes?.count).toBe(LANES);
    expect(view.lanes?.held).toMatchObject([{ lane: poisonLane, key: poison, attempts: 1 }]);
    expect(Date.parse(view.lanes!.held[0]!.nextAttemptAt)).toBeGreaterThan(Date.now() + 30_000);
    // The failure line names the key and its lane, and says the backoff in human units.
    expect(
      s.log.has(
        new RegExp(
          `^warn drain: seq \\d+ \\(key "${poison}", lane ${poisonLane}\\) of namespace "events" failed on target app\\.r \\(attempt 1(/\\d+)?, retry in 1m0s\\)`,
        ),
      ),
    ).toBe(true);
    for (const k of others) expect(before.get(k)).toEqual([1, 2, 3, 4, 5]);
    // The operator fixes the row's cause on the remote (here: the CHECK goes) and kicks.
    if (engine === "postgres" || engine === "mysql") await s.remote.exec("ALTER TABLE events DROP CONSTRAINT n_ok");
    if (engine !== "postgres" && engine !== "mysql") {
      // SQLite cannot drop a CHECK: the poison row is skipped instead, the rest of its lane then goes.
      const q = s.queue();
      q.skipHead(q.fetchUnsynced(1)[0]!.seq);
    } else s.queue().retryHead();
    svc.retryNow();
    await waitFor(async () => (await svc.runOnce(), s.queue().pendingCount() === 0), "the held lane", 20_000);
    const after = perKey(await s.landed());
    expect(after.get(neighbour!)).toEqual([1, 2, 3, 4, 5]);
    expect(after.get(poison!)).toEqual(
      engine === "postgres" || engine === "mysql" ? [-1, 1, 2, 3, 4, 5] : [1, 2, 3, 4, 5],
    );
    for (const k of others) expect(after.get(k)).toEqual([1, 2, 3, 4, 5]);
  }, 30_000);

  test("a row without a key waits for every lane and holds them all; a transaction across keys waits for the lane of each", async () => {
    const s = await setup();
    const [poison] = keysOf(2, 1) as [string];
    const [free] = keysOf(5, 1) as [string];
    const [other] = keysOf(6, 1) as [string];
    s.producer.push("events", INSERT, [poison, -1], { key: poison }); // holds lane 2
    s.producer.push("events", INSERT, [free, 1], { key: free });
    // A transaction across lane 2 and lane 6: it waits for lane 2, and holds lane 6 behind it.
    s.producer.transaction(() => {
      s.producer.push("events", INSERT, [other, 1], { key: other });
      s.producer.push("events", INSERT, [poison, 1], { key: poison });
    });
    s.producer.push("events", INSERT, [other, 2], { key: other }); // behind the transaction in lane 6
    s.producer.push("events", INSERT, [free, 2], { key: free }); // lane 5 is free
    s.producer.push("events", INSERT, ["barrier", 0]); // no key: waits for every lane
    s.producer.push("events", INSERT, [free, 3], { key: free }); // behind the barrier
    const svc = s.start();
    await waitFor(
      async () => (await svc.runOnce(), (await s.landed()).length === 2),
      "the free lane up to the barrier",
    );
    for (let i = 0; i < 3; i++) await svc.runOnce();
    expect(await s.landed()).toEqual([
      [free, 1],
      [free, 2],
    ]);
    const q = s.queue();
    q.skipHead(q.fetchUnsynced(1)[0]!.seq); // the poison goes to the dead letters
    svc.retryNow();
    await waitFor(async () => (await svc.runOnce(), q.pendingCount() === 0), "the rest", 20_000);
    const rows = await s.landed();
    expect(rows.slice(2)).toEqual([
      [other, 1],
      [poison, 1],
      [other, 2],
      ["barrier", 0],
      [free, 3],
    ]);
  }, 30_000);

  test("a lane count changed while rows delivered under the old one are pending holds the table, saying how; an empty queue takes the new count", async () => {
    const s = await setup();
    const [poison] = keysOf(0, 1) as [string];
    s.producer.push("events", INSERT, [poison, -1], { key: poison });
    for (const k of keysOf(5, 2)) s.producer.push("events", INSERT, [k, 1], { key: k });
    const first = s.start();
    await waitFor(async () => (await first.runOnce(), (await s.landed()).length === 2), "the free lane");
    await first.stop();
    const changed = s.start(4);
    await changed.runOnce();
    const held = changed.targets()[0]!.tables[0]!.view().held;
    expect(held?.reason).toBe("lanes changed");
    expect(held?.message).toContain(
      'lanes of "events" changed from 8 to 4 while 3 rows delivered with 8 are pending: set lanes = 8 again',
    );
    await changed.stop();
    const back = s.start(8);
    const q = s.queue();
    q.skipHead(q.fetchUnsynced(1)[0]!.seq);
    await waitFor(
      async () => (await back.runOnce(), q.pendingCount() === 0),
      "the queue emptied under 8 lanes",
      20_000,
    );
    await back.stop();
    const fresh = s.start(4);
    s.producer.push("events", INSERT, [poison, 2], { key: poison });
    await waitFor(async () => (await fresh.runOnce(), (await s.landed()).length === 3), "delivery under 4 lanes");
    expect(fresh.targets()[0]!.tables[0]!.view().held).toBeNull();
  }, 30_000);

  test("a lane head behind another lane's held head is dead-lettered in its lane, and its lane goes on; the queue's count stays exact", async () => {
    const s = await setup();
    const [held] = keysOf(2, 1) as [string];
    const [bad, next] = keysOf(5, 2) as [string, string];
    s.producer.push("events", INSERT, [held, -1], { key: held }); // the table's head, held by the CHECK
    const q = s.queue();
    q.enqueue(INSERT, "not a payload", "", { traceparent: null, tracestate: null, key: bad }); // undecodable: lane 5's head
    s.producer.push("events", INSERT, [next, 1], { key: next });
    const svc = s.start();
    await waitFor(async () => (await svc.runOnce(), (await s.landed()).length === 1), "lane 5 past its dead head");
    expect(await s.landed()).toEqual([[next, 1]]);
    expect(q.listDead().map((d) => [d.laneKey, d.reason])).toEqual([[bad, "undecodable"]]);
    expect(svc.targets()[0]!.tables[0]!.view().held).toBeNull();
    // The applied row waits behind the held head (the confirmation is a prefix); the count knows the dead one left.
    expect(q.fetchUnsynced(10).map((r) => r.laneKey)).toEqual([held, next]);
    expect(q.pendingCount()).toBe(2);
  }, 30_000);

  test("after a restart nothing is applied twice: rows a lane delivered ahead of a held one are settled from the ledger, not sent again", async () => {
    const s = await setup();
    const [poison] = keysOf(1, 1) as [string];
    const free = keysOf(4, 3);
    s.producer.push("events", INSERT, [poison, -1], { key: poison });
    for (let n = 1; n <= 4; n++) for (const k of free) s.producer.push("events", INSERT, [k, n], { key: k });
    const first = s.start();
    await waitFor(async () => (await first.runOnce(), (await s.landed()).length === 12), "the free lane");
    await first.stop();
    // The applied rows sit behind the held head, so they are still in the queue.
    expect(s.queue().pendingCount()).toBe(13);
    for (const k of free) s.producer.push("events", INSERT, [k, 5], { key: k });
    const second = s.start();
    await waitFor(async () => (await second.runOnce(), (await s.landed()).length === 15), "the new rows");
    for (let i = 0; i < 3; i++) await second.runOnce();
    const by = perKey(await s.landed());
    for (const k of free) expect(by.get(k)).toEqual([1, 2, 3, 4, 5]);
    expect(by.has(poison!)).toBe(false);
    const q = s.queue();
    q.skipHead(q.fetchUnsynced(1)[0]!.seq);
    second.retryNow();
    await waitFor(async () => (await second.runOnce(), q.pendingCount() === 0), "the local confirmation", 20_000);
    expect((await s.landed()).length).toBe(15);
  }, 30_000);

  test("one fence moves every lane's ledger row of a batch; when another drain moved any one of them, none moves", async () => {
    const remote = await openRemote(engine, { cleanups });
    await remote.exec(ledgerDdl("ledger", remote.dialect));
    const fence = fenceSql("ledger", remote.dialect, 3);
    const rows = ["events", "events#1", "events#5"];
    /** Moves each of `rows` from `from[i]` to `to[i]`, in one statement, as the drain's fence does. */
    const move = (from: number[], to: number[]) =>
      remote.exec(fence, [
        ...rows.flatMap((row, i) => ["origin-a", row, to[i]!, "host-a"]),
        ...rows.flatMap((row, i) => [row, from[i]!]),
      ]);
    const through = async () =>
      (await remote.rows("SELECT namespace, through FROM ledger ORDER BY namespace")).map(([ns, t]) => [
        String(ns),
        Number(t),
      ]);
    await move([0, 0, 0], [3, 7, 9]); // created
    await move([3, 7, 9], [4, 8, 12]); // moved from what this drain saw
    // The engine's time, one for every row a fence moves.
    expect(await remote.ints("SELECT count(DISTINCT updated_at) FROM ledger WHERE updated_at IS NOT NULL")).toEqual([
      [1],
    ]);
    expect(await through()).toEqual([
      ["events", 4],
      ["events#1", 8],
      ["events#5", 12],
    ]);
    await expect(move([4, 7, 12], [5, 10, 14])).rejects.toThrow(); // lane 1 moved meanwhile
    expect(await through()).toEqual([
      ["events", 4],
      ["events#1", 8],
      ["events#5", 12],
    ]);
  });
});

test("transactions across two tables and several keys each, in lanes: every one lands whole and the local queues empty (none left applied but unconfirmed)", async () => {
  const dir = tempDirCleanedBy(cleanups);
  const remote = await openRemote("sqlite", { cleanups });
  for (const ddl of ORDER_SCHEMA) await remote.exec(ddl);
  const dbFile = dir.file("outbox.db");
  const producer = new SQLMiddleware({ dbFile });
  const mix = new OrderMix(7, 0, 1);
  for (let n = 0; n < 300; n++) {
    const tx = mix.next();
    producer.transaction(() => {
      for (const s of tx) producer.push(s.table, s.sql, s.args, { key: s.key });
    });
  }
  const config = defineConfig({
    app: {
      app: {
        dbFile,
        ...FAST,
        batchSize: 12, // small batches: a transaction is often cut from one and sent with the next
        db: {
          r: {
            writer: remote.writer,
            connection: remote.connection,
            tables: [
              { name: "orders", lanes: LANES },
              { name: "order_items", lanes: LANES },
            ],
          },
        },
      },
    },
  });
  const svc = new OutboxSyncService(config, { "app.r": remote.createWriter() });
  cleanups.push(() => svc.stop(2000));
  await waitFor(async () => (await svc.runOnce(), svc.totalPending() === 0), "both queues emptied", 20_000);
  expect(
    await remote.ints(
      "SELECT o.id FROM orders o WHERE o.item_count <> (SELECT count(*) FROM order_items i WHERE i.order_id = o.id)",
    ),
  ).toEqual([]);
  // Emptied by delivery, not by dead letters: the remote is the serial application of all 300.
  for (const table of ["orders", "order_items"]) {
    const q = new Outbox(dbFile, table);
    cleanups.push(() => q.close());
    expect(q.deadCount()).toBe(0);
  }
  const expected = orderOracle(dir.file("oracle.db"), 7, [300]);
  expect(await remote.ints("SELECT id, total, item_count FROM orders ORDER BY id")).toEqual(expected.orders);
  expect(await remote.ints("SELECT id, order_id, qty FROM order_items ORDER BY id")).toEqual(expected.items);
});

describe.each(ENGINES)("lanes across two tables of one db_file, delivered to %s", (engine) => {
  const ACCOUNT = "INSERT INTO accounts (k, n) VALUES (?, ?)";
  const AUDIT = "INSERT INTO audit (k, n) VALUES (?, ?)";

  test("a group held in one table holds only its lanes in both: groups of other lanes land around it, in per-key order; after the fix and a kick of its key, everything lands once", async () => {
    const dir = tempDirCleanedBy(cleanups);
    const remote = await openRemote(engine, { cleanups });
    for (const table of ["accounts", "audit"])
      await remote.exec(
        `CREATE TABLE ${table} (${AUTO_POS[remote.dialect]}, k VARCHAR(32) NOT NULL, n BIGINT NOT NULL)`,
      );
    // The poison: the remote already holds (poison, 1) under a unique index, so that key's next
    // account row fails there until the operator deletes the stray row (the fix, on every engine).
    await remote.exec("CREATE UNIQUE INDEX accounts_kn ON accounts (k, n)");
    const poisonLane = 3;
    const [poison] = keysOf(poisonLane, 1) as [string];
    const [a, b] = remote.dialect === "postgres" ? ["$1", "$2"] : ["?", "?"];
    await remote.exec(`INSERT INTO accounts (k, n) VALUES (${a}, ${b})`, [poison, 1]);
    const others = [0, 1, 2, 4, 5, 6, 7].flatMap((l) => keysOf(l, 2));
    const dbFile = dir.file("app.db");
    const producer = new SQLMiddleware({ dbFile });
    /** One transaction: an account row and an audit row for each key, every row keyed by its account. */
    const transact = (keys: readonly string[], n: number) =>
      producer.transaction(() => {
        for (const k of keys) {
          producer.push("accounts", ACCOUNT, [k, n], { key: k });
          producer.push("audit", AUDIT, [k, n], { key: k });
        }
      });
    const groups: string[][] = [];
    for (let n = 1; n <= 4; n++) {
      transact([poison], n); // the first one fails; the rest wait behind it in its lane
      for (let i = 0; i < others.length; i += 2) {
        const keys = [others[i]!, others[(i + 3) % others.length]!];
        if (n === 1) groups.push(keys);
        transact(keys, n);
      }
    }
    const config = defineConfig({
      app: {
        app: {
          dbFile,
          ...FAST,
          backoffUnitSeconds: 30, // the failed group waits for the operator's kick
          batchSize: 20, // several batches: the held group is met again and again
          db: {
            r: {
              writer: remote.writer,
              connection: remote.connection,
              tables: [
                { name: "accounts", lanes: LANES },
                { name: "audit", lanes: LANES },
              ],
            },
          },
        },
      },
    });
    const svc = new OutboxSyncService(config, { "app.r": remote.createWriter() });
    cleanups.push(() => svc.stop(2000));
    const landed = async (table: string) =>
      perKeyOf(
        (await remote.rows(`SELECT k, n FROM ${table} ORDER BY pos`)).map(([k, n]) => [String(k), Number(n)] as const),
      );
    const othersLanded = async () => (await remote.count("audit")) === others.length * 4;
    await waitFor(async () => (await svc.runOnce(), await othersLanded()), "every group of the other lanes", 20_000);
    for (let i = 0; i < 3; i++) await svc.runOnce(); // the held lane stays held
    for (const table of ["accounts", "audit"]) {
      const by = await landed(table);
      for (const k of others) expect(by.get(k)).toEqual([1, 2, 3, 4]);
      // Nothing of the held key's groups landed in either table: groups go whole.
      expect(by.get(poison)).toEqual(table === "accounts" ? [1] : undefined);
    }
    // Both tables show the one held lane: where the group failed, and where its rows wait for it.
    const [accountsView, auditView] = svc.targets()[0]!.tables.map((t) => t.view());
    expect(accountsView!.lanes?.held).toMatchObject([{ lane: poisonLane, key: poison, attempts: 1 }]);
    expect(auditView!.lanes?.held).toMatchObject([
      { lane: poisonLane, key: poison, lastError: 'its group waits for its rows in "accounts"' },
    ]);
    // The operator removes the stray row and kicks the held key.
    await remote.exec(`DELETE FROM accounts WHERE k = ${a}`, [poison]);
    const accounts = new Outbox(dbFile, "accounts");
    cleanups.push(() => accounts.close());
    expect(accounts.retryHead(poison)?.seq).toBeGreaterThan(0);
    svc.retryNow();
    await waitFor(async () => (await svc.runOnce(), svc.totalPending() === 0), "the held lane", 20_000);
    for (const table of ["accounts", "audit"]) {
      const by = await landed(table);
      for (const k of [...others, poison]) expect(by.get(k)).toEqual([1, 2, 3, 4]);
    }
    expect(accounts.deadCount()).toBe(0);
  }, 40_000);
});

/** Each key's n in the order they landed. */
function perKeyOf(rows: ReadonlyArray<readonly [string, number]>): Map<string, number[]> {
  const by = new Map<string, number[]>();
  for (const [k, n] of rows) by.set(k, [...(by.get(k) ?? []), n]);
  return by;
}

test("the background loop reads on past a held lane at once: groups larger than batch_size in other lanes land without waiting for the held head's backoff", async () => {
  const dir = tempDirCleanedBy(cleanups);
  const remote = await openRemote("sqlite", { cleanups });
  await remote.exec(
    `CREATE TABLE events (${AUTO_POS[remote.dialect]}, k TEXT NOT NULL, n BIGINT NOT NULL CHECK (n >= 0))`,
  );
  const producer = new SQLMiddleware({ dbDir: dir.file("queue") });
  const [poison] = keysOf(2, 1) as [string];
  const others = [0, 1, 3, 4, 5, 6, 7].flatMap((l) => keysOf(l, 1));
  producer.push("events", INSERT, [poison, -1], { key: poison }); // refused: backs off for a minute
  // Each transaction is larger than batch_size, over the other lanes: one group per batch.
  for (let g = 0; g < 5; g++)
    producer.transaction(() => {
      for (let n = 1; n <= 60; n++) {
        const k = others[(g + n) % others.length]!;
        producer.push("events", INSERT, [k, n], { key: k });
      }
    });
  const config = defineConfig({
    app: {
      app: {
        dbDir: dir.file("queue"),
        ...FAST,
        backoffUnitSeconds: 30,
        batchSize: 50,
        db: { r: { writer: remote.writer, connection: remote.connection, tables: [{ name: "events", lanes: LANES }] } },
      },
    },
  });
  const svc = new OutboxSyncService(config, { "app.r": remote.createWriter() });
  cleanups.push(() => svc.stop(2000));
  await svc.start();
  await waitFor(async () => (await remote.count("events")) === 300, "every group of the other lanes", 10_000);
});
