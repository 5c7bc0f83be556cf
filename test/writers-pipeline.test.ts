// The postgres and mysql writers pipeline a batch: every statement is sent without waiting for the
// one before, and PostgreSQL's COMMIT with them. Round trips are counted at a TCP proxy that delays
// every chunk (test/support/tcp-proxy.ts: a turn is the client sending again after an answer), so
// what is asserted is behaviour — how often the writer waited — not speed. The failure tests show
// that a statement failing inside such a batch takes nothing of its namespace with it, and no other
// namespace twice: each namespace opens with a counter its "fence" moves, as the drain's ledger does.
import { Database } from "bun:sqlite";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { WriteError } from "../src/errors.ts";
import { createWriter } from "../src/writers/registry.ts";
import type { OutboxWriter, Statement, WriteResult } from "../src/writers/writer.ts";
import { startHranaServer } from "./support/hrana-server.ts";
import { createServerDb, type ServerDb, type ServerEngine } from "./support/server-db.ts";
import { startTcpProxy, type TcpProxy, throughProxy } from "./support/tcp-proxy.ts";
import { makeTempDir } from "./support/tmp.ts";

const NAMESPACES = ["a", "b", "c", "d"];
/** The link the round-trip tests put between writer and server: long enough that no answer overtakes a pipelined write. */
const RTT_MS = 30;

/** A statement of namespace `ns` in the engine's placeholders. */
type Build = (ns: string, seq: number, sql: string, args: Statement["args"], fence?: boolean) => Statement;

function server(engine: ServerEngine) {
  const ph = (n: number) => (engine === "postgres" ? `$${n}` : "?");
  let db: ServerDb;
  let proxy: TcpProxy;
  let seq = 0;
  const stmt: Build = (ns, s, sql, args, fence) => ({
    sql: sql.replace(/\$(\d+)/g, (_m, n: string) => ph(Number(n))),
    args,
    namespace: ns,
    seq: s,
    ...(fence ? { fence: true } : {}),
  });
  /** Opens namespace `ns` as the drain's fence does: moves its counter, which must move once per applied batch. */
  const fence = (ns: string) => stmt(ns, 0, "UPDATE fences SET moved = moved + 1 WHERE ns = $1", [ns], true);
  const insert = (ns: string, id: number, note = `row ${id} of ${ns}`) =>
    stmt(ns, ++seq, `INSERT INTO ${ns} (id, note) VALUES ($1, $2)`, [id, note]);
  beforeAll(async () => {
    db = await createServerDb(engine);
    for (const ns of NAMESPACES) await db.sql.unsafe(`CREATE TABLE ${ns} (id BIGINT PRIMARY KEY, note TEXT)`);
    await db.sql.unsafe("CREATE TABLE fences (ns VARCHAR(10) PRIMARY KEY, moved INTEGER NOT NULL)");
    for (const ns of NAMESPACES) await db.sql.unsafe(`INSERT INTO fences VALUES ('${ns}', 0)`);
    proxy = startTcpProxy(db.port, db.host, { rttMs: RTT_MS });
  });
  afterAll(async () => {
    proxy?.close();
    await db?.drop();
  });
  return {
    stmt,
    fence,
    insert,
    /** A writer through the proxy. */
    writer(extra: Record<string, unknown> = {}): OutboxWriter {
      return createWriter(engine, {
        url: throughProxy(db.url, proxy.port),
        connect_timeout: 5,
        batch_timeout: 10,
        ...extra,
      });
    },
    get proxy() {
      return proxy;
    },
    async moved(): Promise<Record<string, number>> {
      const rows = (await db.sql.unsafe("SELECT ns, moved FROM fences ORDER BY ns").values()) as [string, number][];
      return Object.fromEntries(rows.map(([ns, n]) => [ns, Number(n)]));
    },
    async ids(ns: string): Promise<number[]> {
      const rows = (await db.sql.unsafe(`SELECT id FROM ${ns} ORDER BY id`).values()) as [unknown][];
      return rows.map(([id]) => Number(id));
    },
    exec: (sql: string) => db.sql.unsafe(sql),
  };
}

