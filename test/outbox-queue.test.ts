import { Database } from "bun:sqlite";
import { rmSync } from "node:fs";
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import {
  InvalidArgumentError,
  NotFoundError,
  Outbox,
  OutboxClosedError,
  QueueFullError,
  StorageError,
  verifyFile,
} from "../src/index.ts";
import { NEW_FILE_PAGE_SIZE, openWritable } from "../src/outbox/sqlite-open.ts";
import { isoTimestamp, parseTimestamp } from "../src/outbox/timestamp.ts";
import { errorOf } from "./support/errors.ts";
import { buildReferenceFile } from "./support/reference-db.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";
import { drainSide } from "./support/queue.ts";

let tmp: TempDir;
const open: Outbox[] = [];
function outbox(name = "q.db", namespace = "orders", options = {}): Outbox {
  const ob = new Outbox(tmp.file(name), namespace, options);
  open.push(ob);
  return ob;
}
beforeEach(() => {
  tmp = makeTempDir();
});
afterEach(() => {
  for (const ob of open.splice(0)) ob.close();
  tmp.cleanup();
});

/** The whole chain of a namespace must link each pending row to its predecessor. */
function expectIntactChain(ob: Outbox): void {
  const rows = ob.fetchUnsynced(1_000_000);
  expect(ob.verifyChain(rows)).toEqual({ ok: true, gaps: [] });
  for (let i = 1; i < rows.length; i++) expect(rows[i]!.prevSeq).toBe(rows[i - 1]!.seq);
}

describe("enqueue", () => {
  test("links each row to the namespace's previous row and starts a fresh chain with null", () => {
    const ob = outbox();
    const a = ob.enqueue("INSERT 1", "[1]", "src");
    const b = ob.enqueue("INSERT 2", "[2]");
    const rows = ob.fetchUnsynced(10);
    expect(rows.map((r) => [r.seq, r.prevSeq])).toEqual([
      [a, null],
      [b, a],
    ]);
    expect(rows[0]).toMatchObject({
      namespace: "orders",
      source: "src",
      tag: "INSERT 1",
      payload: "[1]",
      attempts: 0,
      lastError: null,
    });
    expect(rows[0]!.createdAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$/);
  });

  test("links a new row to the last delivered row when the queue is empty", () => {
    const ob = outbox();
    const a = ob.enqueue("A", "[]");
    ob.confirm([a]);
    const b = ob.enqueue("B", "[]");
    expect(ob.head()!.prevSeq).toBe(a);
    expect(ob.verifyChain(ob.fetchUnsynced(10))).toEqual({ ok: true, gaps: [] });
    expect(b).toBeGreaterThan(a);
  });

  test("links a new row to a dead-lettered predecessor when that was the namespace's last row", () => {
    const ob = outbox();
    const a = ob.enqueue("A", "[]");
    ob.deadLetter(a, "undecodable");
    ob.enqueue("B", "[]");
    expect(ob.head()!.prevSeq).toBe(a);
    expect(ob.verifyChain(ob.fetchUnsynced(10)).ok).toBe(true);
  });

  test("rejects a tag that is empty or not well-formed text, naming the namespace and file", () => {
    const ob = outbox();
    for (const tag of ["", "\ud800 lone surrogate", 5 as unknown as string]) {
      const err = errorOf<InvalidArgumentError>(() => ob.enqueue(tag, "[]"));
      expect(err).toBeInstanceOf(InvalidArgumentError);
      expect(err.code).toBe("E_INVALID_ARG");
      expect(err.message).toContain('namespace "orders"');
      expect(err.message).toContain(ob.path);
    }
    expect(ob.pendingCount()).toBe(0);
  });
});

describe("timestamps", () => {
  test("isoTimestamp formats a given date exactly and the current time without lagging the clock", async () => {
    expect(isoTimestamp(new Date(Date.UTC(2024, 1, 29, 23, 59, 58, 7)))).toBe("2024-02-29T23:59:58.007000+00:00");
    for (let i = 0; i < 3; i++) {
      const before = Date.now();
      const text = isoTimestamp();
      const after = Date.now();
      const at = parseTimestamp(text)!;
      expect(at).toBeGreaterThanOrEqual(before);
      expect(at).toBeLessThanOrEqual(after);
      await Bun.sleep(2); // the next call is in a later millisecond: the cached text must not be reused
    }
  });
});

