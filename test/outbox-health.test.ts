import { Database } from "bun:sqlite";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { findDeadLetters, healthAll, listOutboxFiles, Outbox, StorageError, verifyFile } from "../src/index.ts";
import { scanIntegrity } from "../src/outbox/inspect.ts";
import { pendingCountSql } from "../src/outbox/schema.ts";
import { readSnapshot } from "../src/outbox/sqlite-open.ts";
import { hashTree } from "./support/dir-hash.ts";
import { errorOf } from "./support/errors.ts";
import { buildReferenceFile } from "./support/reference-db.ts";
import { SLOW } from "./support/slow.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";
import { drainSide } from "./support/queue.ts";

let tmp: TempDir;
beforeEach(() => {
  tmp = makeTempDir();
});
afterEach(() => tmp.cleanup());

function seed(): void {
  const orders = new Outbox(tmp.file("orders.db"), "orders");
  const [a, b] = orders.enqueueBatch([
    { tag: "A", payload: "[]" },
    { tag: "B", payload: "[]" },
    { tag: "C", payload: "[]" },
  ]);
  orders.confirm([a!]);
  drainSide(orders).recordAttempt(b!, new Date("2026-01-01T00:00:00Z"));
  drainSide(orders).recordFailure(b!, "no such table", "SQLITE_ERROR", new Date("2026-01-01T00:02:00Z"));
  orders.close();
  const users = new Outbox(tmp.file("users.db"), "users");
  const u = users.enqueue("U", "[]");
  users.skipHead(u);
  users.close();
  new Outbox(tmp.file("empty.db"), "empty").close();
}

