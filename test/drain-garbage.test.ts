import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { OutboxSyncService } from "../src/drain/service.ts";
import { StorageError } from "../src/errors.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { SQLMiddleware } from "../src/outbox/middleware.ts";
import { createWriter } from "../src/writers/registry.ts";
import type { OutboxWriter } from "../src/writers/writer.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { type Fault, FaultyWriter, memoryLogger, oneApp, type Tuning } from "./support/drain-harness.ts";
import { waitFor } from "./support/wait.ts";
import { drainSide } from "./support/queue.ts";
import { QueueForDrain } from "../src/outbox/queue-for-drain.ts";

const cleanups = cleanupsAfterEach();

/** A sqlite remote with table t, a producer, a queue handle and a drain whose writer injects faults. */
function setup(
  tuning: Tuning = {},
  wrap?: (w: OutboxWriter) => OutboxWriter,
  target: { ledger?: boolean; injectOutboxSeq?: boolean } = {},
  now?: () => number,
) {
  const dir = tempDirCleanedBy(cleanups);
  const remote = new Database(dir.file("remote.db"), { create: true });
  remote.run("PRAGMA journal_mode = WAL");
  remote.run("CREATE TABLE t (id INTEGER NOT NULL CHECK (id >= 0))");
  cleanups.push(() => remote.close());
  const writer = new FaultyWriter(createWriter("sqlite", { path: dir.file("remote.db") }));
  const config = oneApp(
    dir.file("outbox"),
    { r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["t"], ...target } },
    tuning,
  );
  const log = memoryLogger();
  const svc = new OutboxSyncService(
    config,
    { "app.r": wrap ? wrap(writer) : writer },
    { logger: log, ...(now ? { now } : {}) },
  );
  cleanups.push(() => svc.stop(1000));
  const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
  const push = (id: number) => producer.push("t", "INSERT INTO t (id) VALUES (?)", [id]);
  // Rowid order is the order the remote inserted rows in.
  const ids = () =>
    remote
      .query<{ id: number }, []>("SELECT id FROM t ORDER BY rowid")
      .all()
      .map((r) => r.id);
  return {
    dir,
    remote,
    writer,
    svc,
    log,
    push,
    ids,
    queue: () => {
      const q = new Outbox(dir.file("outbox/t.db"), "t");
      cleanups.push(() => q.close());
      return q;
    },
  };
}

