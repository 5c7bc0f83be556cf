// connections = N: up to 2N batches in flight to one target, two on each connection (the second
// behind the first: sent with its COMMIT), or with a writer that takes one per connection N, each
// fenced behind the one before, so the remote commits them in order or not at all. On the engines
// whose writers take concurrent calls, checked by what landed (in the order the remote applied
// it) and by how many calls the writer had open at once.
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { defineConfig } from "../src/config/define.ts";
import { OutboxSyncService } from "../src/drain/service.ts";
import { laneOf } from "../src/lane-key.ts";
import { SQLMiddleware, closeSharedOutboxes } from "../src/outbox/middleware.ts";
import type { OutboxWriter, Statement, WriteOptions, WriteResult } from "../src/writers/writer.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { FAST, memoryLogger, oneApp } from "./support/drain-harness.ts";
import { AUTO_POS, openRemote } from "./support/remote.ts";
import { startTcpProxy, throughProxy } from "./support/tcp-proxy.ts";

const cleanups = cleanupsAfterEach();
cleanups.push(() => closeSharedOutboxes());

const TABLES = ["t0", "t1", "t2", "t3"];
const ROWS = 200;
/** Keys of the tables with lanes: row i has key i % KEYS. */
const KEYS = 8;

/** Each key's rows in the order they landed (row i has key i % KEYS): increasing, once each, is per-key order. */
function perKey(landed: readonly number[]): number[][] {
  return Array.from({ length: KEYS }, (_, k) => landed.filter((n) => n % KEYS === k));
}

/** A writer in front of the real one that counts the calls it has open at once, and can hold or fail one before it goes on. */
class Watched implements OutboxWriter {
  readonly dialect;
  readonly concurrent: boolean;
  readonly pipelined: boolean;
  open = 0;
  mostOpen = 0;
  /** Rows (statements of a row, not the drain's own) in the calls open at once, and the most so far. */
  openRows = 0;
  mostOpenRows = 0;
  calls = 0;
  /** The calls (1: the first) in the order they answered. */
  answered: number[] = [];
  /** Runs before the `call`-th call that carries rows (1: the first) is passed on: a delay, a check, a throw. */
  before: { call: number; run: (options?: WriteOptions) => Promise<void> } | null = null;
  /**
   * A link between, as the drain sees it: it hears `sentMs` late that a call is on its connection,
   * and `answerMs` late its answer. Without a link the batch behind can reach the remote before the
   * one ahead's fence took the ledger row — a race of two connections, which it loses now and then
   * (it fails its fence and the table settles); over a link it arrives a round trip's share later.
   */
  late = { sentMs: 0, answerMs: 0 };
  /** The `call`-th call that carries rows (1: the first) has its answer lost: it throws once the real writer answered (it committed). */
  loseAnswerOf = 0;
  /** Answers lost so far (see loseAnswerOf). */
  lost = 0;
  #rowCalls = 0;

  /** `pipelined`: says so when the real writer does (else each batch in flight has a connection of its own). */
  constructor(
    private readonly inner: OutboxWriter,
    pipelined = false,
  ) {
    this.dialect = inner.dialect;
    this.concurrent = inner.concurrent === true;
    this.pipelined = pipelined && inner.pipelined === true;
  }

  async writeBatch(stmts: Statement[], options?: WriteOptions): Promise<WriteResult[]> {
    const call = ++this.calls;
    this.open += 1;
    this.mostOpen = Math.max(this.mostOpen, this.open);
    const rows = stmts.filter((s) => s.seq > 0).length;
    this.openRows += rows;
    this.mostOpenRows = Math.max(this.mostOpenRows, this.openRows);
    try {
      const before = this.before;
      const rowCall = stmts.some((s) => s.seq > 0) ? ++this.#rowCalls : 0;
      if (rowCall > 0 && rowCall === before?.call) await before.run(options);
      const { sentMs, answerMs } = this.late;
      const onSent = options?.onSent;
      const late = onSent && sentMs > 0 ? { ...options, onSent: () => setTimeout(onSent, sentMs) } : options;
      const results = await this.inner.writeBatch(stmts, late);
      if (answerMs > 0) await Bun.sleep(answerMs);
      if (rowCall > 0 && rowCall === this.loseAnswerOf) {
        this.lost += 1;
        throw new Error("connection reset by peer (after COMMIT)");
      }
      return results;
    } finally {
      this.open -= 1;
      this.openRows -= rows;
      this.answered.push(call);
    }
  }

  close(): Promise<void> | void {
    return this.inner.close?.();
  }
}

