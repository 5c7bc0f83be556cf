// Dead letters at scale, in the library: batched replay (one transaction, original order, once
// each), purge and retention that never break a chain, and the read-only readers behind the CLI.
import { Database } from "bun:sqlite";
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import fs from "node:fs";
import { NotFoundError, StorageError } from "../src/errors.ts";
import { findDeadLetterRefs, findDeadLetters, planPurge } from "../src/outbox/dead-letters.ts";
import { verifyFile } from "../src/outbox/inspect.ts";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { isoTimestamp } from "../src/outbox/timestamp.ts";
import { hashTree } from "./support/dir-hash.ts";
import { errorOf } from "./support/errors.ts";
import { drainSide, highestSeq } from "./support/queue.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";

let tmp: TempDir;
const open: Outbox[] = [];
beforeEach(() => {
  tmp = makeTempDir("sqloutbox-dead-");
});
afterEach(() => {
  for (const ob of open.splice(0)) ob.close();
  tmp.cleanup();
});

const DAY = 86_400_000;
const FUTURE = () => new Date(Date.now() + 60_000);

/** An outbox of `namespace` in `{tmp}/{file}` with `count` rows, the first `dead` of them dead-lettered (skipped). */
function queue(count: number, dead: number, namespace = "orders", file = `${namespace}.db`): Outbox {
  const ob = new Outbox(tmp.file(file), namespace);
  open.push(ob);
  // One row at a time: rows of one enqueueBatch form a group, dead-lettered and replayed together.
  const seqs = Array.from({ length: count }, (_, i) =>
    ob.enqueue(`INSERT INTO ${namespace} (id) VALUES (?)`, `[${i + 1}]`, "app"),
  );
  for (const seq of seqs.slice(0, dead)) ob.skipHead(seq);
  return ob;
}

/** Rewrites columns of dead letters behind the library's back, to age them. */
function setDead(file: string, seqs: number[], set: string, ...values: Array<string | null>): void {
  const db = new Database(file);
  try {
    for (const seq of seqs) db.query(`UPDATE outbox_dead_log SET ${set} WHERE seq = ?`).run(...values, seq);
  } finally {
    db.close();
  }
}

const daysAgo = (days: number) => isoTimestamp(new Date(Date.now() - days * DAY));

function expectIntactChain(ob: Outbox): void {
  expect(ob.verifyChain(ob.fetchUnsynced(1_000_000))).toEqual({ ok: true, gaps: [] });
  expect(verifyFile(ob.path).ok).toBe(true);
}