describe("garbage from a writer", () => {
  const faults: Array<[string, Fault]> = [
    ["throws", "throw"],
    ["returns too few results", "too-few"],
    ["returns too many results", "too-many"],
    ["returns results without ok", "missing-ok"],
    ["returns something that is not an array", "not-array"],
    ["hangs past write_timeout", "hang"],
  ];
  test.each(faults)(
    "a writer that %s is an outage: nothing charged, nothing dead-lettered, delivery resumes",
    async (_name, fault) => {
      const s = setup({ writeTimeout: 0.2 });
      await s.svc.runOnce(); // startup
      for (let i = 0; i < 10; i++) s.push(i);
      s.writer.faults.push(fault);
      const report = await s.svc.runOnce();
      expect(report.outages).toEqual(["app.r"]);
      expect(report.delivered).toBe(0);
      const q = s.queue();
      expect(q.pendingCount()).toBe(10);
      expect(q.head()!.attempts).toBe(0);
      expect(q.deadCount()).toBe(0);
      expect(s.log.has(/target app\.r is unavailable .*nothing charged/)).toBe(true);
      await waitFor(async () => (await s.svc.runOnce(), q.pendingCount() === 0), "delivery after the outage");
      expect(s.ids()).toEqual([...Array(10).keys()]);
      expect(q.deadCount()).toBe(0);
    },
  );

  test("a writer whose writeBatch throws synchronously is an outage too", async () => {
    let broken = true;
    const s = setup({}, (inner) => ({
      dialect: "sqlite",
      writeBatch(stmts) {
        if (broken && stmts.some((st) => st.seq > 0)) throw new TypeError("not even a promise");
        return inner.writeBatch(stmts);
      },
    }));
    s.push(1);
    const report = await s.svc.runOnce();
    expect(report.outages).toEqual(["app.r"]);
    expect(s.queue().head()!.attempts).toBe(0);
    broken = false;
    await waitFor(async () => (await s.svc.runOnce(), s.ids().length === 1), "delivery");
  });

  test("the running loop survives a stream of garbage and keeps delivering afterwards", async () => {
    const s = setup({ writeTimeout: 0.05, outageBackoffCapMinutes: 0.0005 });
    await s.svc.start();
    const kinds: Fault[] = ["throw", "too-few", "too-many", "missing-ok", "not-array", "hang"];
    let n = 0;
    for (const kind of kinds) {
      s.writer.always = kind;
      for (let i = 0; i < 5; i++) s.push(n++);
      await waitFor(
        () =>
          s.writer.batches > 0 &&
          s.log.lines.filter((l) => l.includes("unavailable")).length >= kinds.indexOf(kind) + 1,
        `an outage from ${kind}`,
      );
    }
    s.writer.always = null;
    await waitFor(() => s.ids().length === n, "everything to land after the garbage stops");
    expect(s.ids()).toEqual([...Array(n).keys()]);
    const q = s.queue();
    expect(q.deadCount()).toBe(0);
    s.push(n);
    await waitFor(() => s.ids().length === n + 1, "the loop to still be alive");
  });

  test("without a ledger, a per-row failure charges only the failed row; the ok prefix is confirmed and skipped rows are not charged", async () => {
    const s = setup({}, undefined, { ledger: false });
    await s.svc.runOnce();
    for (const id of [1, 2, 3, 4]) s.push(id);
    s.writer.faults.push(async (stmts, inner) => {
      // Apply the first statement for real, fail the second, skip the rest: a writer that commits statement by statement.
      const [first] = await inner.writeBatch(stmts.slice(0, 1));
      return [
        first!,
        { ok: false, error: "boom", errorClass: "XX001" },
        ...stmts.slice(2).map(() => ({ ok: false as const, error: "skipped", skipped: true })),
      ];
    });
    const report = await s.svc.runOnce();
    expect(report).toMatchObject({ delivered: 1, failed: 1, deadLettered: 0, outages: [] });
    const q = s.queue();
    const rows = q.fetchUnsynced(10);
    expect(rows.map((r) => r.attempts)).toEqual([1, 0, 0]);
    expect(rows[0]).toMatchObject({ lastError: "boom", lastErrorClass: "XX001" });
    expect(rows[0]!.nextAttemptAt).not.toBeNull();
    expect(s.ids()).toEqual([1]);
    await waitFor(async () => (await s.svc.runOnce(), q.pendingCount() === 0), "the retry");
    expect(s.ids()).toEqual([1, 2, 3, 4]);
  });

  test("with a ledger, a failed row behind the head charges nothing: the rows before it go first, then it is charged as the head", async () => {
    const s = setup();
    await s.svc.runOnce();
    for (const id of [1, 2, 3, 4]) s.push(id);
    let failing = true;
    s.writer.always = async (stmts, inner) => {
      const bad = stmts.findIndex((st) => st.seq > 0 && st.args[0] === 3);
      if (!failing || bad < 0) return inner.writeBatch(stmts);
      // A namespace-atomic writer: the row fails, its whole namespace (the fence too) is not applied.
      return stmts.map((_, i) =>
        i === bad
          ? { ok: false as const, error: "boom", errorClass: "XX001" }
          : { ok: false as const, error: "not applied", skipped: true },
      );
    };
    expect(await s.svc.runOnce()).toMatchObject({ delivered: 0, failed: 0 });
    const q = s.queue();
    expect(q.fetchUnsynced(10).map((r) => r.attempts)).toEqual([0, 0, 0, 0]);
    expect(await s.svc.runOnce()).toMatchObject({ delivered: 2, failed: 0 }); // 1 and 2, cut before 3
    expect(await s.svc.runOnce()).toMatchObject({ delivered: 0, failed: 1 }); // 3 is the head now: charged
    expect(q.head()).toMatchObject({ attempts: 1, lastError: "boom" });
    failing = false;
    await waitFor(async () => (await s.svc.runOnce(), q.pendingCount() === 0), "the retry");
    expect(s.ids()).toEqual([1, 2, 3, 4]);
  });

  test("a writer that applies part of a namespace breaks the ledger's contract: the table is held loudly and nothing is confirmed", async () => {
    const s = setup();
    await s.svc.runOnce();
    for (const id of [1, 2, 3]) s.push(id);
    s.writer.faults.push(async (stmts, inner) => {
      const applied = await inner.writeBatch(stmts.slice(0, 2)); // the fence and the first row
      return [...applied, { ok: false, error: "boom" }, { ok: false, error: "not applied", skipped: true }];
    });
    await s.svc.runOnce();
    const q = s.queue();
    expect(q.pendingCount()).toBe(3);
    expect(s.log.has(/error drain: "t" is held \(writer contract\).*apply a namespace whole or not at all/)).toBe(true);
    expect((await s.svc.runOnce()).delivered).toBe(0); // still held
    expect(q.pendingCount()).toBe(3);
  });

  test("a head that keeps killing the drain before it answers is dead-lettered after max_attempts", async () => {
    const s = setup({ maxAttempts: 3 });
    await s.svc.runOnce();
    s.push(1);
    s.push(2);
    const q = s.queue();
    const head = q.head()!.seq;
    // What a drain killed mid-delivery leaves behind: the attempt recorded up front, no outcome.
    for (let i = 0; i < 3; i++) drainSide(q).recordAttempt(head);
    const report = await s.svc.runOnce();
    expect(report.deadLettered).toBe(1);
    expect(q.getDead(head)).toMatchObject({ reason: "max_attempts", attempts: 3 });
    expect(s.ids()).toEqual([2]);
  });

  test("a custom writer (no ledger) reporting ok after a failure in the same namespace does not get that row confirmed", async () => {
    const s = setup({}, undefined, { ledger: false });
    await s.svc.runOnce();
    for (const id of [1, 2, 3]) s.push(id);
    s.writer.faults.push(async (stmts) => [
      { ok: false, error: "nope" },
      ...stmts.slice(1).map(() => ({ ok: true as const, rowsAffected: 1 })),
    ]);
    await s.svc.runOnce();
    const q = s.queue();
    expect(q.pendingCount()).toBe(3);
    expect(q.head()!.attempts).toBe(1);
    expect(s.log.has(/reported seq \d+ ok after a failure/)).toBe(true);
  });
});