describe("enqueueBatch", () => {
  test("links item 0 to the tail and item i to item i-1's actual seq", () => {
    const ob = outbox();
    const first = ob.enqueue("A", "[]");
    const seqs = ob.enqueueBatch([
      { tag: "B", payload: "[]" },
      { tag: "C", payload: "[]" },
      { tag: "D", payload: "[]" },
    ]);
    const rows = ob.fetchUnsynced(10);
    expect(rows.map((r) => r.prevSeq)).toEqual([null, first, seqs[0]!, seqs[1]!]);
    expectIntactChain(ob);
  });

  test("regression: a batch after seedSequence with rows pending keeps the chain intact", () => {
    const ob = outbox();
    ob.enqueue("A", "[]");
    ob.enqueue("B", "[]");
    drainSide(ob).seedSequence(1000);
    const seqs = ob.enqueueBatch([
      { tag: "C", payload: "[]" },
      { tag: "D", payload: "[]" },
    ]);
    expect(seqs).toEqual([1001, 1002]);
    expectIntactChain(ob);
  });

  test("regression: a batch on a file shared by two namespaces keeps both chains intact", () => {
    const a = outbox("shared.db", "a");
    const b = outbox("shared.db", "b");
    for (let i = 0; i < 3; i++) {
      a.enqueue(`a${i}`, "[]");
      b.enqueue(`b${i}`, "[]");
    }
    a.enqueueBatch([
      { tag: "a3", payload: "[]" },
      { tag: "a4", payload: "[]" },
    ]);
    b.enqueueBatch([
      { tag: "b3", payload: "[]" },
      { tag: "b4", payload: "[]" },
    ]);
    expectIntactChain(a);
    expectIntactChain(b);
    expect(a.fetchUnsynced(10).map((r) => r.tag)).toEqual(["a0", "a1", "a2", "a3", "a4"]);
  });

  test("regression: a batch after a partial confirm keeps the chain intact", () => {
    const ob = outbox();
    const seqs = ob.enqueueBatch(Array.from({ length: 5 }, (_, i) => ({ tag: `t${i}`, payload: "[]" })));
    ob.confirm(seqs.slice(0, 2));
    ob.enqueueBatch([
      { tag: "x", payload: "[]" },
      { tag: "y", payload: "[]" },
    ]);
    expectIntactChain(ob);
    expect(ob.head()!.prevSeq).toBe(seqs[1]!);
  });

  test("rows past one INSERT's worth keep their order, links, group and each its own tag and payload", () => {
    const ob = outbox();
    let total = 0;
    for (const length of [1, 2, 3, 63, 64, 65, 127, 130, 200]) {
      const before = ob.enqueue("A", "[]");
      const items = Array.from({ length }, (_, i) => ({ tag: `INSERT ${length}.${i}`, payload: `[${i}]` }));
      const seqs = ob.enqueueBatch(items);
      total += length + 1;
      const db = new Database(ob.path, { readonly: true });
      const rows = db
        .query<Record<string, unknown>, [number]>(
          "SELECT seq, ord, prev_seq, grp, tag, payload, typeof(seq) || typeof(ord) || typeof(prev_seq) || typeof(grp) AS types FROM outbox_queue WHERE seq > ? ORDER BY seq",
        )
        .all(before);
      db.close();
      expect(rows.map((r) => r.seq)).toEqual(seqs);
      expect(rows).toEqual(
        items.map((item, i) => ({
          seq: before + 1 + i,
          ord: total - length + 1 + i,
          prev_seq: before + i,
          grp: before + 1,
          tag: item.tag,
          payload: item.payload,
          types: "integerintegerintegerinteger",
        })),
      );
    }
    expect(ob.pendingCount()).toBe(total);
    // Two batches in one transaction are one group, the second counted on from the first.
    const batch = (n: number) => Array.from({ length: n }, (_, i) => ({ tag: `UPDATE ${i}`, payload: "[]" }));
    const first = ob.transaction(() => [...ob.enqueueBatch(batch(70)), ...ob.enqueueBatch(batch(3))])[0]!;
    const grouped = ob.fetchUnsynced(100_000).filter((r) => r.seq >= first);
    expect(grouped.map((r) => [r.seq, r.tag, r.grp])).toEqual(
      [...batch(70), ...batch(3)].map((b, i) => [first + i, b.tag, first]),
    );
    expectIntactChain(ob);
  });

  test("a run of one tag is checked once, yet a bad tag, payload or source after or around it is refused and nothing is written", () => {
    const ob = outbox();
    const good = { tag: "INSERT INTO t (a) VALUES (?)", payload: "[1]" };
    for (const bad of [
      { tag: "INSERT \ud800", payload: "[1]" },
      { tag: "", payload: "[1]" },
      { ...good, payload: '["\udc00"]' },
    ])
      expect(errorOf(() => ob.enqueueBatch([good, good, good, bad]))).toBeInstanceOf(InvalidArgumentError);
    expect(errorOf(() => ob.enqueueBatch([good, good], "\ud800"))).toBeInstanceOf(InvalidArgumentError);
    expect(ob.pendingCount()).toBe(0);
  });

  test("writes nothing when any item is invalid", () => {
    const ob = outbox();
    expect(() =>
      ob.enqueueBatch([
        { tag: "ok", payload: "[]" },
        { tag: "", payload: "[]" },
      ]),
    ).toThrow(InvalidArgumentError);
    expect(ob.pendingCount()).toBe(0);
  });
});