describe("replayDeadMany", () => {
  test("re-enqueues the letters at the tail in their original seq order, each linked to the one before", () => {
    const ob = queue(6, 3);
    const out = ob.replayDeadMany([3, 1, 2, 1]);
    expect(out).toEqual({
      replayed: [
        { seq: 1, namespace: "orders", newSeq: 7 },
        { seq: 2, namespace: "orders", newSeq: 8 },
        { seq: 3, namespace: "orders", newSeq: 9 },
      ],
      unchanged: [],
      refused: [],
    });
    const rows = ob.fetchUnsynced(10);
    expect(rows.map((r) => [r.seq, r.prevSeq, r.payload, r.source])).toEqual([
      [4, 3, "[4]", "app"],
      [5, 4, "[5]", "app"],
      [6, 5, "[6]", "app"],
      [7, 6, "[1]", "app"],
      [8, 7, "[2]", "app"],
      [9, 8, "[3]", "app"],
    ]);
    expect(ob.listDead().map((d) => [d.seq, d.replayedAsSeq, d.replayedAt !== null])).toEqual([
      [1, 7, true],
      [2, 8, true],
      [3, 9, true],
    ]);
    expect(ob.deadCount()).toBe(0);
    expectIntactChain(ob);
  });

  test("leaves letters replayed before unchanged and never replays one twice", () => {
    const ob = queue(4, 2);
    expect(ob.replayDead(1)).toBe(5);
    expect(ob.replayDeadMany([1, 2])).toEqual({
      replayed: [{ seq: 2, namespace: "orders", newSeq: 6 }],
      unchanged: [{ seq: 1, namespace: "orders", replayedAsSeq: 5 }],
      refused: [],
    });
    expect(ob.replayDeadMany([1, 2])).toEqual({
      replayed: [],
      unchanged: [
        { seq: 1, namespace: "orders", replayedAsSeq: 5 },
        { seq: 2, namespace: "orders", replayedAsSeq: 6 },
      ],
      refused: [],
    });
    expect(ob.pendingCount()).toBe(4);
  });

  test("a group's letters selected together are replayed once each and counted as replayed, none as unchanged", () => {
    const ob = new Outbox(tmp.file("orders.db"), "orders");
    open.push(ob);
    const [head] = ob.enqueueBatch(
      [1, 2, 3].map((id) => ({ tag: "INSERT INTO orders (id) VALUES (?)", payload: `[${id}]` })),
      "app",
    );
    ob.skipHead(head!);
    expect(ob.replayDeadMany([head!, head! + 1, head! + 2])).toEqual({
      replayed: [
        { seq: 1, namespace: "orders", newSeq: 4 },
        { seq: 2, namespace: "orders", newSeq: 5 },
        { seq: 3, namespace: "orders", newSeq: 6 },
      ],
      unchanged: [],
      refused: [],
    });
  });

  test("a seq that is no dead letter of the namespace replays nothing and throws NotFoundError", () => {
    const ob = queue(4, 2);
    const err = errorOf(() => ob.replayDeadMany([1, 2, 3]));
    expect(err).toBeInstanceOf(NotFoundError);
    expect(err).toMatchObject({
      code: "E_NOT_FOUND",
      message: expect.stringContaining('no dead letter with seq 3 in namespace "orders"'),
    });
    expect(ob.pendingCount()).toBe(2);
    expect(ob.deadCount()).toBe(2);
  });

  test("replays 5 000 letters in ONE transaction: a write failing at the 4 000th leaves every letter and the queue untouched", () => {
    const ob = queue(5_000, 5_000);
    const counter = () => highestSeq(ob.path);
    const db = new Database(ob.path);
    db.run(
      `CREATE TRIGGER fail_midway BEFORE INSERT ON outbox_queue WHEN new.payload = '[4000]' BEGIN SELECT RAISE(ABORT, 'disk I/O error (injected)'); END`,
    );
    const seqs = ob.listDead().map((d) => d.seq);
    expect(() => ob.replayDeadMany(seqs)).toThrow(StorageError);
    expect(ob.pendingCount()).toBe(0);
    expect(ob.deadCount()).toBe(5_000);
    expect(counter()).toBe(5_000); // not even a seq was allocated
    db.run("DROP TRIGGER fail_midway");
    db.close();

    const out = ob.replayDeadMany(seqs);
    expect(out.replayed).toHaveLength(5_000);
    expect(out.replayed.every((r, i) => r.seq === i + 1 && r.newSeq === 5_001 + i)).toBe(true);
    expect(ob.pendingCount()).toBe(5_000);
    expect(ob.head()).toMatchObject({ seq: 5_001, prevSeq: 5_000, payload: "[1]" });
    expectIntactChain(ob);
  });

  test("refuses seqs that are not positive integers", () => {
    const ob = queue(2, 1);
    expect(() => ob.replayDeadMany([1, 0])).toThrow("replayDeadMany expects an array of positive integer seqs");
    expect(() => ob.replayDeadMany([1.5])).toThrow("replayDeadMany expects an array of positive integer seqs");
  });
});