describe.each([
  ["postgres", "a connection each"],
  ["postgres", "two on a connection"],
  ["mysql", "a connection each"],
  ["mysql", "two on a connection"],
] as const)("batches in flight behind each other, delivered to %s, %s", (engine, placement) => {
  /** Two batches in flight on each connection, the second pipelined behind the first. */
  const pipelined = placement === "two on a connection";
  /**
   * With `inFlight` batches in flight at most: that many connections, or half as many when
   * pipelined. With `link`, the target is reached through a proxy the test can slow, one connection
   * at a time. With `lanes`, each table has that many and row i is keyed `k${i % KEYS}`.
   */
  async function setup(inFlight: number, tuning: Record<string, unknown> = {}, link = false, lanes = 1) {
    const connections = pipelined ? Math.max(1, inFlight / 2) : inFlight;
    const dir = tempDirCleanedBy(cleanups);
    const remote = await openRemote(engine, { cleanups });
    const proxy = link ? startTcpProxy(remote.port, remote.host) : null;
    if (proxy) cleanups.push(() => proxy.close());
    const connection = proxy ? { url: throughProxy(remote.url, proxy.port) } : remote.connection;
    for (const t of TABLES)
      await remote.exec(
        `CREATE TABLE ${t} (${AUTO_POS[remote.dialect]}, n BIGINT NOT NULL, CONSTRAINT ${t}_n CHECK (n >= 0))`,
      );
    const producer = new SQLMiddleware({ dbDir: dir.file("queue") });
    const writer = new Watched(remote.createWriter({ ...connection, max_connections: connections }), pipelined);
    const log = memoryLogger();
    const config = oneApp(
      dir.file("queue"),
      { r: { writer: remote.writer, connection, tables: TABLES.map((name) => ({ name, lanes })), connections } },
      { batchSize: 40, ...tuning },
    );
    const svc = new OutboxSyncService(config, { "app.r": writer }, { logger: log });
    cleanups.push(() => svc.stop(2000));
    /** Each table's n in the order the remote applied them. */
    const landed = async (t: string) => (await remote.ints(`SELECT n FROM ${t} ORDER BY pos`)).map(([n]) => n!);
    const delivered = () => svc.views().reduce((n, v) => n + v.totals.delivered, 0);
    const drain = async (rows: number) => {
      for (let i = 0; i < 300 && delivered() < rows; i++) {
        await svc.runOnce();
        await Bun.sleep(5);
      }
    };
    const fill = (n: (i: number, t: string) => number = (i) => i, rows = ROWS) => {
      for (let i = 1; i <= rows; i++)
        for (const t of TABLES)
          producer.push(t, `INSERT INTO ${t} (n) VALUES (?)`, [n(i, t)], lanes > 1 ? { key: `k${i % KEYS}` } : {});
    };
    return { remote, proxy, producer, writer, svc, log, landed, drain, fill };
  }
  const inOrder = Array.from({ length: ROWS }, (_, i) => i + 1);

  /**
   * Into t0 of a 4-lane setup, over a link (see Watched.late): rows 1–40 (the first cycle) over keys
   * a and b, creating both lanes' ledger rows; then the second cycle's batch, rows 41–80, all of key
   * a, whose 50th the CHECK refuses; and the batch behind it, 81–120, all of key b (another lane).
   * Returns the keys, each key's part of a list of rows (`of`), and the rows that must land.
   */
  function fillOtherLanes(s: Awaited<ReturnType<typeof setup>>) {
    s.writer.late = { sentMs: 5, answerMs: 30 };
    const [a, b] = [0, 1].map(
      (lane) => Array.from({ length: 50 }, (_, i) => `k${i}`).find((k) => laneOf(k, 4) === lane)!,
    ) as [string, string];
    const keyOf = (i: number) => (i <= 40 ? (i % 2 === 0 ? a : b) : i <= 80 ? a : b);
    for (let i = 1; i <= 120; i++)
      s.producer.push("t0", "INSERT INTO t0 (n) VALUES (?)", [i === 50 ? -1 : i], { key: keyOf(i) });
    const of = (k: string, rows: readonly number[]) => rows.filter((i) => keyOf(i) === k);
    const expected = Array.from({ length: 120 }, (_, i) => i + 1).filter((i) => i !== 50);
    return { a, b, of, expected };
  }

  test.each([
    [4, "two batches over two tables each, each with one behind it"],
    [1, "one batch at a time — pipelined, one connection with a batch behind the first"],
  ])(
    "set up for %d in flight (%s): as many open at once, and each table's rows once and in order",
    async (inFlight) => {
      const s = await setup(inFlight);
      const most = pipelined ? Math.max(2, inFlight) : inFlight;
      s.fill();
      await s.drain(ROWS * TABLES.length);
      for (const t of TABLES) expect({ t, n: await s.landed(t) }).toEqual({ t, n: inOrder });
      expect(s.writer.mostOpen).toBe(most);
      expect(s.svc.targets()[0]!.view().batchesInFlight).toBe(0);
    },
    30_000,
  );

  test("a chain goes on: each batch answered whole sends the next behind the one still in flight, up to 8 batches a cycle", async () => {
    const s = await setup(2); // one chain over the four tables: 160 rows a batch
    s.writer.late = { sentMs: 5, answerMs: 30 };
    const rows = 400;
    s.fill(undefined, rows);
    expect((await s.svc.runOnce()).delivered).toBe(160); // the first cycle: one batch, which creates the ledger rows
    expect((await s.svc.runOnce()).delivered).toBe(8 * 160); // eight batches, two in flight at a time
    expect(s.writer.mostOpen).toBe(2);
    expect((await s.svc.runOnce()).delivered).toBe(160); // the rest
    const all = Array.from({ length: rows }, (_, i) => i + 1);
    for (const t of TABLES) expect({ t, n: await s.landed(t) }).toEqual({ t, n: all });
  }, 30_000);

  test("the batches in flight carry at most batch_max_bytes per connection: the one behind takes what the one ahead leaves", async () => {
    // ~32 bytes a row (its INSERT and its arguments, as batch_max_bytes counts them): a batch ahead
    // of ~90 rows leaves next to nothing for the one behind.
    const maxBytes = 3000;
    const s = await setup(2, { batchMaxBytes: maxBytes });
    s.writer.late = { sentMs: 5, answerMs: 30 };
    s.fill();
    await s.drain(ROWS * TABLES.length);
    const connections = pipelined ? 1 : 2;
    expect(s.writer.mostOpenRows).toBeLessThanOrEqual(Math.floor((maxBytes * connections) / 32));
    expect(s.writer.mostOpen).toBe(2);
    for (const t of TABLES) expect({ t, n: await s.landed(t) }).toEqual({ t, n: inOrder });
  }, 30_000);

  test("with lanes: the chain goes on the same way, each slice fenced behind where the one ahead moves each lane, and every key's rows land once, in order", async () => {
    const s = await setup(2, {}, false, 4);
    s.writer.late = { sentMs: 5, answerMs: 30 };
    const rows = 400;
    s.fill(undefined, rows);
    expect((await s.svc.runOnce()).delivered).toBe(160); // the first cycle creates each lane's ledger row
    expect((await s.svc.runOnce()).delivered).toBe(8 * 160);
    expect(s.writer.mostOpen).toBe(2);
    expect((await s.svc.runOnce()).delivered).toBe(160);
    const all = Array.from({ length: rows }, (_, i) => i + 1);
    for (const t of TABLES) expect({ t, n: await s.landed(t) }).toEqual({ t, n: all });
  }, 30_000);

  test("with lanes: a row the remote refuses in the batch ahead — the batches behind do not commit past it (the cut it left stays through the settlement), and every key lands in order once it is dead-lettered", async () => {
    const s = await setup(2, { maxAttempts: 2 }, false, 4);
    s.writer.late = { sentMs: 5, answerMs: 30 };
    s.fill((i, t) => (t === "t1" && i === 50 ? -1 : i));
    await s.drain(ROWS * TABLES.length - 1);
    for (const t of TABLES) {
      const expected = t === "t1" ? inOrder.filter((n) => n !== 50) : inOrder;
      expect({ t, keys: perKey(await s.landed(t)) }).toEqual({ t, keys: perKey(expected) });
    }
    expect(s.svc.views()[0]!.totals.deadLettered).toBe(1);
  }, 30_000);

  test("with lanes: a batch behind of other lanes than the one ahead commits even when that one fails, and the rows of the one ahead are not confirmed with it", async () => {
    const s = await setup(2, { maxAttempts: 2 }, false, 4);
    const { a, b, of, expected } = fillOtherLanes(s);
    await s.drain(119);
    const landed = await s.landed("t0");
    // Key b's rows went behind the failed batch and committed before key a's rows after it.
    expect(landed.indexOf(81)).toBeLessThan(landed.indexOf(41));
    expect({ a: of(a, landed), b: of(b, landed) }).toEqual({ a: of(a, expected), b: of(b, expected) });
    expect(s.svc.views()[0]!.totals.deadLettered).toBe(1);
    expect(s.svc.totalPending()).toBe(0);
  }, 30_000);

  test("with lanes: the batch ahead refused, the batch behind of other lanes committed and its answer lost — each lane settles from the ledger, and every row lands once", async () => {
    const s = await setup(2, { maxAttempts: 2 }, false, 4);
    const { a, b, of, expected } = fillOtherLanes(s);
    s.writer.loseAnswerOf = 3; // the second cycle's batch behind
    for (let i = 0; i < 300 && (s.svc.totalPending() > 0 || s.svc.views()[0]!.totals.deadLettered === 0); i++) {
      await s.svc.runOnce();
      await Bun.sleep(5);
    }
    expect(s.writer.lost).toBe(1);
    const landed = await s.landed("t0");
    expect(landed.indexOf(81)).toBeLessThan(landed.indexOf(41)); // key b's batch committed first
    expect([...landed].sort((x, y) => x - y)).toEqual(expected); // each row once: none of key b's sent again
    expect({ a: of(a, landed), b: of(b, landed) }).toEqual({ a: of(a, expected), b: of(b, expected) });
    expect(s.svc.totalPending()).toBe(0);
  }, 30_000);

  test("a batch that reaches the remote before the one ahead of it commits fails its fence: nothing lands out of order or twice", async () => {
    const s = await setup(2);
    s.fill();
    let inFlight = 0;
    let whileHeld: number[] = [];
    s.writer.before = {
      // The second cycle's first batch says it is on its connection and waits: the ones behind it
      // reach the remote first. (The first cycle sends one batch: its fences create the ledger
      // rows the ones behind would wait on.)
      call: 2,
      run: async (options) => {
        options?.onSent?.();
        await Bun.sleep(300);
        inFlight = s.svc.targets()[0]!.view().batchesInFlight;
        whileHeld = await Promise.all(TABLES.map(async (t) => (await s.landed(t)).length));
      },
    };
    await s.drain(ROWS * TABLES.length);
    expect(inFlight).toBe(2);
    expect(whileHeld).toEqual([40, 40, 40, 40]); // the first cycle's rows; nothing behind the held batch committed ahead of it
    for (const t of TABLES) expect({ t, n: await s.landed(t) }).toEqual({ t, n: inOrder });
  }, 30_000);

  test("a batch goes behind another only once the writer has that one on its connection", async () => {
    const s = await setup(2);
    s.fill();
    let inFlight = 0;
    s.writer.before = {
      call: 2, // held before it reaches the real writer: not on a connection yet
      run: async () => {
        await Bun.sleep(200);
        inFlight = s.svc.targets()[0]!.view().batchesInFlight;
      },
    };
    await s.drain(ROWS * TABLES.length);
    expect(inFlight).toBe(1);
    expect(s.writer.mostOpen).toBe(2); // the other cycles
    for (const t of TABLES) expect({ t, n: await s.landed(t) }).toEqual({ t, n: inOrder });
  }, 30_000);

  test("a row the remote refuses in the batch ahead: the batches behind it do not commit past it, and the rest lands in order once it is dead-lettered", async () => {
    const s = await setup(2, { maxAttempts: 2 });
    // The CHECK refuses t1's 50th row: in the second cycle's first batch, with batches behind it.
    s.fill((i, t) => (t === "t1" && i === 50 ? -1 : i));
    await s.drain(ROWS * TABLES.length - 1);
    for (const t of TABLES)
      expect({ t, n: await s.landed(t) }).toEqual({ t, n: t === "t1" ? inOrder.filter((n) => n !== 50) : inOrder });
    expect(s.svc.views()[0]!.totals.deadLettered).toBe(1);
  }, 30_000);

  test("a batch lost in flight (the call throws): the ones behind it count as lost, the target backs off, and every row lands once, in order", async () => {
    const s = await setup(2);
    s.fill();
    s.writer.before = {
      call: 3, // the second cycle's second batch, behind its first
      run: async () => {
        throw new Error("connection reset by peer");
      },
    };
    expect((await s.svc.runOnce()).delivered).toBe(160); // the first cycle: one batch, which creates the ledger rows
    const second = await s.svc.runOnce();
    expect(second.targets[0]!.outage).toBe(true);
    expect(second.delivered).toBe(160); // its first batch, answered ahead of the lost one
    await Bun.sleep(100); // the outage backoff (FAST: 60 ms)
    await s.drain(ROWS * TABLES.length);
    for (const t of TABLES) expect({ t, n: await s.landed(t) }).toEqual({ t, n: inOrder });
  }, 30_000);

  // Where the built-in writers run it (two batches on a connection): a slow link costs seconds per placement.
  if (pipelined)
    test("batches complete out of order — one of the pool's connections on a slower link — and each table's rows land once, in order", async () => {
      const s = await setup(4, {}, true);
      s.proxy!.slowConnection(0, 150); // the first the pool opened, which it hands out first when all are idle
      s.fill();
      await s.drain(ROWS * TABLES.length);
      for (const t of TABLES) expect({ t, n: await s.landed(t) }).toEqual({ t, n: inOrder });
      // Some batch was answered before one sent earlier.
      expect(s.writer.answered.some((call, i) => s.writer.answered.slice(i + 1).some((later) => later < call))).toBe(
        true,
      );
      expect(s.writer.mostOpen).toBe(4);
    }, 30_000);
});

