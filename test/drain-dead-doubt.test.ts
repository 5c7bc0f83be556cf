// A dead letter the remote may have applied, through the real drain into a SQLite remote: a head
// skipped while its batch is on its way, or after its batch was lost, and a head the drain itself
// gives up while a batch of its own that carried it is unanswered. What the remote did is read from
// the remote; what the letter says, from the queue file; a replay is refused while it is in doubt.
import { Database } from "bun:sqlite";
import { expect, test } from "bun:test";
import { OutboxSyncService } from "../src/drain/service.ts";
import { ReplayRefusedError } from "../src/errors.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { SQLMiddleware } from "../src/outbox/middleware.ts";
import { createWriter } from "../src/writers/registry.ts";
import type { OutboxWriter } from "../src/writers/writer.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { FaultyWriter, memoryLogger, oneApp } from "./support/drain-harness.ts";
import { errorOf } from "./support/errors.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();

/** A drain of table `t` (ids must be ≥ 0 on the remote) into a SQLite file, a producer and the operator's view of the queue. */
function world(tuning: { maxAttempts?: number } = {}) {
  const dir = tempDirCleanedBy(cleanups);
  const remote = new Database(dir.file("remote.db"), { create: true });
  remote.run("PRAGMA journal_mode = WAL");
  remote.run("CREATE TABLE t (id INTEGER NOT NULL CHECK (id >= 0))");
  cleanups.push(() => remote.close());
  const config = oneApp(
    dir.file("outbox"),
    { r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["t"] } },
    { maxAttempts: tuning.maxAttempts ?? 5, backoffUnitSeconds: 0.001 },
  );
  const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
  const push = (id: number) => producer.push("t", "INSERT INTO t (id) VALUES (?)", [id]);
  const drain = (writer: OutboxWriter) => {
    const logger = memoryLogger();
    const svc = new OutboxSyncService(config, { "app.r": writer }, { logger });
    cleanups.push(() => svc.stop(2000));
    return { svc, logger };
  };
  const operator = () => {
    const ob = new Outbox(dir.file("outbox/t.db"), "t");
    cleanups.push(() => ob.close());
    return ob;
  };
  const ids = () =>
    remote
      .query<{ id: number }, []>("SELECT id FROM t ORDER BY rowid")
      .all()
      .map((r) => r.id);
  const sqlite = () => createWriter("sqlite", { path: dir.file("remote.db") });
  return { push, drain, operator, ids, sqlite };
}

/** Runs cycles until `done` (an outage backs the target off for a few milliseconds first). */
async function until(svc: OutboxSyncService, done: () => boolean, what: string): Promise<void> {
  await waitFor(async () => (await svc.runOnce(), done()), what);
}

test("a head skipped while its batch is on its way is applied by that batch: its letter says so, and a replay is refused for good", async () => {
  const w = world();
  const writer = new FaultyWriter(w.sqlite());
  const { svc, logger } = w.drain(writer);
  await svc.runOnce(); // the ledger
  const seq = w.push(1);
  let release = () => {};
  const onTheWay = new Promise<void>((resolve) => (release = resolve));
  let sent = false;
  writer.faults.push(async (stmts, inner) => {
    sent = true;
    await onTheWay; // the operator skips the head now, while the batch is in flight
    return inner.writeBatch(stmts);
  });
  const cycle = svc.runOnce();
  await waitFor(() => sent, "the batch on its way");
  const ob = w.operator();
  ob.skipHead(seq);
  expect(ob.getDead(seq)!.remote).toBe("in doubt");
  release();
  await cycle;
  expect(w.ids()).toEqual([1]);
  expect(ob.getDead(seq)!.remote).toBe("applied");
  expect(logger.has(/dead letter 1 of "t" on app\.r: applied by the remote after they were dead-lettered/)).toBe(true);
  expect(errorOf(() => ob.replayDead(seq, undefined, { force: true }))).toMatchObject({
    code: "E_REPLAY_REFUSED",
    remote: "applied",
  });
  await svc.runOnce();
  expect(w.ids()).toEqual([1]);
  expect(ob.pendingCount()).toBe(0);
});