describe("skipHead: a head moved aside into the dead letters", () => {
  test("each letter keeps its own error and the group's attempts; the reason says the operator skipped it", () => {
    const ob = new Outbox(tmp.file("orders.db"), "orders");
    open.push(ob);
    const [head] = ob.enqueueBatch(
      [1, 2].map((id) => ({ tag: "INSERT INTO orders (id) VALUES (?)", payload: `[${id}]` })),
      "app",
    );
    // The drain tried the group three times: the head carries the attempts and the error.
    drainSide(ob).recordFailure(head!, '23514: check "id_ok" failed', "23514", FUTURE(), 3);
    ob.skipHead(head!);
    expect(ob.listDead().map((d) => [d.seq, d.reason, d.attempts, d.error, d.errorClass])).toEqual([
      [head!, "skipped", 3, '23514: check "id_ok" failed', "23514"],
      [head! + 1, "skipped", 3, '23514: check "id_ok" failed', "23514"],
    ]);
  });

  test("a head never tried keeps no error: nothing is made up", () => {
    const ob = queue(2, 1);
    expect(ob.getDead(1)).toMatchObject({ reason: "skipped", attempts: 0, error: null, errorClass: null });
  });
});

describe("purgeDead", () => {
  test("deletes replayed letters only by default, and with unreplayed also those never replayed", () => {
    const ob = queue(6, 4); // dead 1-4, pending 5 (links to 4) and 6
    ob.replayDeadMany([1, 2]); // 7, 8
    expect(ob.purgeDead({ before: FUTURE() })).toEqual({
      purged: [
        { namespace: "orders", seq: 1, reason: "skipped", deadAt: expect.any(String), replayedAt: expect.any(String) },
        { namespace: "orders", seq: 2, reason: "skipped", deadAt: expect.any(String), replayedAt: expect.any(String) },
      ],
      kept: [],
    });
    const out = ob.purgeDead({ before: FUTURE(), unreplayed: true });
    expect(out.purged.map((p) => [p.seq, p.replayedAt])).toEqual([[3, null]]);
    expect(out.kept.map((k) => [k.seq, k.keptBecause])).toEqual([[4, "linked"]]);
    expect(ob.listDead().map((d) => d.seq)).toEqual([4]);
    expectIntactChain(ob);
  });

  test("keeps the letter a queued row links to", () => {
    const ob = queue(5, 3); // dead 1-3, pending 4 (links to 3), 5
    ob.replayDeadMany([1, 2, 3]); // 6, 7, 8
    const out = ob.purgeDead({ before: FUTURE() });
    expect(out.purged.map((p) => p.seq)).toEqual([1, 2]);
    expect(out.kept.map((k) => [k.seq, k.keptBecause])).toEqual([[3, "linked"]]);
    expectIntactChain(ob);
  });

  test("keeps the namespace's newest letter: with the queue empty, the next row links to it", () => {
    const ob = queue(4, 0);
    ob.confirm([1, 2]);
    ob.skipHead(3);
    ob.skipHead(4);
    const out = ob.purgeDead({ before: FUTURE(), unreplayed: true });
    expect(out.purged.map((p) => p.seq)).toEqual([3]);
    expect(out.kept.map((k) => [k.seq, k.keptBecause])).toEqual([[4, "newest"]]);
    expect(ob.enqueue("INSERT INTO orders (id) VALUES (?)", "[5]")).toBe(5);
    expect(ob.head()).toMatchObject({ seq: 5, prevSeq: 4 });
    expectIntactChain(ob);
  });

  test("compares dead_at as a time: letters dead after `before` stay", () => {
    const ob = queue(5, 4);
    ob.replayDeadMany([1, 2, 3, 4]);
    setDead(ob.path, [1], "dead_at = ?", daysAgo(40));
    setDead(ob.path, [2], "dead_at = ?", "2020-01-01 00:00:00"); // SQLite's own format, also a time
    setDead(ob.path, [3], "dead_at = ?", daysAgo(5));
    const out = ob.purgeDead({ before: new Date(Date.now() - 30 * DAY) });
    expect(out.purged.map((p) => p.seq)).toEqual([1, 2]);
    expect(ob.listDead().map((d) => d.seq)).toEqual([3, 4]);
  });

  test("resequenced records count as replayed; the one the moved queue links to is kept", () => {
    const ob = queue(3, 0);
    expect(drainSide(ob).resequenceAbove(10)).toMatchObject({ oldFirst: 1, oldLast: 3, newFirst: 11 });
    const out = ob.purgeDead({ before: FUTURE() });
    expect(out.purged.map((p) => [p.seq, p.reason])).toEqual([
      [1, "resequenced"],
      [2, "resequenced"],
    ]);
    expect(out.kept.map((k) => [k.seq, k.keptBecause])).toEqual([[3, "linked"]]);
    expectIntactChain(ob);
  });

  test("touches only its own namespace in a shared file", () => {
    const a = queue(3, 2, "a", "shared.db");
    const b = queue(3, 2, "b", "shared.db");
    a.replayDeadMany([1, 2]);
    b.replayDeadMany([4, 5]);
    expect(a.purgeDead({ before: FUTURE() }).purged.map((p) => p.seq)).toEqual([1]);
    expect(b.listDead().map((d) => d.seq)).toEqual([4, 5]);
  });

  test("purges a group whole or not at all: a replay of what is left delivers the whole transaction (found by the simulator)", () => {
    const ob = new Outbox(tmp.file("orders.db"), "orders");
    open.push(ob);
    ob.enqueueBatch(["1", "2"].map((id) => ({ tag: "INSERT INTO orders (id) VALUES (?)", payload: `[${id}]` })));
    ob.enqueueBatch(["3", "4"].map((id) => ({ tag: "INSERT INTO orders (id) VALUES (?)", payload: `[${id}]` })));
    ob.enqueue("INSERT INTO orders (id) VALUES (?)", "[5]");
    ob.skipHead(1); // the group 1, 2
    ob.skipHead(3); // the group 3, 4: seq 5 links to seq 4, which the chain keeps — and seq 3 with it
    const out = ob.purgeDead({ before: FUTURE(), unreplayed: true });
    expect(out.purged.map((p) => p.seq)).toEqual([1, 2]);
    expect(out.kept.map((k) => [k.seq, k.keptBecause])).toEqual([
      [3, "group"],
      [4, "linked"],
    ]);
    expect(ob.replayDeadMany([4]).replayed.map((r) => r.seq)).toEqual([3, 4]);
    expectIntactChain(ob);
  });

  test("keeps a transaction's letters in one table while its letters in another table stay", () => {
    const producer = new SQLMiddleware({ dbFile: tmp.file("shared.db") });
    try {
      producer.transaction(() => {
        producer.push("a", "INSERT INTO a (id) VALUES (?)", [1]);
        producer.push("b", "INSERT INTO b (id) VALUES (?)", [2]);
        producer.push("a", "INSERT INTO a (id) VALUES (?)", [3]);
      });
      producer.push("a", "INSERT INTO a (id) VALUES (?)", [4]);
    } finally {
      closeSharedOutboxes();
    }
    const a = new Outbox(tmp.file("shared.db"), "a");
    open.push(a);
    expect(a.skipHead(1).seqs).toEqual([1, 2, 3]);
    a.skipHead(4);
    const out = a.purgeDead({ before: FUTURE(), unreplayed: true });
    expect(out.purged).toEqual([]);
    expect(out.kept.map((k) => [k.seq, k.keptBecause])).toEqual([
      [1, "group"],
      [3, "group"],
      [4, "newest"],
    ]);
    expect(a.replayDeadMany([1]).replayed.map((r) => [r.namespace, r.seq])).toEqual([
      ["a", 1],
      ["b", 2],
      ["a", 3],
    ]);
  });
});