describe("healthAll", () => {
  test("reports every field per namespace", () => {
    seed();
    const now = new Date(Date.now() + 5_000);
    const health = healthAll(tmp.path, { maxPending: 8, now });
    expect(health.map((h) => h.namespace)).toEqual(["empty", "orders", "users"]);
    const orders = health[1]!;
    expect(orders).toMatchObject({
      file: tmp.file("orders.db"),
      depth: 2,
      headSeq: 2,
      headAttempts: 1,
      isStuck: true,
      lastError: "no such table",
      lastErrorClass: "SQLITE_ERROR",
      lastAttemptAt: "2026-01-01T00:00:00.000000+00:00",
      nextAttemptAt: "2026-01-01T00:02:00.000000+00:00",
      capacityPct: 25,
      deadLetterCount: 0,
    });
    expect(orders.oldestPendingAgeMs).toBeGreaterThanOrEqual(4_000);
    expect(orders.lastDeliveredAt).toMatch(/\+00:00$/);
    expect(health[2]).toMatchObject({
      depth: 0,
      headSeq: null,
      isStuck: false,
      deadLetterCount: 1,
      oldestPendingAgeMs: null,
      capacityPct: 0,
    });
    expect(health[0]).toMatchObject({ namespace: "empty", depth: 0, lastDeliveredAt: null });
  });

  test("capacityPct is null without maxPending", () => {
    seed();
    expect(healthAll(tmp.path).every((h) => h.capacityPct === null)).toBe(true);
  });

  test("never creates or changes a file when no writer has them open", () => {
    seed();
    const before = hashTree(tmp.path);
    expect(Object.keys(before).some((n) => n.endsWith("-wal") || n.endsWith("-shm"))).toBe(false);
    healthAll(tmp.path);
    verifyFile(tmp.file("orders.db"));
    findDeadLetters(tmp.path);
    expect(hashTree(tmp.path)).toEqual(before);
  });

  test("reads a file a writer has open without creating files or changing the database and its WAL", () => {
    seed();
    const writer = new Outbox(tmp.file("orders.db"), "orders");
    try {
      writer.enqueue("D", "[]");
      const withoutShm = () =>
        Object.fromEntries(Object.entries(hashTree(tmp.path)).filter(([n]) => !n.endsWith("-shm")));
      const names = () => Object.keys(hashTree(tmp.path));
      const before = withoutShm();
      const namesBefore = names();
      const health = healthAll(tmp.path);
      expect(health.find((h) => h.namespace === "orders")!.depth).toBe(3); // sees the uncheckpointed WAL row
      expect(verifyFile(tmp.file("orders.db")).ok).toBe(true);
      expect(names()).toEqual(namesBefore);
      expect(withoutShm()).toEqual(before); // -shm holds reader marks by design; db and -wal are untouched
    } finally {
      writer.close();
    }
  });

  test("health and verify read a consistent state while a writer keeps opening, writing and closing the file", async () => {
    // The writer's close checkpoints into the database file: a reader that opened the quiet file
    // `immutable` must notice and read again, never report a torn state as a broken chain.
    const path = tmp.file("orders.db");
    const ob = new Outbox(path, "orders");
    for (let i = 0; i < 20; i++)
      ob.enqueueBatch(Array.from({ length: 500 }, (_, j) => ({ tag: `INSERT ${i}.${j}`, payload: "[]" })));
    ob.close();
    const stop = tmp.file("stop");
    const churn = Bun.spawn(
      [process.execPath, join(import.meta.dir, "support", "children", "outbox-churn.ts"), path, "orders", stop],
      { stdout: "pipe", stderr: "pipe" },
    );
    const problems = new Set<string>();
    let reads = 0;
    try {
      // A second of churn by default, two with SQLOUTBOX_SLOW_TESTS=1.
      for (const end = Date.now() + (SLOW ? 2_000 : 1_000); Date.now() < end; reads++) {
        const verified = verifyFile(path);
        for (const p of [
          ...verified.problems,
          ...verified.namespaces.flatMap((n) => [...n.problems, ...n.gaps.map((g) => `gap ${g.seq} -> ${g.prevSeq}`)]),
        ])
          problems.add(p);
        try {
          const depth = healthAll(tmp.path).find((h) => h.namespace === "orders")!.depth;
          if (depth !== 10_000 && depth !== 9_700) problems.add(`health depth ${depth}`); // between confirm and enqueue: 9 700
        } catch (e) {
          problems.add(`health threw ${(e as Error).message}`);
        }
        await Bun.sleep(0);
      }
    } finally {
      writeFileSync(stop, "");
    }
    expect(await churn.exited).toBe(0);
    expect(await new Response(churn.stderr).text()).toBe("");
    expect(JSON.parse(await new Response(churn.stdout).text()).rounds).toBeGreaterThan(5);
    expect(reads).toBeGreaterThan(5);
    expect([...problems].slice(0, 5)).toEqual([]);
  }, 20_000);

  test("a read that began on a quiet file is read again when a writer opened, wrote and checkpointed it meanwhile", () => {
    const path = tmp.file("orders.db");
    const ob = new Outbox(path, "orders");
    ob.enqueueBatch(Array.from({ length: 2_000 }, (_, i) => ({ tag: `INSERT ${i}`, payload: "[]" })));
    ob.close(); // checkpointed, -wal removed: the next read opens the file immutable
    const seen: Array<{ counter: number; rows: number }> = [];
    const result = readSnapshot(path, (db) => {
      const counter = db.query<{ pending: number }, [string]>(pendingCountSql("ord")).get("orders")!.pending;
      if (seen.length === 0) {
        // Another process appears mid-read: confirms 1 500 rows and closes, checkpointing into the file.
        const writer = new Outbox(path, "orders");
        writer.confirm(writer.fetchUnsynced(1_500).map((r) => r.seq));
        writer.close();
      }
      const rows = db
        .query<{ n: number }, []>("SELECT count(*) AS n FROM outbox_queue WHERE namespace = 'orders' AND synced = 0")
        .get()!.n;
      seen.push({ counter, rows });
      return { counter, rows };
    });
    expect(seen.length).toBe(2);
    expect(result).toEqual({ counter: 500, rows: 500 });
    expect(verifyFile(path).ok).toBe(true);
  });

  test("a garbage file is a StorageError naming it, unless onError takes it; its bytes stay as they were", () => {
    seed();
    writeFileSync(tmp.file("garbage.db"), Buffer.alloc(8192, 0x5a));
    const before = hashTree(tmp.path);
    const err = errorOf(() => healthAll(tmp.path));
    expect(err).toBeInstanceOf(StorageError);
    expect(err).toMatchObject({ code: "E_STORAGE", file: tmp.file("garbage.db") });
    expect(err.message).toContain(tmp.file("garbage.db"));
    const skipped: string[] = [];
    const health = healthAll(tmp.path, { onError: (file) => skipped.push(file) });
    expect(skipped).toEqual([tmp.file("garbage.db")]);
    expect(health).toHaveLength(3);
    expect(hashTree(tmp.path)).toEqual(before);
  });

  test("a SQLite file without an outbox is reported, and no schema is created in it", () => {
    const other = new Database(tmp.file("other.db"));
    other.run("CREATE TABLE x (a)");
    other.close();
    const before = hashTree(tmp.path);
    expect(() => healthAll(tmp.path)).toThrow(/not an outbox file/);
    expect(hashTree(tmp.path)).toEqual(before);
  });

  test("a zero-byte file (created, never migrated) reads as an empty outbox for health, is flagged by verify, and stays zero bytes", () => {
    writeFileSync(tmp.file("fresh.db"), "");
    const before = hashTree(tmp.path);
    expect(healthAll(tmp.path, { maxPending: 10 })).toMatchObject([
      { namespace: "fresh", depth: 0, headSeq: null, capacityPct: 0 },
    ]);
    expect(verifyFile(tmp.file("fresh.db"))).toMatchObject({
      file: tmp.file("fresh.db"),
      namespaces: [],
      problems: [expect.stringContaining("empty file")],
      ok: false,
    });
    expect(findDeadLetters(tmp.path)).toEqual([]);
    expect(hashTree(tmp.path)).toEqual(before);
  });

  test("a missing db_dir is a StorageError, not an empty answer", () => {
    expect(() => healthAll(tmp.file("nope"))).toThrow(StorageError);
    expect(() => healthAll(tmp.file("nope"))).toThrow(/does not exist/);
  });
});