/** A batch as the drain sends one: per namespace its fence, then `rows` INSERTs (coalesced by the writer). */
function drainBatch(s: ReturnType<typeof server>, rows: number, first: number, note?: string): Statement[] {
  return NAMESPACES.flatMap((ns) => [
    s.fence(ns),
    ...Array.from({ length: rows }, (_, i) => s.insert(ns, first + i, note)),
  ]);
}

const shape = (r: WriteResult) => (r.ok ? "ok" : r.skipped ? "skipped" : r.remoteSchema ? "schema" : "failed");

/** Sends `ahead`, then `behind` while it is in flight, once the writer has `ahead` on its connection (as the drain does). */
async function sendTwo(
  writer: OutboxWriter,
  ahead: Statement[],
  behind: Statement[],
  onBehindSent?: () => void,
): Promise<{ ahead: Promise<WriteResult[]>; behind: Promise<WriteResult[]> }> {
  const first = writer.writeBatch(ahead, { onSent: () => void 0 });
  await Bun.sleep(0);
  return { ahead: first, behind: writer.writeBatch(behind, onBehindSent ? { onSent: onBehindSent } : {}) };
}

/**
 * On the writer's one connection, a batch whose namespace b fails (a duplicate key), and one behind
 * it: the one ahead leaves nothing of b (re-run without it), the one behind lands whole — had it
 * run inside the aborted transaction, its statements would have failed too.
 */
async function failureAheadLeavesTheOneBehindWhole(s: ReturnType<typeof server>, errorClass: string): Promise<void> {
  const writer = s.writer({ coalesce: false });
  try {
    await s.exec("UPDATE fences SET moved = 0");
    expect((await writer.writeBatch(drainBatch(s, 1, 500))).every((r) => r.ok)).toBe(true); // connected, prepared
    await s.exec("INSERT INTO b (id, note) VALUES (511, 'already there')");
    const two = await sendTwo(writer, drainBatch(s, 2, 510), drainBatch(s, 2, 520));
    expect((await two.behind).every((r) => r.ok)).toBe(true);
    const results = await two.ahead;
    // Per namespace its fence and two rows: b's second row (511) fails, its fence and first row are skipped.
    const a = ["ok", "ok", "ok"] as const;
    expect(results.map(shape)).toEqual([...a, "skipped", "skipped", "failed", ...a, ...a]);
    expect(results[5]).toMatchObject({ ok: false, errorClass });
    expect(await s.moved()).toEqual({ a: 3, b: 2, c: 3, d: 3 });
    const ours = (ids: number[]) => ids.filter((id) => id >= 500 && id < 600);
    expect(ours(await s.ids("b"))).toEqual([500, 511, 520, 521]);
    expect(ours(await s.ids("c"))).toEqual([500, 510, 511, 520, 521]);
  } finally {
    await writer.close?.();
  }
}

/** What differs between the two engines' pipelines; every test below runs against both. */
interface Pipeline {
  engine: ServerEngine;
  /** Driver codes: a duplicate key, a table the remote lacks. */
  codes: { duplicate: string; noTable: string };
  /**
   * Round trips of a good batch on a warm connection: PostgreSQL sends BEGIN, the statements and
   * COMMIT at once; MySQL sends COMMIT once the statements' outcomes are known.
   */
  turns: number;
  /**
   * Two batches, the second sent while the first is in flight on the only connection: PostgreSQL
   * puts it on the wire at once, behind the first, in a transaction of its own (one round trip for
   * both); MySQL sends it with the first's COMMIT, not before — it would run inside it (three).
   */
  behind: { atOnce: boolean; turns: number };
  /** A statement of 65 536 parameters: who refuses it — Bun before sending it, or the server — and the code. */
  tooManyParameters: { by: string; code: string };
}