describe("pruneReplayedDead (the drain's retention)", () => {
  test("deletes letters replayed more than retainDays ago, counting from the replay; never-replayed letters stay however old", () => {
    const ob = queue(6, 5);
    ob.replayDeadMany([1, 2, 3]);
    setDead(ob.path, [1, 2, 3, 4, 5], "dead_at = ?", daysAgo(100));
    setDead(ob.path, [1], "replayed_at = ?", daysAgo(10));
    setDead(ob.path, [2], "replayed_at = ?", daysAgo(1)); // died long ago, replayed yesterday: kept
    setDead(ob.path, [3], "replayed_at = ?", daysAgo(8));
    expect(drainSide(ob).pruneReplayedDead(7)).toBe(2);
    expect(ob.listDead().map((d) => d.seq)).toEqual([2, 4, 5]);
    expect(drainSide(ob).pruneReplayedDead(0, new Date(Date.now() + DAY))).toBe(1);
    expect(ob.listDead().map((d) => d.seq)).toEqual([4, 5]);
    expectIntactChain(ob);
  });

  test("refuses a negative or non-finite retention", () => {
    const ob = queue(1, 0);
    expect(() => drainSide(ob).pruneReplayedDead(-1)).toThrow("retainDays must be a non-negative number, got -1");
    expect(() => drainSide(ob).pruneReplayedDead(Number.NaN)).toThrow(
      "retainDays must be a non-negative number, got NaN",
    );
  });
});