describe("confirm, pending count and sequence", () => {
  test("confirm logs rows in the delivered log and deletes them together", () => {
    const ob = outbox();
    const seqs = ob.enqueueBatch([
      { tag: "A", payload: "[]" },
      { tag: "B", payload: "[]" },
    ]);
    ob.confirm([seqs[0]!]);
    const db = new Database(ob.path, { readonly: true });
    expect(
      db.query("SELECT first_seq AS first, last_seq AS last, rows, namespace FROM outbox_delivered").all(),
    ).toEqual([{ first: seqs[0], last: seqs[0], rows: 1, namespace: "orders" }]);
    expect(db.query("SELECT seq FROM outbox_queue").all()).toEqual([{ seq: seqs[1] }]);
    db.close();
    expect(ob.pendingCount()).toBe(1);
  });

  test("confirmThrough logs one range per slice, extends it while the chain continues, and starts another after RANGE_SPAN_MS", () => {
    const ob = outbox();
    const seqs = Array.from({ length: 9 }, (_, i) => ob.enqueue(`t${i}`, "[]"));
    expect(drainSide(ob).confirmThrough(seqs[2]!)).toBe(3);
    expect(drainSide(ob).confirmThrough(seqs[5]!)).toBe(3); // continues the chain: the same range, extended
    const db = new Database(ob.path);
    const ranges = () =>
      db.query("SELECT first_seq AS first, last_seq AS last, rows FROM outbox_delivered ORDER BY last_seq").all();
    expect(ranges()).toEqual([{ first: seqs[0], last: seqs[5], rows: 6 }]);
    db.run("UPDATE outbox_delivered SET first_at = '2020-01-01T00:00:00.000000+00:00'"); // the range is old: the next slice starts its own
    expect(drainSide(ob).confirmThrough(seqs[8]!)).toBe(3);
    expect(ranges()).toEqual([
      { first: seqs[0], last: seqs[5], rows: 6 },
      { first: seqs[6], last: seqs[8], rows: 3 },
    ]);
    db.close();
    expect(ob.enqueue("next", "[]")).toBe(seqs[8]! + 1);
    expect(verifyFile(ob.path).ok).toBe(true);
  });

  test("pendingCount follows enqueue, confirm and dead-lettering per namespace", () => {
    const a = outbox("s.db", "a");
    const b = outbox("s.db", "b");
    for (const tag of ["1", "2", "3"]) a.enqueue(tag, "[]");
    b.enqueue("1", "[]");
    expect([a.pendingCount(), b.pendingCount()]).toEqual([3, 1]);
    a.confirm([a.head()!.seq]);
    a.deadLetter(a.head()!.seq, "skipped");
    expect([a.pendingCount(), b.pendingCount()]).toEqual([1, 1]);
  });

  test("a slice confirmed from what the drain read is logged and deleted whole; one the queue no longer holds so changes nothing", () => {
    const ob = outbox();
    const seqs = [1, 2, 3, 4].map((i) => ob.enqueue("A", `[${i}]`));
    const head = ob.head()!;
    const side = drainSide(ob);
    expect(side.confirmSlice({ first: seqs[0]!, last: seqs[2]!, rows: 2, firstPrev: head.prevSeq })).toBe(false);
    expect(ob.pendingCount()).toBe(4);
    expect(side.confirmSlice({ first: seqs[0]!, last: seqs[2]!, rows: 3, firstPrev: head.prevSeq })).toBe(true);
    expect(ob.fetchUnsynced(10).map((r) => r.seq)).toEqual([seqs[3]!]);
    expect(ob.pendingCount()).toBe(1);
    expect(ob.verifyChain(ob.fetchUnsynced(10))).toEqual({ ok: true, gaps: [] });
    expect(verifyFile(ob.path).ok).toBe(true);
  });

  test("files we create have the lean layout: no AUTOINCREMENT, no UNIQUE prev_seq, no trigger on a push (foreign rows are found by a partial index)", () => {
    outbox().enqueue("A", "[]");
    const db = new Database(tmp.file("q.db"), { readonly: true });
    try {
      const ddl = db.query<{ sql: string }, []>("SELECT sql FROM sqlite_schema WHERE name = 'outbox_queue'").get()!.sql;
      expect(ddl).not.toContain("AUTOINCREMENT");
      expect(ddl).not.toContain("UNIQUE");
      const indexes = db
        .query<{ name: string }, []>(
          "SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'outbox_queue' ORDER BY name",
        )
        .all();
      expect(indexes).toEqual([{ name: "idx_outbox_foreign" }, { name: "idx_outbox_worker" }]);
      const foreign = db
        .query<{ sql: string }, []>("SELECT sql FROM sqlite_schema WHERE name = 'idx_outbox_foreign'")
        .get()!;
      expect(foreign.sql).toEndWith("WHERE ord IS NULL");
      const triggers = db.query<{ name: string }, []>("SELECT name FROM sqlite_schema WHERE type = 'trigger'").all();
      expect(triggers).toEqual([]);
    } finally {
      db.close();
    }
  });

  test("a drained-empty queue never reuses a seq: not after confirm, dead-lettering, sync-log pruning or a reopen", () => {
    let ob = outbox();
    const a = ob.enqueue("A", "[]");
    const b = ob.enqueue("B", "[]");
    ob.confirm([a]);
    ob.deadLetter(b, "skipped");
    drainSide(ob).pruneSyncLog(0, new Date(Date.now() + 86_400_000));
    ob.close();
    ob = outbox();
    const c = ob.enqueue("C", "[]");
    expect(c).toBe(b + 1);
    ob.confirm([c]);
    drainSide(ob).seedSequence(100);
    expect(
      ob.enqueueBatch([
        { tag: "D", payload: "[]" },
        { tag: "E", payload: "[]" },
      ]),
    ).toEqual([101, 102]);
    expect(ob.pendingCount()).toBe(2);
    expectIntactChain(ob);
  });

  test("seedSequence raises the next seq above the seed and never lowers it", () => {
    const ob = outbox();
    drainSide(ob).seedSequence(500);
    expect(ob.enqueue("A", "[]")).toBe(501);
    drainSide(ob).seedSequence(10);
    expect(ob.enqueue("B", "[]")).toBe(502);
  });

  test("resequenceAbove moves the whole pending queue in order above the mark, recording each move as a replayed dead letter", () => {
    const ob = outbox();
    const other = outbox("q.db", "other"); // a second namespace in the same file stays where it is
    const done = ob.enqueue("DONE", "[0]");
    ob.confirm([done]);
    const old = ob.enqueueBatch(
      Array.from({ length: 5 }, (_, i) => ({ tag: `T${i}`, payload: `[${i}]` })),
      "app",
    );
    const otherSeq = other.enqueue("O", "[]");
    drainSide(ob).recordAttempt(old[0]!);
    drainSide(ob).recordFailure(old[0]!, "boom", "E1", new Date(Date.UTC(2030, 0, 1)));
    const before = ob.fetchUnsynced(10);
    const moved = drainSide(ob).resequenceAbove(50)!;
    expect(moved).toEqual({ count: 5, oldFirst: old[0]!, oldLast: old[4]!, newFirst: 51, newLast: 55 });
    const rows = ob.fetchUnsynced(10);
    expect(rows.map((r) => [r.seq, r.tag, r.payload, r.source, r.createdAt])).toEqual(
      before.map((r, i) => [51 + i, r.tag, r.payload, r.source, r.createdAt]),
    );
    expect(rows[0]).toMatchObject({ prevSeq: old[4], attempts: 1, lastError: "boom", lastErrorClass: "E1" });
    expectIntactChain(ob);
    expect(ob.pendingCount()).toBe(5);
    expect(ob.deadCount()).toBe(0);
    expect(ob.listDead().map((d) => [d.seq, d.reason, d.replayedAsSeq, d.tag])).toEqual(
      old.map((s, i) => [s, "resequenced", 51 + i, `T${i}`]),
    );
    expect(ob.listDead()[0]!.replayedAt).not.toBeNull();
    expect(other.fetchUnsynced(10).map((r) => r.seq)).toEqual([otherSeq]);
    expect(ob.enqueue("NEXT", "[]")).toBe(56);
    const verified = verifyFile(ob.path);
    expect(verified.ok).toBe(true);
  });

  test("hasHistory is false for a fresh queue and true once a row was delivered or dead-lettered, or the head links back", () => {
    const fresh = outbox("a.db");
    fresh.enqueueBatch([
      { tag: "A", payload: "[]" },
      { tag: "B", payload: "[]" },
    ]);
    expect(drainSide(fresh).hasHistory()).toBe(false);
    fresh.confirm([fresh.head()!.seq]);
    expect(drainSide(fresh).hasHistory()).toBe(true);
    const dead = outbox("b.db");
    dead.enqueue("A", "[]");
    dead.skipHead(dead.head()!.seq);
    expect(drainSide(dead).hasHistory()).toBe(true);
    const pruned = outbox("c.db");
    const [first] = pruned.enqueueBatch([
      { tag: "A", payload: "[]" },
      { tag: "B", payload: "[]" },
    ]);
    pruned.confirm([first!]);
    const db = new Database(pruned.path);
    db.run("DELETE FROM outbox_delivered");
    db.close();
    expect(drainSide(pruned).hasHistory()).toBe(true); // the head still links to the delivered row
  });

  test("resequenceAbove changes nothing when every pending row is already above the mark, or nothing is pending", () => {
    const ob = outbox();
    expect(drainSide(ob).resequenceAbove(10)).toBeNull();
    drainSide(ob).seedSequence(10);
    const seqs = ob.enqueueBatch([
      { tag: "A", payload: "[]" },
      { tag: "B", payload: "[]" },
    ]);
    expect(drainSide(ob).resequenceAbove(10)).toBeNull();
    expect(ob.fetchUnsynced(10).map((r) => r.seq)).toEqual(seqs);
    expect(ob.listDead()).toEqual([]);
    expect(() => drainSide(ob).resequenceAbove(-1)).toThrow(InvalidArgumentError);
  });
});