const PIPELINES: Pipeline[] = [
  {
    engine: "postgres",
    codes: { duplicate: "23505", noTable: "42P01" },
    turns: 1,
    behind: { atOnce: true, turns: 1 },
    tooManyParameters: { by: "Bun, before sending it", code: "ERR_POSTGRES_TOO_MANY_PARAMETERS" },
  },
  {
    engine: "mysql",
    codes: { duplicate: "1062", noTable: "1146" },
    turns: 2,
    behind: { atOnce: false, turns: 3 },
    tooManyParameters: { by: "the server", code: "1390" },
  },
];

describe.each(PIPELINES.map((p) => [p.engine, p] as const))("the %s writer pipelines a batch", (engine, fx) => {
  const s = server(engine);

  test(`a good batch of four namespaces, each opened by its fence, takes ${fx.turns} round trip(s); so does one of 2 000 rows (~200 KB)`, async () => {
    const writer = s.writer();
    try {
      // The first batch on a connection prepares each statement text, a round trip or two each.
      expect((await writer.writeBatch(drainBatch(s, 5, 1))).every((r) => r.ok)).toBe(true);
      let before = s.proxy.turns;
      expect((await writer.writeBatch(drainBatch(s, 5, 100))).every((r) => r.ok)).toBe(true);
      expect(s.proxy.turns - before).toBe(fx.turns);
      // Past Bun's 64 KB pipeline window: 500 rows of ~100 bytes per namespace, the rest of it sent
      // in the event-loop turns after the first. A link long enough that no answer comes back
      // before them, even on a loaded machine.
      const note = "n".repeat(60);
      expect((await writer.writeBatch(drainBatch(s, 500, 1_000, note))).every((r) => r.ok)).toBe(true);
      s.proxy.rttMs = 300;
      before = s.proxy.turns;
      expect((await writer.writeBatch(drainBatch(s, 500, 10_000, note))).every((r) => r.ok)).toBe(true);
      expect(s.proxy.turns - before).toBe(fx.turns);
      expect(await s.moved()).toEqual({ a: 4, b: 4, c: 4, d: 4 });
      // What landed, not what the writer said: every row of the four batches, once.
      const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
      const all = [...range(1, 5), ...range(100, 5), ...range(1_000, 500), ...range(10_000, 500)];
      for (const ns of NAMESPACES) expect({ ns, ids: await s.ids(ns) }).toEqual({ ns, ids: all });
    } finally {
      s.proxy.rttMs = RTT_MS;
      await writer.close?.();
    }
  });

  test(`a statement the server fails rolls the whole pipelined batch back: its namespace lands nothing, the others once, and it is the row's fault (${fx.codes.duplicate})`, async () => {
    const writer = s.writer({ coalesce: false });
    try {
      await s.exec("DELETE FROM b");
      await s.exec("UPDATE fences SET moved = 0");
      await s.exec("INSERT INTO b (id, note) VALUES (2, 'already there')");
      const results = await writer.writeBatch([
        s.fence("a"),
        s.insert("a", 50),
        s.fence("b"),
        s.insert("b", 1),
        s.insert("b", 2),
        s.insert("b", 3),
        s.fence("c"),
        s.insert("c", 50),
      ]);
      expect(results.map(shape)).toEqual(["ok", "ok", "skipped", "skipped", "failed", "skipped", "ok", "ok"]);
      expect(results[4]).toMatchObject({ ok: false, errorClass: fx.codes.duplicate });
      expect(await s.moved()).toEqual({ a: 1, b: 0, c: 1, d: 0 });
      expect(await s.ids("b")).toEqual([2]);
    } finally {
      await writer.close?.();
    }
  });

  test(`a statement on a table the remote lacks is the schema's fault (${fx.codes.noTable}), and nothing of its namespace lands`, async () => {
    const writer = s.writer();
    try {
      await s.exec("UPDATE fences SET moved = 0");
      const results = await writer.writeBatch([
        s.fence("a"),
        s.insert("a", 60),
        s.fence("b"),
        s.stmt("b", 999, "INSERT INTO missing (id) VALUES ($1)", [1]),
        s.fence("c"),
        s.insert("c", 60),
      ]);
      expect(results.map(shape)).toEqual(["ok", "ok", "skipped", "schema", "ok", "ok"]);
      expect(results[3]).toMatchObject({ errorClass: fx.codes.noTable, remoteSchema: true });
      expect(await s.moved()).toEqual({ a: 1, b: 0, c: 1, d: 0 });
    } finally {
      await writer.close?.();
    }
  });

  test(`a statement of 65 536 parameters, refused by ${fx.tooManyParameters.by}, is not committed with the rest: ROLLBACK goes instead of COMMIT, the others land once`, async () => {
    const writer = s.writer({ coalesce: false });
    try {
      await s.exec("UPDATE fences SET moved = 0");
      const n = 65_536;
      const refused = s.stmt(
        "b",
        998,
        `INSERT INTO b (id) VALUES ${Array.from({ length: n }, (_, i) => `($${i + 1})`).join(", ")}`,
        Array.from({ length: n }, (_, i) => 100_000 + i),
      );
      const results = await writer.writeBatch([
        s.fence("a"),
        s.insert("a", 70),
        s.fence("b"),
        s.insert("b", 70),
        refused,
        s.insert("b", 71),
        s.fence("c"),
        s.insert("c", 70),
      ]);
      expect(results.map(shape)).toEqual(["ok", "ok", "skipped", "skipped", "failed", "skipped", "ok", "ok"]);
      expect(results[4]).toMatchObject({ errorClass: fx.tooManyParameters.code });
      expect(await s.moved()).toEqual({ a: 1, b: 0, c: 1, d: 0 });
      expect((await s.ids("b")).filter((id) => id >= 70)).toEqual([]);
    } finally {
      await writer.close?.();
    }
  });

  test(`a batch sent while one is in flight on the only connection goes behind it in a transaction of its own: ${fx.behind.turns} round trip(s) for the two`, async () => {
    const writer = s.writer(); // one connection
    try {
      await s.exec("UPDATE fences SET moved = 0");
      expect((await writer.writeBatch(drainBatch(s, 3, 400))).every((r) => r.ok)).toBe(true); // connected, prepared
      const before = s.proxy.turns;
      let behindOnWire = false;
      const two = await sendTwo(writer, drainBatch(s, 3, 410), drainBatch(s, 3, 420), () => (behindOnWire = true));
      await Bun.sleep(0);
      expect(behindOnWire).toBe(fx.behind.atOnce); // on the connection before the one ahead is answered, or not
      expect((await two.ahead).every((r) => r.ok)).toBe(true);
      expect((await two.behind).every((r) => r.ok)).toBe(true);
      expect(s.proxy.turns - before).toBe(fx.behind.turns);
      expect(await s.moved()).toEqual({ a: 3, b: 3, c: 3, d: 3 });
      for (const ns of NAMESPACES)
        expect({ ns, ids: (await s.ids(ns)).filter((id) => id >= 400 && id < 500) }).toEqual({
          ns,
          ids: [400, 401, 402, 410, 411, 412, 420, 421, 422],
        });
    } finally {
      await writer.close?.();
    }
  });

  test(`with pipeline = false a batch sent while one is in flight on the only connection waits for its answer: ${fx.turns} round trip(s) each`, async () => {
    const writer = s.writer({ pipeline: false });
    try {
      expect(writer.pipelined).toBe(false);
      expect((await writer.writeBatch(drainBatch(s, 2, 430))).every((r) => r.ok)).toBe(true); // connected, prepared
      const before = s.proxy.turns;
      const two = await sendTwo(writer, drainBatch(s, 2, 440), drainBatch(s, 2, 450));
      expect((await two.ahead).every((r) => r.ok)).toBe(true);
      expect((await two.behind).every((r) => r.ok)).toBe(true);
      expect(s.proxy.turns - before).toBe(2 * fx.turns);
      expect((await s.ids("a")).filter((id) => id >= 430 && id < 460)).toEqual([430, 431, 440, 441, 450, 451]);
    } finally {
      await writer.close?.();
    }
  });

  test("a statement the server fails in the batch ahead on the connection leaves nothing of its namespace, and not the one behind it: the one ahead is re-run without its namespace, the one behind lands whole", () =>
    failureAheadLeavesTheOneBehindWhole(s, fx.codes.duplicate));

  test("a link cut under two batches on the one connection fails both (WriteError), nothing of either lands, and the next batch gets a new connection", async () => {
    const writer = s.writer({ batch_timeout: 1 });
    try {
      await s.exec("UPDATE fences SET moved = 0");
      expect((await writer.writeBatch(drainBatch(s, 1, 600))).every((r) => r.ok)).toBe(true); // connected, prepared
      s.proxy.rttMs = 400;
      const two = await sendTwo(writer, drainBatch(s, 1, 610), drainBatch(s, 1, 620));
      await Bun.sleep(50); // both inside the proxy, half a round trip from the server
      s.proxy.cut("blackhole");
      expect(await two.ahead.catch((e: unknown) => e)).toBeInstanceOf(WriteError);
      expect(await two.behind.catch((e: unknown) => e)).toBeInstanceOf(WriteError);
      s.proxy.restore();
      s.proxy.rttMs = RTT_MS;
      expect((await writer.writeBatch(drainBatch(s, 1, 630))).every((r) => r.ok)).toBe(true);
      expect(await s.moved()).toEqual({ a: 2, b: 2, c: 2, d: 2 });
      expect((await s.ids("d")).filter((id) => id >= 600 && id < 700)).toEqual([600, 630]);
    } finally {
      s.proxy.restore();
      s.proxy.rttMs = RTT_MS;
      await writer.close?.();
    }
  });

  test("a link cut while the pipelined batch is on its way is an outage (WriteError), and nothing of it lands", async () => {
    const writer = s.writer();
    try {
      await s.exec("UPDATE fences SET moved = 0");
      expect((await writer.writeBatch(drainBatch(s, 2, 200))).every((r) => r.ok)).toBe(true); // connected, prepared
      s.proxy.rttMs = 400;
      const pending = writer.writeBatch(drainBatch(s, 2, 300));
      await Bun.sleep(50); // the batch is inside the proxy, half a round trip from the server
      s.proxy.cut();
      expect(await pending.catch((e: unknown) => e)).toBeInstanceOf(WriteError);
      expect(await s.moved()).toEqual({ a: 1, b: 1, c: 1, d: 1 });
      expect(await s.ids("c")).not.toContain(300);
    } finally {
      s.proxy.restore();
      s.proxy.rttMs = RTT_MS;
      await writer.close?.();
    }
  });
});