describe("a batch that answers after write_timeout", () => {
  test.each([
    ["without a ledger, the table waits for the answer and confirms what it committed", false],
    ["with a ledger, the late batch's fence fails once newer rows went out, so it applies nothing", true],
  ])("a late commit is never overtaken: %s", async (_name, ledger) => {
    const dir = tempDirCleanedBy(cleanups);
    const remote = new Database(dir.file("remote.db"), { create: true });
    remote.run("PRAGMA journal_mode = WAL");
    remote.run("CREATE TABLE kv (k TEXT PRIMARY KEY, v INTEGER NOT NULL)");
    remote.run("CREATE TABLE log (v INTEGER NOT NULL)");
    remote.run("INSERT INTO kv VALUES ('x', 0)");
    cleanups.push(() => remote.close());
    const writer = new FaultyWriter(createWriter("sqlite", { path: dir.file("remote.db") }));
    const tables = [
      { name: "kv", injectOutboxSeq: false },
      { name: "log", injectOutboxSeq: false },
    ];
    const config = oneApp(
      dir.file("outbox"),
      { r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables, ledger } },
      { writeTimeout: 0.1 },
    );
    const log = memoryLogger();
    const svc = new OutboxSyncService(config, { "app.r": writer }, { logger: log });
    cleanups.push(() => svc.stop(1000));
    await svc.runOnce(); // startup
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    const event = (v: number) => {
      producer.push("kv", "UPDATE kv SET v = ? WHERE k = 'x'", [v]);
      producer.push("log", "INSERT INTO log (v) VALUES (?)", [v]);
    };
    event(1);
    let late = "pending";
    let lateResults: Array<{ ok: boolean }> = [];
    writer.faults.push(async (stmts, inner) => {
      await Bun.sleep(400); // past write_timeout: the drain has given up on this call
      lateResults = await inner.writeBatch(stmts);
      late = "answered";
      return lateResults as never;
    });
    expect((await svc.runOnce()).outages).toEqual(["app.r"]);
    event(2);
    // Cycle on while the late batch is still out; it must not be overtaken by a newer batch.
    const kv = svc.targets()[0]!.tables.find((t) => t.name === "kv")!;
    const shown = new Set<string | undefined>();
    while (late === "pending") {
      shown.add(kv.view().held?.reason);
      await svc.runOnce();
      await Bun.sleep(10);
    }
    await waitFor(async () => (await svc.runOnce(), svc.totalPending() === 0), "delivery after the late answer");
    expect(remote.query("SELECT v FROM kv").all()).toEqual([{ v: 2 }]);
    // What the late answer confirmed is not sent again (no duplicate in a table without a key).
    expect(remote.query("SELECT v FROM log ORDER BY rowid").all()).toEqual([{ v: 1 }, { v: 2 }]);
    expect(log.has(/warn drain: .*"kv".*held until the timed-out batch answers/)).toBe(!ledger);
    // The wait is a hold with its reason, as status and sqloutbox_table_held show it, and it ends with the answer.
    expect(shown.has("late answer")).toBe(!ledger);
    expect(kv.view().held).toBeNull();
    // With the ledger the drain did not wait: it delivered again and the late batch's fences failed.
    if (ledger) expect(lateResults.every((r) => !r.ok)).toBe(true);
    // Each of the four rows is counted delivered once, whether a late answer or a batch confirmed it.
    expect(svc.targets()[0]!.totals.delivered).toBe(4);
  });
});