describe("read-only readers", () => {
  test("planPurge reports what purgeDead then does, and changes no byte", () => {
    const ob = queue(6, 4);
    ob.replayDeadMany([1, 2, 3]);
    const rule = { before: FUTURE(), unreplayed: true };
    // The -shm index is shared memory that a reader may touch while the writer has the file open.
    const data = () => Object.entries(hashTree(tmp.path)).filter(([name]) => !name.endsWith("-shm"));
    const before = data();
    const plan = planPurge(ob.path, rule);
    expect(data()).toEqual(before);
    expect(plan.map((p) => [p.namespace, p.purged.map((x) => x.seq), p.kept.map((x) => x.seq)])).toEqual([
      ["orders", [1, 2, 3], [4]],
    ]);
    const { purged, kept } = ob.purgeDead(rule);
    expect({ namespace: "orders", purged, kept }).toEqual(plan[0]!);
  });

  test("findDeadLetters filters by namespace, reason, since and replay state, combined with AND, across files", () => {
    const a = queue(4, 3, "a");
    const b = queue(4, 2, "b");
    a.replayDeadMany([1]);
    setDead(a.path, [1, 2], "dead_at = ?", daysAgo(3));
    setDead(a.path, [3], "reason = ?", "max_attempts");
    setDead(b.path, [1], "reason = ?", "max_attempts");
    const seqs = (filter: Parameters<typeof findDeadLetters>[1]) =>
      findDeadLetters(tmp.path, filter).map((d) => `${d.namespace}:${d.seq}`);
    expect(seqs({})).toEqual(["a:1", "a:2", "a:3", "b:1", "b:2"]);
    expect(seqs({ namespace: "a" })).toEqual(["a:1", "a:2", "a:3"]);
    expect(seqs({ reason: "max_attempts" })).toEqual(["a:3", "b:1"]);
    expect(seqs({ since: new Date(Date.now() - DAY) })).toEqual(["a:3", "b:1", "b:2"]);
    expect(seqs({ replayed: true })).toEqual(["a:1"]);
    expect(seqs({ replayed: false, namespace: "a" })).toEqual(["a:2", "a:3"]);
    expect(seqs({ namespace: "a", reason: "skipped", since: new Date(Date.now() - 4 * DAY), replayed: false })).toEqual(
      ["a:2"],
    );
    expect(findDeadLetters(tmp.path, { namespace: "b", reason: "skipped" })[0]).toMatchObject({
      file: b.path,
      seq: 2,
      tag: "INSERT INTO b (id) VALUES (?)",
      payload: "[2]",
    });
    expect(findDeadLetterRefs(tmp.path, { namespace: "a", replayed: true })).toEqual([
      {
        file: a.path,
        namespace: "a",
        seq: 1,
        reason: "skipped",
        deadAt: expect.any(String),
        replayedAt: expect.any(String),
        replayedAsSeq: 5,
        grp: null,
        remote: "not applied",
      },
    ]);
  });

  test("a file that cannot be read is passed to onError and the others are still read", () => {
    queue(2, 1, "a");
    fs.writeFileSync(tmp.file("garbage.db"), "not sqlite ".repeat(200));
    const errors: string[] = [];
    const found = findDeadLetters(tmp.path, {}, { onError: (file, err) => errors.push(`${file}: ${err.code}`) });
    expect(found.map((d) => d.seq)).toEqual([1]);
    expect(errors).toEqual([`${tmp.file("garbage.db")}: E_STORAGE`]);
    expect(() => findDeadLetters(tmp.path)).toThrow(StorageError);
  });
});