describe("Outbox.health", () => {
  test("uses the outbox's maxPending and marks a head with two attempts stuck", () => {
    const ob = new Outbox(tmp.file("q.db"), "q", { maxPending: 4 });
    try {
      const a = ob.enqueue("A", "[]");
      expect(ob.health()).toMatchObject({ depth: 1, capacityPct: 25, isStuck: false, headSeq: a });
      drainSide(ob).recordAttempt(a);
      expect(ob.health().isStuck).toBe(false); // an attempt in flight is not a failure
      drainSide(ob).recordAttempt(a);
      expect(ob.health()).toMatchObject({ headAttempts: 2, isStuck: true, lastError: null });
    } finally {
      ob.close();
    }
  });
});

describe("inspect", () => {
  test("listOutboxFiles lists *.db files only, sorted and absolute", () => {
    seed();
    writeFileSync(tmp.file("notes.txt"), "x");
    expect(listOutboxFiles(tmp.path)).toEqual([tmp.file("empty.db"), tmp.file("orders.db"), tmp.file("users.db")]);
  });

  test("verifyFile reports a lost row as a gap and a garbage file as a problem", () => {
    const ob = new Outbox(tmp.file("q.db"), "q");
    const [, b, c] = ob.enqueueBatch([
      { tag: "A", payload: "[]" },
      { tag: "B", payload: "[]" },
      { tag: "C", payload: "[]" },
    ]);
    ob.close();
    const db = new Database(tmp.file("q.db"));
    db.run("DELETE FROM outbox_queue WHERE seq = ?", [b!]);
    db.close();
    const result = verifyFile(tmp.file("q.db"));
    expect(result.ok).toBe(false);
    expect(result.namespaces[0]!.gaps).toEqual([{ seq: c!, prevSeq: b! }]);

    writeFileSync(tmp.file("garbage.db"), "this is not a database at all, just text".repeat(200));
    const garbage = verifyFile(tmp.file("garbage.db"));
    expect(garbage.ok).toBe(false);
    expect(garbage.problems[0]).toContain(tmp.file("garbage.db"));
  });

  test("scanIntegrity reports a file-level problem (a garbage file) in its lines", () => {
    const ob = new Outbox(tmp.file("q.db"), "q");
    ob.enqueue("A", "[]");
    ob.close();
    writeFileSync(tmp.file("garbage.db"), "this is not a database at all, just text".repeat(200));
    const report = scanIntegrity([tmp.file("q.db"), tmp.file("garbage.db")]);
    expect(report.ok).toBe(false);
    // The file is named once, at the start of its line.
    expect(report.lines).toEqual([
      `${tmp.file("q.db")} [q]: 1 pending, ok`,
      `${tmp.file("garbage.db")}: cannot read outbox file: file is not a database [SQLITE_NOTADB]`,
    ]);
  });

  test("verifyFile reports forward links, a restarted chain and two rows linking to one predecessor in a damaged file", () => {
    // A hand-made queue without the UNIQUE on prev_seq, as a damaged or foreign file might be.
    const db = new Database(tmp.file("damaged.db"));
    db.run(`CREATE TABLE outbox_queue (seq INTEGER PRIMARY KEY AUTOINCREMENT, created_at TEXT NOT NULL, namespace TEXT NOT NULL,
      source TEXT NOT NULL DEFAULT '', tag TEXT NOT NULL, payload TEXT NOT NULL, prev_seq INTEGER, synced INTEGER NOT NULL DEFAULT 0)`);
    const add = db.query(
      "INSERT INTO outbox_queue (seq, created_at, namespace, tag, payload, prev_seq) VALUES (?, 'x', 'q', 'T', '[]', ?)",
    );
    for (const [seq, prev] of [
      [1, null],
      [2, 1],
      [3, 1],
      [4, 9],
      [5, null],
    ] as const)
      add.run(seq, prev);
    db.close();
    const q = verifyFile(tmp.file("damaged.db")).namespaces[0]!;
    expect(q.problems).toEqual([
      "seq 4 links forward to prev_seq 9",
      "chain restarts at seq 5: a pending row behind the head has no prev_seq",
      "seq 2 and seq 3 both link to prev_seq 1",
    ]);
    expect(q.rows).toBe(5);
  });

  test("verifyFile reports a pending count that drifted from the rows, in both layouts", () => {
    const lean = new Outbox(tmp.file("q.db"), "q");
    lean.enqueue("A", "[]");
    lean.enqueue("B", "[]");
    lean.close();
    let db = new Database(tmp.file("q.db"));
    db.run("UPDATE outbox_queue SET ord = 7 WHERE seq = 2");
    db.close();
    let result = verifyFile(tmp.file("q.db"));
    expect(result.ok).toBe(false);
    expect(result.namespaces[0]!.problems[0]).toContain("pending count (by ord) says 7 but 2 row(s) are pending");

    buildReferenceFile(tmp.file("ref.db"));
    new Outbox(tmp.file("ref.db"), "payments").close(); // migrated: the legacy layout's counter
    db = new Database(tmp.file("ref.db"));
    db.run("UPDATE sqlite_sequence SET seq = 7 WHERE name = 'outbox_pending:payments'");
    db.close();
    result = verifyFile(tmp.file("ref.db"));
    expect(result.ok).toBe(false);
    expect(result.namespaces.find((n) => n.namespace === "payments")!.problems).toContain(
      "pending count (by counter) says 7 but 2 row(s) are pending",
    );
  });

  test("findDeadLetters returns dead letters of every file", () => {
    seed();
    const dead = findDeadLetters(tmp.path);
    expect(dead.map((d) => [d.namespace, d.reason, d.error])).toEqual([["users", "skipped", null]]);
  });
});