describe("local errors and housekeeping", () => {
  test("a local SQLite error while confirming is logged with its namespace; the ledger settles the rows later: none sent twice, none charged to death, none counted twice", async () => {
    let clock = Date.now();
    const s = setup({}, undefined, {}, () => clock);
    await s.svc.runOnce();
    for (let i = 0; i < 10; i++) s.push(i);
    const { confirmThrough, confirmSlice } = QueueForDrain.prototype;
    let failures = 2; // the confirmation after the batch and its retry while the table is held
    const failing = (self: QueueForDrain) => {
      if (failures-- > 0) throw new StorageError("injected: disk I/O error", self.path, self.namespace);
    };
    QueueForDrain.prototype.confirmThrough = function (this: QueueForDrain, bound: number) {
      failing(this);
      return confirmThrough.call(this, bound);
    };
    QueueForDrain.prototype.confirmSlice = function (this: QueueForDrain, slice: Parameters<typeof confirmSlice>[0]) {
      failing(this);
      return confirmSlice.call(this, slice);
    };
    cleanups.push(() => Object.assign(QueueForDrain.prototype, { confirmThrough, confirmSlice }));
    const report = await s.svc.runOnce();
    expect(report.delivered).toBe(10); // the remote applied them (the ledger says so); only the local confirmation failed
    expect(s.log.has(/"t" is held \(local\).*local error confirming rows applied by app\.r/)).toBe(true);
    const q = s.queue();
    expect(q.pendingCount()).toBe(10);
    await s.svc.runOnce(); // held: the retry fails too
    clock += 60_000; // past the hold: the next cycle settles from the ledger first
    await waitFor(async () => (await s.svc.runOnce(), q.pendingCount() === 0), "settlement after the local error");
    expect(failures).toBeLessThan(0);
    expect(s.ids()).toEqual([...Array(10).keys()]); // applied once: settled from the ledger, not resent
    expect(q.deadCount()).toBe(0);
    expect(s.svc.targets()[0]!.totals.delivered).toBe(10); // counted when applied, not again when settled
  });

  test("compatibility mode: until its setup is done the table shows as held (compat setup), not silently idle, and then delivers", async () => {
    const dir = tempDirCleanedBy(cleanups);
    const remote = new Database(dir.file("remote.db"), { create: true });
    remote.run("CREATE TABLE t (id INTEGER)");
    remote.close();
    const writer = new FaultyWriter(createWriter("sqlite", { path: dir.file("remote.db") }));
    writer.always = "throw"; // the target is down: the setup cannot run
    const config = oneApp(dir.file("outbox"), {
      r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["t"], injectOutboxSeq: true },
    });
    const svc = new OutboxSyncService(config, { "app.r": writer }, { logger: memoryLogger() });
    cleanups.push(() => svc.stop(1000));
    new SQLMiddleware({ dbDir: dir.file("outbox") }).push("t", "INSERT INTO t (id) VALUES (?)", [1]);
    await svc.runOnce();
    const table = svc.targets()[0]!.tables[0]!;
    expect(table.view().held?.reason).toBe("compat setup");
    writer.always = null;
    await waitFor(async () => (await svc.runOnce(), svc.totalPending() === 0), "delivery once the setup ran");
    expect(table.view().held).toBeNull();
  });

  test("compatibility mode: local errors while seeding and moving a colliding fresh queue hold the table until the move succeeds: nothing is sent under colliding seqs", async () => {
    const s = setup({}, undefined, { injectOutboxSeq: true });
    await s.svc.runOnce(); // auto_schema, then stop: the next drain starts on a fresh queue
    await s.svc.stop();
    for (let seq = 1; seq <= 30; seq++) s.remote.run("INSERT INTO t (id, outbox_seq) VALUES (?, ?)", [1000 + seq, seq]);
    for (let i = 0; i < 10; i++) s.push(i);
    const { seedSequence, resequenceAbove } = QueueForDrain.prototype;
    let failures = 2; // seeding, then the first move
    QueueForDrain.prototype.seedSequence = function (this: QueueForDrain, minSeq: number) {
      if (failures-- > 0) throw new StorageError("injected: database is locked", this.path, this.namespace);
      return seedSequence.call(this, minSeq);
    };
    QueueForDrain.prototype.resequenceAbove = function (this: QueueForDrain, minSeq: number) {
      if (failures-- > 0) throw new StorageError("injected: database is locked", this.path, this.namespace);
      return resequenceAbove.call(this, minSeq);
    };
    cleanups.push(() => Object.assign(QueueForDrain.prototype, { seedSequence, resequenceAbove }));
    const log = memoryLogger();
    const config = oneApp(s.dir.file("outbox"), {
      r: { writer: "sqlite", connection: { path: s.dir.file("remote.db") }, tables: ["t"], injectOutboxSeq: true },
    });
    const svc = new OutboxSyncService(
      config,
      { "app.r": createWriter("sqlite", { path: s.dir.file("remote.db") }) },
      { logger: log },
    );
    cleanups.push(() => svc.stop(1000));
    const q = s.queue();
    await waitFor(async () => (await svc.runOnce(), q.pendingCount() === 0), "delivery after the move succeeded");
    expect(failures).toBeLessThan(0);
    expect(log.has(/injected: database is locked/)).toBe(true);
    expect(
      s.remote
        .query<{ id: number }, []>("SELECT id FROM t WHERE id < 1000 ORDER BY outbox_seq")
        .all()
        .map((r) => r.id),
    ).toEqual([...Array(10).keys()]);
    expect(s.remote.query<{ n: number }, []>("SELECT min(outbox_seq) AS n FROM t WHERE id < 1000").get()!.n).toBe(31);
  });

  test("every cleanup_every batches the delivered log is pruned to retain_log_days, keeping the bridging range", async () => {
    const s = setup({ cleanupEvery: 2, retainLogDays: 0 });
    await s.svc.runOnce();
    const local = new Database(s.dir.file("outbox/t.db"));
    cleanups.push(() => local.close());
    for (let round = 0; round < 6; round++) {
      for (let i = 0; i < 5; i++) s.push(round * 5 + i);
      await s.svc.runOnce();
      // Each round's range is made older than RANGE_SPAN_MS, so the next round logs a range of its own.
      local.run("UPDATE outbox_delivered SET first_at = '2020-01-01T00:00:00.000000+00:00'");
      await Bun.sleep(5); // timestamps have millisecond resolution: make earlier rounds strictly older
    }
    expect(s.ids().length).toBe(30);
    const logged = local.query<{ n: number }, []>("SELECT count(*) AS n FROM outbox_delivered").get()!.n;
    expect(logged).toBeGreaterThanOrEqual(1); // the newest range bridges the next row's prev_seq
    expect(logged).toBeLessThan(4); // six rounds logged six ranges: pruning took the older ones
    s.push(99);
    await s.svc.runOnce();
    expect(s.ids().at(-1)).toBe(99); // the chain still verifies after pruning
  });

  test("the same cleanup deletes dead letters replayed more than retain_replayed_days ago, and keeps those never replayed", async () => {
    const s = setup({ cleanupEvery: 1, retainReplayedDays: 0, maxAttempts: 1 });
    await s.svc.runOnce();
    s.push(-1); // refused by the CHECK: dead-lettered at once
    s.push(-2);
    await waitFor(async () => (await s.svc.runOnce(), s.queue().deadCount() === 2), "both rows dead-lettered");
    const q = s.queue();
    const [first, second] = q.listDead().map((d) => d.seq);
    q.replayDead(first!); // still refused: dead again as a new letter; the replayed one is history
    await Bun.sleep(5); // replayed_at must be strictly older than the cleanup's cutoff
    s.push(1);
    await waitFor(async () => (await s.svc.runOnce(), s.ids().includes(1)), "a batch, and with it a cleanup");
    const left = q.listDead().map((d) => [d.seq, d.replayedAt === null]);
    expect(left).not.toContainEqual([first!, false]); // the replayed letter is gone
    expect(left).toContainEqual([second!, true]); // the unreplayed one stays
  });

  test("integrityScan reports every served file and says clean", async () => {
    const s = setup();
    s.push(1);
    await s.svc.runOnce();
    const report = s.svc.integrityScan();
    expect(report.ok).toBe(true);
    expect(report.files.map((f) => f.file)).toEqual([s.dir.file("outbox/t.db")]);
    expect(s.log.has(/integrity scan of 1 file\(s\): clean/)).toBe(true);
  });
});

