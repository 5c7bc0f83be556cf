import { existsSync, mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import {
  closeSharedOutboxes,
  decodeArgs,
  InvalidArgumentError,
  OutboxClosedError,
  QueueFullError,
  SQLMiddleware,
  StorageError,
} from "../src/index.ts";
import { snapshotDir } from "./fixtures/dir-snapshot.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";

let tmp: TempDir;
beforeEach(() => {
  tmp = makeTempDir();
});
afterEach(() => {
  closeSharedOutboxes();
  tmp.cleanup();
});

class OrderMiddleware extends SQLMiddleware {
  pushOrder(id: number, amount: number): number {
    return this.push("orders", "INSERT INTO orders (id, amount) VALUES (?, ?)", [id, amount]);
  }
}

function errorOf(fn: () => unknown): Error & Record<string, unknown> {
  try {
    fn();
  } catch (e) {
    return e as Error & Record<string, unknown>;
  }
  throw new Error("expected a throw");
}

describe("SQLMiddleware", () => {
  test("push stores the SQL as tag, the encoded args as payload and the class name as source", () => {
    const mw = new OrderMiddleware({ dbDir: tmp.file("data") });
    const seq = mw.pushOrder(42, 99.99);
    const row = mw.outbox("orders").head()!;
    expect(row).toMatchObject({ seq, namespace: "orders", source: "OrderMiddleware", tag: "INSERT INTO orders (id, amount) VALUES (?, ?)" });
    expect(decodeArgs(row.payload)).toEqual([42, 99.99]);
    expect(mw.outbox("orders").path).toBe(tmp.file("data/orders.db"));
  });

  test("an explicit source label overrides the class name", () => {
    const mw = new SQLMiddleware({ dbDir: tmp.path, source: "api-7" });
    expect(mw.source).toBe("api-7");
    mw.push("t", "INSERT INTO t (a) VALUES (?)", [1]);
    expect(mw.outbox("t").head()!.source).toBe("api-7");
    expect(new SQLMiddleware({ dbDir: tmp.path }).source).toBe("SQLMiddleware");
  });

  test("pushMany writes all statements in one chained transaction, or none when one argument is invalid", () => {
    const mw = new SQLMiddleware({ dbDir: tmp.path });
    const seqs = mw.pushMany("t", [["INSERT INTO t (a) VALUES (?)", [1]], ["DELETE FROM t"], ["UPDATE t SET a = ?", [2n ** 60n]]]);
    const rows = mw.outbox("t").fetchUnsynced(10);
    expect(rows.map((r) => r.seq)).toEqual(seqs);
    expect(rows.map((r) => decodeArgs(r.payload))).toEqual([[1], [], [2n ** 60n]]);
    const err = errorOf(() => mw.pushMany("t", [["INSERT INTO t (a) VALUES (?)", [3]], ["INSERT INTO t (a) VALUES (?)", [new Date()]]]));
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(mw.outbox("t").pendingCount()).toBe(3);
  });

  test("shares one Outbox per (file, namespace) across producers in the process", () => {
    const a = new SQLMiddleware({ dbDir: tmp.path });
    const b = new OrderMiddleware({ dbDir: `${tmp.path}/./` });
    expect(a.outbox("orders")).toBe(b.outbox("orders"));
    expect(a.outbox("orders")).not.toBe(a.outbox("users"));
    a.push("orders", "X", []);
    b.push("orders", "Y", []);
    expect(a.outbox("orders").fetchUnsynced(10).map((r) => r.prevSeq)).toEqual([null, 1]);
  });

  test("producers that reach one db_dir through a symlink share its Outbox", () => {
    mkdirSync(tmp.file("real"));
    symlinkSync(tmp.file("real"), tmp.file("link"));
    const a = new SQLMiddleware({ dbDir: tmp.file("real"), maxPending: 5 });
    const b = new SQLMiddleware({ dbDir: tmp.file("link"), maxPending: 5 });
    expect(b.outbox("orders")).toBe(a.outbox("orders"));
    const c = new SQLMiddleware({ dbDir: tmp.file("link"), maxPending: 6 });
    expect(errorOf(() => c.push("orders", "X", []))).toBeInstanceOf(InvalidArgumentError);
  });

  test("creates db_dir on first use, not at construction", () => {
    const dir = tmp.file("a/b/c");
    const mw = new SQLMiddleware({ dbDir: dir });
    expect(existsSync(dir)).toBe(false);
    mw.push("t", "X", []);
    expect(existsSync(`${dir}/t.db`)).toBe(true);
  });

  test("after the shared outbox is closed, the next push reopens it", () => {
    const mw = new SQLMiddleware({ dbDir: tmp.path });
    const first = mw.outbox("t");
    mw.push("t", "X", []);
    first.close();
    expect(() => first.enqueue("Y", "[]")).toThrow(OutboxClosedError);
    expect(mw.push("t", "Y", [])).toBe(2);
  });
});

describe("bad input is a typed error naming the file and namespace, and leaves data as it was", () => {
  test("unsupported argument types", () => {
    const mw = new SQLMiddleware({ dbDir: tmp.path });
    mw.push("t", "X", [1]);
    mw.outbox("t").close();
    const before = snapshotDir(tmp.path);
    for (const bad of [new Date(), { a: 1 }, NaN, Infinity, undefined, () => 1, Symbol("s")]) {
      const err = errorOf(() => mw.push("t", "INSERT INTO t (a, b) VALUES (?, ?)", [1, bad]));
      expect(err).toBeInstanceOf(InvalidArgumentError);
      expect(err.code).toBe("E_INVALID_ARG");
      expect(err.details).toMatchObject({ index: 1, namespace: "t", file: tmp.file("t.db") });
      expect(err.message).toContain(tmp.file("t.db"));
    }
    closeSharedOutboxes();
    expect(snapshotDir(tmp.path)).toEqual(before);
  });

  test("a full queue", () => {
    const mw = new SQLMiddleware({ dbDir: tmp.path, maxPending: 2 });
    mw.push("t", "A", []);
    mw.push("t", "B", []);
    const err = errorOf(() => mw.push("t", "C", []));
    expect(err).toBeInstanceOf(QueueFullError);
    expect(err).toMatchObject({ code: "E_QUEUE_FULL", namespace: "t", maxPending: 2, file: tmp.file("t.db") });
    expect(err.message).toContain(tmp.file("t.db"));
    expect(mw.outbox("t").fetchUnsynced(10).map((r) => r.tag)).toEqual(["A", "B"]);
  });

  test("an unwritable db_dir (its parent is a regular file)", () => {
    writeFileSync(tmp.file("plain-file"), "x");
    const dir = tmp.file("plain-file/outbox");
    const mw = new SQLMiddleware({ dbDir: dir });
    const err = errorOf(() => mw.push("t", "X", []));
    expect(err).toBeInstanceOf(StorageError);
    expect(err).toMatchObject({ code: "E_STORAGE", file: dir });
    expect(err.message).toContain(dir);
  });

  test("a file of garbage bytes", () => {
    const garbage = Buffer.alloc(4096, 0xab);
    writeFileSync(tmp.file("t.db"), garbage);
    const before = snapshotDir(tmp.path);
    const mw = new SQLMiddleware({ dbDir: tmp.path });
    const err = errorOf(() => mw.push("t", "X", []));
    expect(err).toBeInstanceOf(StorageError);
    expect(err).toMatchObject({ code: "E_STORAGE", file: tmp.file("t.db"), namespace: "t" });
    expect(err.message).toContain(tmp.file("t.db"));
    expect(err.message).toContain('namespace "t"');
    expect(snapshotDir(tmp.path)).toEqual(before);
  });

  test("a closed outbox", () => {
    const mw = new SQLMiddleware({ dbDir: tmp.path });
    const ob = mw.outbox("t");
    ob.enqueue("A", "[]");
    ob.close();
    const err = errorOf(() => ob.enqueueBatch([{ tag: "B", payload: "[]" }]));
    expect(err).toBeInstanceOf(OutboxClosedError);
    expect(err).toMatchObject({ code: "E_CLOSED", file: tmp.file("t.db"), namespace: "t" });
  });

  test("a table name that would escape db_dir", () => {
    const mw = new SQLMiddleware({ dbDir: tmp.path });
    for (const table of ["../evil", "a/b", "", ".."]) {
      expect(errorOf(() => mw.push(table, "X", []))).toBeInstanceOf(InvalidArgumentError);
    }
    expect(Object.keys(snapshotDir(tmp.path))).toEqual([]);
  });

  test("a producer asking for a different durability than the already shared outbox has", () => {
    new SQLMiddleware({ dbDir: tmp.path }).push("t", "A", []);
    const err = errorOf(() => new SQLMiddleware({ dbDir: tmp.path, durability: "full" }).push("t", "B", []));
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err.message).toContain('durability="normal"');
    expect(err).toMatchObject({ details: { namespace: "t", file: tmp.file("t.db") } });
  });

  test("a producer with a different maxPending for an already shared outbox", () => {
    new SQLMiddleware({ dbDir: tmp.path, maxPending: 5 }).push("t", "A", []);
    const err = errorOf(() => new SQLMiddleware({ dbDir: tmp.path }).push("t", "B", []));
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err.message).toContain("maxPending=5");
  });
});