describe("backpressure", () => {
  test("enqueue throws QueueFullError at maxPending and accepts again after a confirm", () => {
    const ob = outbox("q.db", "orders", { maxPending: 2 });
    const a = ob.enqueue("A", "[]");
    ob.enqueue("B", "[]");
    const err = errorOf(() => ob.enqueue("C", "[]"));
    expect(err).toBeInstanceOf(QueueFullError);
    expect(err).toMatchObject({ code: "E_QUEUE_FULL", namespace: "orders", maxPending: 2, file: ob.path });
    expect(() => ob.enqueueBatch([{ tag: "C", payload: "[]" }])).toThrow(QueueFullError);
    expect(ob.pendingCount()).toBe(2);
    ob.confirm([a]);
    expect(ob.enqueue("C", "[]")).toBeGreaterThan(a);
  });

  test("a batch that would cross maxPending is refused whole", () => {
    const ob = outbox("q.db", "orders", { maxPending: 3 });
    ob.enqueue("A", "[]");
    expect(() =>
      ob.enqueueBatch([
        { tag: "B", payload: "[]" },
        { tag: "C", payload: "[]" },
        { tag: "D", payload: "[]" },
      ]),
    ).toThrow(QueueFullError);
    expect(ob.pendingCount()).toBe(1);
  });
});