describe.each(PIPELINES.map((p) => [p.engine, p] as const))("the %s writer's pool of connections", (engine, fx) => {
  const s = server(engine);

  test(`a batch goes on a free connection that has run its texts: once each connection knows its table's, each batch takes ${fx.turns} round trip(s)`, async () => {
    const writer = s.writer({ max_connections: 2 });
    const batch = (ns: string, id: number) => [s.fence(ns), s.insert(ns, id), s.insert(ns, id + 1)];
    try {
      // Both at once: one connection each, and each prepares its batch's texts — so neither is on
      // its connection when issued, and neither says it is (the drain then waits for the answer).
      const said: string[] = [];
      const first = await Promise.all(
        ["a", "b"].map((ns) => writer.writeBatch(batch(ns, 1), { onSent: () => said.push(ns) })),
      );
      expect(first.flat().every((r) => r.ok)).toBe(true);
      expect(said).toEqual([]);
      // One at a time, both connections free: each batch picks the one that knows its INSERT (the
      // other would prepare it first, two round trips more).
      for (const [ns, id] of [
        ["a", 10],
        ["a", 20],
        ["b", 10],
        ["b", 20],
        ["a", 30],
      ] as const) {
        const before = s.proxy.turns;
        expect((await writer.writeBatch(batch(ns, id))).every((r) => r.ok)).toBe(true);
        expect({ ns, id, turns: s.proxy.turns - before }).toEqual({ ns, id, turns: fx.turns });
      }
      expect(await s.ids("a")).toEqual([1, 2, 10, 11, 20, 21, 30, 31]);
      expect(await s.ids("b")).toEqual([1, 2, 10, 11, 20, 21]);
    } finally {
      await writer.close?.();
    }
  });

  test("a batch behind one of the same texts goes behind it on its connection, not on a free one that would prepare them first: a table's batches keep to one connection", async () => {
    const writer = s.writer({ max_connections: 4 });
    const batch = (ns: string, id: number) => [s.fence(ns), s.insert(ns, id), s.insert(ns, id + 1)];
    const opened = s.proxy.connections;
    try {
      // Two tables, two batches each, all at once: each table's second goes behind its first.
      const answers = await Promise.all([
        writer.writeBatch(batch("c", 1)),
        writer.writeBatch(batch("c", 10)),
        writer.writeBatch(batch("d", 1)),
        writer.writeBatch(batch("d", 10)),
      ]);
      expect(answers.flat().every((r) => r.ok)).toBe(true);
      expect(s.proxy.connections - opened).toBe(2);
      // Once both connections know their table's texts, a free connection that does not is not taken either.
      for (const id of [20, 30])
        expect(
          (await Promise.all([writer.writeBatch(batch("c", id)), writer.writeBatch(batch("c", id + 100))]))
            .flat()
            .every((r) => r.ok),
        ).toBe(true);
      expect(s.proxy.connections - opened).toBe(2);
      expect(await s.ids("c")).toEqual([1, 2, 10, 11, 20, 21, 30, 31, 120, 121, 130, 131]);
      expect(await s.ids("d")).toEqual([1, 2, 10, 11]);
    } finally {
      await writer.close?.();
    }
  });
});