describe("scheduling", () => {
  test("a commit wakes the drain instead of waiting out a long flush_interval", async () => {
    const s = setup({ flushInterval: 120, tableFlushThreshold: 1 });
    await s.svc.start();
    s.push(42);
    await waitFor(() => s.ids().length === 1, "delivery long before flush_interval", 20_000);
    expect(s.ids()).toEqual([42]);
  });

  test("a table below the threshold waits for table_max_wait, then goes out", async () => {
    let shift = 0; // the drain's clock runs ahead of the wall clock by this much
    const s = setup(
      { flushInterval: 0.01, tableFlushThreshold: 1000, tableMaxWait: 30 },
      undefined,
      {},
      () => Date.now() + shift,
    );
    await s.svc.runOnce();
    s.push(1);
    const early = await s.svc.runOnce();
    expect(early.delivered).toBe(0);
    expect(early.targets[0]!.wakeAt).toBeGreaterThan(Date.now() + 29_000); // the row's creation + table_max_wait
    shift = 29_000;
    expect((await s.svc.runOnce()).delivered).toBe(0); // not yet
    shift = 31_000;
    expect((await s.svc.runOnce()).delivered).toBe(1);
  });
});

describe("dialect", () => {
  test("a custom writer without a dialect and no configured one is rewritten for sqlite, with a warning", async () => {
    const s = setup({}, (inner) => ({ writeBatch: (stmts) => inner.writeBatch(stmts) }));
    s.push(5);
    await s.svc.runOnce();
    expect(s.ids()).toEqual([5]);
    expect(
      s.log.lines.filter((l) => /target app\.r: the writer has no dialect and none is configured/.test(l)),
    ).toHaveLength(1);
  });
});

describe("no hot spin", () => {
  test("a writer that answers 'skipped' for every head makes no progress and the loop does not spin on it", async () => {
    const s = setup({ flushInterval: 0.2, batchSize: 2 }); // the commit watcher polls every 50 ms
    for (let i = 0; i < 5; i++) s.push(i);
    await s.svc.runOnce(); // startup + a first real batch of 2
    s.writer.always = async (stmts) => stmts.map(() => ({ ok: false as const, error: "skipped", skipped: true }));
    const before = s.writer.batches;
    const report = await s.svc.runOnce();
    expect(report).toMatchObject({ delivered: 0, failed: 0, more: false });
    expect(s.queue().head()!.attempts).toBe(0);
    await s.svc.start();
    await Bun.sleep(300);
    // A spinning loop would have sent hundreds of batches by now, one woken by its own bookkeeping
    // commits every poll (6 in 300 ms); flush_interval paces it instead.
    expect(s.writer.batches - before).toBeLessThanOrEqual(4);
  });
});