describe("pruneSyncLog", () => {
  /** Confirms each seq as its own range (a range older than RANGE_SPAN_MS is not extended), dated `at`. */
  function confirmApart(ob: Outbox, seqs: number[], at: string[]): void {
    const db = new Database(ob.path);
    seqs.forEach((seq, i) => {
      drainSide(ob).confirmThrough(seq);
      db.run("UPDATE outbox_delivered SET first_at = ?1, last_at = ?1 WHERE last_seq = ?2", [at[i]!, seq]);
    });
    db.close();
  }

  test("deletes old ranges by time, keeping the one that bridges the head and the newest one", () => {
    const ob = outbox();
    const seqs = Array.from({ length: 5 }, (_, i) => ob.enqueue(`t${i}`, "[]"));
    // Mixed formats: ours, SQLite's datetime(), and a +00:00 microsecond one from the reference.
    confirmApart(ob, seqs.slice(0, 4), [
      "2020-01-01T00:00:00.000000+00:00",
      "2020-01-02 00:00:00",
      "2020-01-03T00:00:00.123456+00:00",
      "2020-01-04T00:00:00.000000+00:00",
    ]);
    expect(drainSide(ob).pruneSyncLog(30, new Date("2026-01-01T00:00:00Z"))).toBe(3); // the newest (seq 4, the head's bridge) stays
    expect(ob.verifyChain(ob.fetchUnsynced(10))).toEqual({ ok: true, gaps: [] });
    expect(verifyFile(ob.path).ok).toBe(true);
  });

  test("never deletes a range a queued row links to, also behind rows the reference's worker left at synced=1", () => {
    const ob = outbox();
    const [a, b, c] = Array.from({ length: 5 }, (_, i) => ob.enqueue(`t${i}`, "[]"));
    confirmApart(ob, [a!], ["2020-01-01T00:00:00.000000+00:00"]);
    const reference = new Database(ob.path);
    reference.run("UPDATE outbox_queue SET synced = 1 WHERE seq = ?", [b!]); // its confirm, interrupted before the delete
    reference.close();
    ob.confirm([c!]); // the queue goes on past the leftover: b still links to a
    expect(drainSide(ob).pruneSyncLog(0, new Date(Date.now() + 60_000))).toBe(0);
    const verified = verifyFile(ob.path);
    expect(verified.namespaces[0]!.gaps).toEqual([]);
    expect(new Outbox(ob.path, "orders").close()).toBeUndefined(); // opening for writing finishes b's confirm
    expect(verifyFile(ob.path).ok).toBe(true);
  });

  test("keeps ranges younger than the retention", () => {
    const ob = outbox();
    const a = ob.enqueue("A", "[]");
    const b = ob.enqueue("B", "[]");
    confirmApart(ob, [a, b], [new Date(Date.now() - 120_000).toISOString(), new Date().toISOString()]);
    expect(drainSide(ob).pruneSyncLog(30)).toBe(0);
    expect(drainSide(ob).pruneSyncLog(0, new Date(Date.now() + 60_000))).toBe(1); // keeps the newest (bridge for the next row)
    ob.enqueue("C", "[]");
    expect(ob.verifyChain(ob.fetchUnsynced(10)).ok).toBe(true);
  });

  test("prunes a long log in chunks, every range but the newest once all are old", () => {
    const ob = outbox();
    const seqs = Array.from({ length: 1_203 }, (_, i) => ob.enqueue(`t${i}`, "[]"));
    const db = new Database(ob.path);
    db.transaction(() => {
      for (const seq of seqs.slice(0, -1)) {
        db.run("DELETE FROM outbox_queue WHERE seq = ?", [seq]);
        db.run(
          "INSERT INTO outbox_delivered (last_seq, namespace, first_seq, rows, first_prev, first_at, last_at) VALUES (?1, 'orders', ?1, 1, NULL, '2020-01-01T00:00:00Z', '2020-01-01T00:00:00Z')",
          [seq],
        );
      }
      db.run("UPDATE outbox_queue SET ord = 1");
    })();
    db.close();
    expect(drainSide(ob).pruneSyncLog(1)).toBe(1_201);
    expect(verifyFile(ob.path).ok).toBe(true);
  });
});