test("a head skipped after its batch was lost is in doubt until the drain's next fence passes it: then it is not applied and replays once", async () => {
  const w = world();
  const writer = new FaultyWriter(w.sqlite());
  const { svc, logger } = w.drain(writer);
  await svc.runOnce();
  const seq = w.push(1);
  writer.faults.push("throw"); // lost before the remote saw it: the drain cannot know
  expect((await svc.runOnce()).outages).toEqual(["app.r"]);
  const ob = w.operator();
  ob.skipHead(seq);
  const refused = errorOf<ReplayRefusedError>(() => ob.replayDead(seq));
  expect(refused).toBeInstanceOf(ReplayRefusedError);
  expect(refused.remote).toBe("in doubt");
  w.push(2); // the next row of its lane: its fence moves the ledger past the letter, without it
  await until(svc, () => w.ids().length === 1, "row 2");
  expect(w.ids()).toEqual([2]);
  expect(ob.getDead(seq)!.remote).toBe("not applied");
  expect(logger.has(/dead letter 1 of "t" on app\.r: settled, the remote never applied them/)).toBe(true);
  ob.replayDead(seq);
  await until(svc, () => w.ids().length === 2, "the replayed row");
  expect(w.ids()).toEqual([2, 1]);
});

test("a head skipped after its batch committed unanswered is settled applied from the ledger: never replayed, never applied twice", async () => {
  const w = world();
  const writer = new FaultyWriter(w.sqlite());
  const { svc } = w.drain(writer);
  await svc.runOnce();
  const seq = w.push(1);
  writer.faults.push("commit-then-throw");
  expect((await svc.runOnce()).outages).toEqual(["app.r"]);
  const ob = w.operator();
  ob.skipHead(seq); // before the drain settles: it is a dead letter the remote applied
  expect(ob.getDead(seq)!.remote).toBe("in doubt");
  await until(svc, () => ob.getDead(seq)!.remote !== "in doubt", "the settlement");
  expect(ob.getDead(seq)!.remote).toBe("applied");
  expect(w.ids()).toEqual([1]);
  expect(errorOf(() => ob.replayDead(seq))).toMatchObject({ code: "E_REPLAY_REFUSED", remote: "applied" });
});

test("the drain's own dead letter is in doubt while a batch of its own that carried it is unanswered, and not when every one was answered", async () => {
  const w = world({ maxAttempts: 2 });
  const writer = new FaultyWriter(w.sqlite());
  const { svc } = w.drain(writer);
  await svc.runOnce();
  const ob = w.operator();
  // Every batch that carried it was answered (refused by the remote's CHECK): not applied.
  const answered = w.push(-1);
  await until(svc, () => ob.getDead(answered) !== null, "the first poison dead-lettered");
  expect(ob.getDead(answered)).toMatchObject({ reason: "max_attempts", remote: "not applied" });
  // One batch that carried it was lost: it may still commit (a late commit), so in doubt...
  const lost = w.push(-2);
  writer.faults.push("throw");
  await until(svc, () => ob.getDead(lost) !== null, "the second poison dead-lettered");
  expect(ob.getDead(lost)).toMatchObject({ reason: "max_attempts", remote: "in doubt" });
  expect(errorOf(() => ob.replayDead(lost))).toMatchObject({ code: "E_REPLAY_REFUSED", remote: "in doubt" });
  // ...until the next row of its lane lands past it: no batch carrying it can commit after that.
  w.push(3);
  await until(svc, () => w.ids().includes(3), "row 3");
  expect(ob.getDead(lost)!.remote).toBe("not applied");
  expect(w.ids()).toEqual([3]);
});

test("a drain dead-letters in doubt what an earlier drain process sent: that one's batches are unknown", async () => {
  const w = world({ maxAttempts: 3 });
  const first = w.drain(w.sqlite()).svc;
  await first.runOnce();
  const seq = w.push(-1);
  await first.runOnce(); // sent once, refused by the remote
  await first.stop(2000);
  const ob = w.operator();
  expect(ob.head()).toMatchObject({ seq, attempts: 1 });
  const { svc } = w.drain(w.sqlite());
  await until(svc, () => ob.getDead(seq) !== null, "the poison dead-lettered by the second drain");
  expect(ob.getDead(seq)!.remote).toBe("in doubt");
  w.push(4);
  await until(svc, () => w.ids().includes(4), "row 4");
  expect(ob.getDead(seq)!.remote).toBe("not applied");
});