describe("the libsql writer over Hrana", () => {
  test("a good batch of four namespaces is one HTTP request, one round trip: its steps run on the server, each on the success of the one before", async () => {
    const dir = makeTempDir();
    const file = dir.file("remote.db");
    const db = new Database(file, { create: true });
    db.run("PRAGMA journal_mode = WAL");
    for (const ns of NAMESPACES) db.run(`CREATE TABLE ${ns} (id INTEGER PRIMARY KEY, note TEXT)`);
    db.close();
    const hrana = startHranaServer({ file });
    const proxy = startTcpProxy(hrana.port, "127.0.0.1", { rttMs: RTT_MS });
    const writer = createWriter("libsql", { url: `http://127.0.0.1:${proxy.port}` });
    try {
      const batch = (first: number) =>
        NAMESPACES.flatMap((ns) =>
          Array.from(
            { length: 5 },
            (_, i): Statement => ({
              sql: `INSERT INTO ${ns} (id, note) VALUES (?, ?)`,
              args: [first + i, "x"],
              namespace: ns,
              seq: first + i,
            }),
          ),
        );
      expect((await writer.writeBatch(batch(1))).every((r) => r.ok)).toBe(true);
      const [requests, turns] = [hrana.requests, proxy.turns];
      expect((await writer.writeBatch(batch(100))).every((r) => r.ok)).toBe(true);
      expect([hrana.requests - requests, proxy.turns - turns]).toEqual([1, 1]);
      const landed = new Database(file, { readonly: true });
      try {
        for (const ns of NAMESPACES)
          expect({ ns, ids: landed.query(`SELECT id FROM ${ns} ORDER BY id`).values().flat() }).toEqual({
            ns,
            ids: [1, 2, 3, 4, 5, 100, 101, 102, 103, 104],
          });
      } finally {
        landed.close();
      }
    } finally {
      await writer.close?.();
      proxy.close();
      await hrana.stop();
      dir.cleanup();
    }
  });
});