describe("verifyChain", () => {
  test("reports a row whose predecessor exists nowhere", () => {
    const ob = outbox();
    const seqs = ob.enqueueBatch([
      { tag: "A", payload: "[]" },
      { tag: "B", payload: "[]" },
      { tag: "C", payload: "[]" },
    ]);
    const db = new Database(ob.path);
    db.run("DELETE FROM outbox_queue WHERE seq = ?", [seqs[1]!]); // lost without a sync-log entry
    db.close();
    expect(ob.verifyChain(ob.fetchUnsynced(10))).toEqual({ ok: false, gaps: [{ seq: seqs[2]!, prevSeq: seqs[1]! }] });
  });
});

describe("delivery bookkeeping and dead letters", () => {
  test("records attempts, failures and refunds on the head", () => {
    const ob = outbox();
    const a = ob.enqueue("A", "[]");
    drainSide(ob).recordAttempt(a, new Date("2026-01-01T00:00:00Z"));
    drainSide(ob).recordAttempt(a);
    drainSide(ob).refundAttempt(a);
    drainSide(ob).recordFailure(a, "constraint failed", "SQLITE_CONSTRAINT", new Date("2026-01-01T00:02:00Z"));
    expect(ob.head()).toMatchObject({
      attempts: 1,
      lastError: "constraint failed",
      lastErrorClass: "SQLITE_CONSTRAINT",
      nextAttemptAt: "2026-01-01T00:02:00.000000+00:00",
    });
    drainSide(ob).refundAttempt(a);
    drainSide(ob).refundAttempt(a);
    expect(ob.head()!.attempts).toBe(0);
    expect(() => drainSide(ob).recordAttempt(9999)).toThrow(NotFoundError);
  });

  test("the sent mark records the highest seq ever sent and never goes down: not by a refund, a failure or a dead letter", () => {
    const ob = outbox();
    const [a, b, c] = ob.enqueueBatch([
      { tag: "A", payload: "[]" },
      { tag: "B", payload: "[]" },
      { tag: "C", payload: "[]" },
    ]);
    expect(drainSide(ob).sentMark()).toBe(0);
    drainSide(ob).recordAttempt(a!, new Date(), c!);
    drainSide(ob).refundAttempt(a!); // an outage: the outcome is still unknown, the mark stays
    expect(ob.head()!.attempts).toBe(0);
    expect(drainSide(ob).sentMark()).toBe(c!);
    drainSide(ob).recordAttempt(a!, new Date(), b!); // a shorter batch later does not lower it
    drainSide(ob).recordFailure(a!, "boom", "E", new Date()); // a known failure of a later batch does not either: an earlier one may still commit
    expect(drainSide(ob).sentMark()).toBe(c!);
    ob.deadLetter(a!, "skipped");
    expect(drainSide(ob).sentMark()).toBe(c!);
    drainSide(ob).confirmThrough(c!);
    expect(drainSide(ob).sentMark()).toBe(c!);
    expect(ob.pendingCount()).toBe(0);
  });

  test("deadLetter moves the head with its last error and the namespace advances", () => {
    const ob = outbox();
    const [a, b] = [ob.enqueue("A", "[1]"), ob.enqueue("B", "[]")];
    drainSide(ob).recordAttempt(a!);
    drainSide(ob).recordFailure(a!, "boom", "E1", new Date());
    ob.deadLetter(a!, "max_attempts");
    expect(ob.head()!.seq).toBe(b!);
    expect(ob.getDead(a!)).toMatchObject({
      seq: a,
      tag: "A",
      payload: "[1]",
      attempts: 1,
      error: "boom",
      errorClass: "E1",
      reason: "max_attempts",
      replayedAt: null,
    });
    expect(ob.deadCount()).toBe(1);
    expect(ob.verifyChain(ob.fetchUnsynced(10)).ok).toBe(true);
  });

  test("deadLetter refuses a row that is not the head, and a seq that does not exist", () => {
    const ob = outbox();
    const [, b] = ob.enqueueBatch([
      { tag: "A", payload: "[]" },
      { tag: "B", payload: "[]" },
    ]);
    expect(() => ob.deadLetter(b!, "skipped")).toThrow(InvalidArgumentError);
    expect(() => ob.skipHead(12345)).toThrow(NotFoundError);
    expect(ob.pendingCount()).toBe(2);
  });

  test("replayDead re-enqueues at the tail once and records the new seq", () => {
    const ob = outbox();
    const [a] = [ob.enqueue("A", "[1]"), ob.enqueue("B", "[]")];
    ob.skipHead(a!);
    const replayed = ob.replayDead(a!);
    const rows = ob.fetchUnsynced(10);
    expect(rows.at(-1)).toMatchObject({ seq: replayed, tag: "A", payload: "[1]", prevSeq: rows.at(-2)!.seq });
    expect(ob.getDead(a!)).toMatchObject({ reason: "skipped", replayedAsSeq: replayed });
    expect(ob.deadCount()).toBe(0);
    expect(ob.listDead()).toHaveLength(1);
    expect(() => ob.replayDead(a!)).toThrow(InvalidArgumentError);
    expect(() => ob.replayDead(777)).toThrow(NotFoundError);
    expectIntactChain(ob);
  });
});