test("in the application's own database, where a confirmation goes in parts, the batch ahead is confirmed whole before the one behind is applied", async () => {
  const dir = tempDirCleanedBy(cleanups);
  const remote = await openRemote("postgres", { cleanups });
  for (const t of TABLES.slice(0, 2)) await remote.exec(`CREATE TABLE ${t} (${AUTO_POS.postgres}, n BIGINT NOT NULL)`);
  const file = dir.file("app.db");
  const app = new Database(file);
  cleanups.push(() => app.close());
  app.run("PRAGMA journal_mode = WAL");
  app.run("CREATE TABLE accounts (id INTEGER PRIMARY KEY)"); // the application's own table: confirmations in parts
  const producer = new SQLMiddleware({ database: app });
  const rows = 900;
  for (let n = 1; n <= rows; n++)
    for (const t of TABLES.slice(0, 2)) producer.push(t, `INSERT INTO ${t} (n) VALUES (?)`, [n]);
  const writer = new Watched(remote.createWriter({ max_connections: 2 }));
  const config = defineConfig({
    app: {
      app: {
        dbFile: file,
        ...FAST,
        batchSize: 300,
        db: { r: { writer: "postgres", connection: remote.connection, tables: TABLES.slice(0, 2), connections: 2 } },
      },
    },
  });
  const svc = new OutboxSyncService(config, { "app.r": writer }, { logger: memoryLogger() });
  cleanups.push(() => svc.stop(2000));
  const delivered = () => svc.views().reduce((n, v) => n + v.totals.delivered, 0);
  for (let i = 0; i < 50 && delivered() < 2 * rows; i++) await svc.runOnce();
  expect(writer.mostOpen).toBe(2);
  const inOrder = Array.from({ length: rows }, (_, i) => i + 1);
  for (const t of TABLES.slice(0, 2))
    expect({ t, n: (await remote.ints(`SELECT n FROM ${t} ORDER BY pos`)).map(([n]) => n) }).toEqual({ t, n: inOrder });
  expect(app.query("SELECT count(*) AS n FROM outbox_queue").get()).toEqual({ n: 0 });
}, 30_000);