describe("lifecycle and durability", () => {
  test("a closed outbox throws OutboxClosedError naming the file and namespace; close is idempotent", () => {
    const ob = outbox();
    ob.enqueue("A", "[]");
    ob.close();
    ob.close();
    const err = errorOf(() => ob.enqueue("B", "[]"));
    expect(err).toBeInstanceOf(OutboxClosedError);
    expect(err).toMatchObject({ code: "E_CLOSED", file: ob.path, namespace: "orders" });
    expect(err.message).toContain(ob.path);
    for (const call of [() => ob.fetchUnsynced(1), () => ob.pendingCount(), () => ob.confirm([1]), () => ob.health()]) {
      expect(call).toThrow(OutboxClosedError);
    }
    const again = outbox();
    expect(again.pendingCount()).toBe(1);
  });

  test("opening twice is idempotent and the file is in WAL mode", () => {
    outbox().enqueue("A", "[]");
    const second = outbox();
    expect(second.pendingCount()).toBe(1);
    const db = new Database(second.path, { readonly: true });
    expect(db.query("PRAGMA journal_mode").get()).toEqual({ journal_mode: "wal" });
    expect(
      db.query("SELECT name FROM sqlite_schema WHERE name IN ('idx_outbox_prev', 'idx_outbox_prev_unique')").all(),
    ).toEqual([]);
    db.close();
  });

  test("a file it creates gets 2 KiB pages; an existing file (the reference's, 4 KiB) keeps its page size and works", () => {
    const fresh = outbox("new.db");
    fresh.enqueue("A", "[]");
    const old = new Database(tmp.file("old4k.db"));
    old.run("PRAGMA page_size = 4096");
    old.close();
    buildReferenceFile(tmp.file("old4k.db"));
    const existing = outbox("old4k.db", "orders");
    existing.enqueue("B", "[]");
    for (const [ob, size] of [
      [fresh, NEW_FILE_PAGE_SIZE],
      [existing, 4096],
    ] as const) {
      const db = new Database(ob.path, { readonly: true });
      expect(db.query("PRAGMA page_size").get()).toEqual({ page_size: size });
      db.close();
      expect(verifyFile(ob.path).ok).toBe(true);
    }
    expect(NEW_FILE_PAGE_SIZE).toBe(2048);
  });

  test("durability selects synchronous NORMAL (default) or FULL, always in WAL mode", () => {
    for (const [durability, level] of [
      ["normal", 1],
      ["full", 2],
    ] as const) {
      const db = openWritable(tmp.file(`${durability}.db`), { durability, busyTimeoutMs: 1000 });
      expect(db.query("PRAGMA synchronous").get()).toEqual({ synchronous: level });
      expect(db.query("PRAGMA journal_mode").get()).toEqual({ journal_mode: "wal" });
      db.close();
    }
    outbox("f.db", "orders", { durability: "full" }).enqueue("A", "[]");
  });

  test("opening an already migrated file needs no write lock (migrations are checked, not re-run)", () => {
    outbox().enqueue("A", "[]");
    const holder = new Database(tmp.file("q.db"));
    holder.run("BEGIN IMMEDIATE"); // another process mid-write
    try {
      const second = outbox("q.db", "orders", { busyTimeoutMs: 50 });
      expect(second.pendingCount()).toBe(1);
    } finally {
      holder.run("ROLLBACK");
      holder.close();
    }
  });

  test("a push, a batch and a drain's write wait out another process holding the write lock, then succeed", async () => {
    const ob = outbox("q.db", "orders", { busyTimeoutMs: 10_000 });
    ob.enqueue("A", "[]");
    for (const write of [
      () => ob.enqueue("B", "[]"),
      () => ob.enqueueBatch([{ tag: "C", payload: "[]" }]),
      () => drainSide(ob).recordAttempt(ob.head()!.seq),
    ]) {
      const holder = Bun.spawn(["bun", `${import.meta.dir}/support/children/write-lock-holder.ts`, ob.path, "150"], {
        stdout: "pipe",
      });
      await holder.stdout.getReader().read(); // "locked"
      write(); // SQLite's own busy handler is off on our connections: without our waits this throws SQLITE_BUSY at once
      expect(await holder.exited).toBe(0);
    }
    expect(ob.fetchUnsynced(10).map((r) => r.tag)).toEqual(["A", "B", "C"]);
    expect(ob.head()!.attempts).toBe(1);
  });

  test("a write lock held past the busy timeout is a StorageError naming the file and SQLITE_BUSY, never a silent drop", () => {
    const ob = outbox("q.db", "orders", { busyTimeoutMs: 30 });
    ob.enqueue("A", "[]");
    const holder = new Database(ob.path);
    holder.run("PRAGMA busy_timeout = 0");
    holder.run("BEGIN IMMEDIATE");
    let err: StorageError;
    try {
      err = errorOf<StorageError>(() => ob.enqueue("B", "[]"));
    } finally {
      holder.run("ROLLBACK");
      holder.close();
    }
    expect(err).toBeInstanceOf(StorageError);
    expect(err).toMatchObject({ code: "E_STORAGE", file: ob.path, namespace: "orders" });
    expect(err.message).toContain("SQLITE_BUSY");
    expect(ob.fetchUnsynced(10).map((r) => r.tag)).toEqual(["A"]);
    expect(ob.enqueue("B", "[]")).toBe(2); // the outbox is still usable
  });

  test("a pre-existing outbox_dead_log with other columns gains ours and dead-lettering works", () => {
    buildReferenceFile(tmp.file("old.db"));
    const db = new Database(tmp.file("old.db"));
    db.run("CREATE TABLE outbox_dead_log (seq INTEGER PRIMARY KEY, namespace TEXT NOT NULL, note TEXT)");
    db.close();
    const ob = outbox("old.db", "fresh");
    const a = ob.enqueue("A", "[]");
    ob.deadLetter(a, "skipped", "why", "E");
    expect(ob.getDead(a)).toMatchObject({ seq: a, reason: "skipped", error: "why", errorClass: "E", tag: "A" });
  });

  test("a file deleted while open is a StorageError within a second, not a queue that silently writes to nowhere", async () => {
    const ob = outbox("gone.db");
    ob.enqueue("A", "[]");
    for (const suffix of ["", "-wal", "-shm"]) rmSync(`${ob.path}${suffix}`, { force: true });
    await Bun.sleep(1_100);
    const err = errorOf(() => ob.enqueue("B", "[]"));
    expect(err).toBeInstanceOf(StorageError);
    expect(err).toMatchObject({ code: "E_STORAGE", file: ob.path, namespace: "orders" });
    expect(err.message).toContain("deleted or replaced");
    expect(ob.closed).toBe(true); // a producer's next push reopens the path
    const again = outbox("gone.db");
    expect(again.enqueue("C", "[]")).toBe(1);
  });

  test("rejects invalid options with InvalidArgumentError", () => {
    expect(() => outbox("q.db", "orders", { maxPending: 0 })).toThrow(InvalidArgumentError);
    expect(() => outbox("q.db", "orders", { durability: "fast" })).toThrow(InvalidArgumentError);
    expect(() => outbox("q.db", "")).toThrow(InvalidArgumentError);
  });
});