test.each(["sqlite", "libsql-http"] as const)(
  "a %s writer takes one batch at a time: connections = 4 sends one, and the drain says so at start",
  async (engine) => {
    const dir = tempDirCleanedBy(cleanups);
    const remote = await openRemote(engine, { cleanups });
    for (const t of TABLES) await remote.exec(`CREATE TABLE ${t} (${AUTO_POS[remote.dialect]}, n BIGINT NOT NULL)`);
    const producer = new SQLMiddleware({ dbDir: dir.file("queue") });
    for (let n = 1; n <= 50; n++) for (const t of TABLES) producer.push(t, `INSERT INTO ${t} (n) VALUES (?)`, [n]);
    const writer = new Watched(remote.createWriter());
    const log = memoryLogger();
    const config = oneApp(
      dir.file("queue"),
      { r: { writer: remote.writer, connection: remote.connection, tables: TABLES, connections: 4 } },
      { batchSize: 10 },
    );
    const svc = new OutboxSyncService(config, { "app.r": writer }, { logger: log });
    cleanups.push(() => svc.stop(2000));
    const delivered = () => svc.views().reduce((n, v) => n + v.totals.delivered, 0);
    for (let i = 0; i < 40 && delivered() < 200; i++) await svc.runOnce();
    expect(delivered()).toBe(200);
    expect(writer.mostOpen).toBe(1);
    expect(log.has(/app\.r has connections = 4, but its writer takes one batch at a time/)).toBe(true);
  },
);
