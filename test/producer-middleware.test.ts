import { existsSync, mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import {
  closeSharedOutboxes,
  decodeArgs,
  InvalidArgumentError,
  InvalidStatementError,
  OutboxClosedError,
  QueueFullError,
  SQLMiddleware,
  StorageError,
} from "../src/index.ts";
import { hashTree } from "./support/dir-hash.ts";
import { errorOf } from "./support/errors.ts";
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

/** A valid statement that stands for the event `name`. */
const stmt = (name: string) => `INSERT INTO t (a) VALUES ('${name}')`;

describe("SQLMiddleware", () => {
  test("push stores the SQL as tag, the encoded args as payload and the class name as source", () => {
    const mw = new OrderMiddleware({ dbDir: tmp.file("data") });
    const seq = mw.pushOrder(42, 99.99);
    const row = mw.outbox("orders").head()!;
    expect(row).toMatchObject({
      seq,
      namespace: "orders",
      source: "OrderMiddleware",
      tag: "INSERT INTO orders (id, amount) VALUES (?, ?)",
    });
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
    const seqs = mw.pushMany("t", [
      ["INSERT INTO t (a) VALUES (?)", [1]],
      ["DELETE FROM t"],
      ["UPDATE t SET a = ?", [2n ** 60n]],
    ]);
    const rows = mw.outbox("t").fetchUnsynced(10);
    expect(rows.map((r) => r.seq)).toEqual(seqs);
    expect(rows.map((r) => decodeArgs(r.payload))).toEqual([[1], [], [2n ** 60n]]);
    const err = errorOf(() =>
      mw.pushMany("t", [
        ["INSERT INTO t (a) VALUES (?)", [3]],
        ["INSERT INTO t (a) VALUES (?)", [new Date()]],
      ]),
    );
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(mw.outbox("t").pendingCount()).toBe(3);
  });

  test("shares one Outbox per (file, namespace) across producers in the process", () => {
    const a = new SQLMiddleware({ dbDir: tmp.path });
    const b = new OrderMiddleware({ dbDir: `${tmp.path}/./` });
    expect(a.outbox("orders")).toBe(b.outbox("orders"));
    expect(a.outbox("orders")).not.toBe(a.outbox("users"));
    a.push("orders", stmt("X"), []);
    b.push("orders", stmt("Y"), []);
    expect(
      a
        .outbox("orders")
        .fetchUnsynced(10)
        .map((r) => r.prevSeq),
    ).toEqual([null, 1]);
  });

  test("producers that reach one db_dir through a symlink share its Outbox", () => {
    mkdirSync(tmp.file("real"));
    symlinkSync(tmp.file("real"), tmp.file("link"));
    const a = new SQLMiddleware({ dbDir: tmp.file("real"), maxPending: 5 });
    const b = new SQLMiddleware({ dbDir: tmp.file("link"), maxPending: 5 });
    expect(b.outbox("orders")).toBe(a.outbox("orders"));
    const c = new SQLMiddleware({ dbDir: tmp.file("link"), maxPending: 6 });
    expect(errorOf(() => c.push("orders", stmt("X"), []))).toBeInstanceOf(InvalidArgumentError);
  });

  test("creates db_dir on first use, not at construction", () => {
    const dir = tmp.file("a/b/c");
    const mw = new SQLMiddleware({ dbDir: dir });
    expect(existsSync(dir)).toBe(false);
    mw.push("t", stmt("X"), []);
    expect(existsSync(`${dir}/t.db`)).toBe(true);
  });

  test("after the shared outbox is closed, the next push reopens it", () => {
    const mw = new SQLMiddleware({ dbDir: tmp.path });
    const first = mw.outbox("t");
    mw.push("t", stmt("X"), []);
    first.close();
    expect(() => first.enqueue(stmt("Y"), "[]")).toThrow(OutboxClosedError);
    expect(mw.push("t", stmt("Y"), [])).toBe(2);
  });
});

describe("bad input is a typed error naming the file and namespace, and leaves data as it was", () => {
  test("unsupported argument types", () => {
    const mw = new SQLMiddleware({ dbDir: tmp.path });
    mw.push("t", "INSERT INTO t (a) VALUES (?)", [1]);
    mw.outbox("t").close();
    const before = hashTree(tmp.path);
    for (const bad of [new Date(), { a: 1 }, NaN, Infinity, undefined, () => 1, Symbol("s")]) {
      const err = errorOf(() => mw.push("t", "INSERT INTO t (a, b) VALUES (?, ?)", [1, bad]));
      expect(err).toBeInstanceOf(InvalidArgumentError);
      expect(err.code).toBe("E_INVALID_ARG");
      expect(err.details).toMatchObject({ index: 1, namespace: "t", file: tmp.file("t.db") });
      expect(err.message).toContain(tmp.file("t.db"));
    }
    closeSharedOutboxes();
    expect(hashTree(tmp.path)).toEqual(before);
  });

  test("a full queue", () => {
    const mw = new SQLMiddleware({ dbDir: tmp.path, maxPending: 2 });
    mw.push("t", stmt("A"), []);
    mw.push("t", stmt("B"), []);
    const err = errorOf(() => mw.push("t", stmt("C"), []));
    expect(err).toBeInstanceOf(QueueFullError);
    expect(err).toMatchObject({ code: "E_QUEUE_FULL", namespace: "t", maxPending: 2, file: tmp.file("t.db") });
    expect(err.message).toContain(tmp.file("t.db"));
    expect(
      mw
        .outbox("t")
        .fetchUnsynced(10)
        .map((r) => r.tag),
    ).toEqual([stmt("A"), stmt("B")]);
  });

  test("an unwritable db_dir (its parent is a regular file)", () => {
    writeFileSync(tmp.file("plain-file"), "x");
    const dir = tmp.file("plain-file/outbox");
    const mw = new SQLMiddleware({ dbDir: dir });
    const err = errorOf(() => mw.push("t", stmt("X"), []));
    expect(err).toBeInstanceOf(StorageError);
    expect(err).toMatchObject({ code: "E_STORAGE", file: dir });
    expect(err.message).toContain(dir);
  });

  test("a file of garbage bytes", () => {
    const garbage = Buffer.alloc(4096, 0xab);
    writeFileSync(tmp.file("t.db"), garbage);
    const before = hashTree(tmp.path);
    const mw = new SQLMiddleware({ dbDir: tmp.path });
    const err = errorOf(() => mw.push("t", stmt("X"), []));
    expect(err).toBeInstanceOf(StorageError);
    expect(err).toMatchObject({ code: "E_STORAGE", file: tmp.file("t.db"), namespace: "t" });
    expect(err.message).toContain(tmp.file("t.db"));
    expect(err.message).toContain('namespace "t"');
    expect(hashTree(tmp.path)).toEqual(before);
  });

  test("a closed outbox", () => {
    const mw = new SQLMiddleware({ dbDir: tmp.path });
    const ob = mw.outbox("t");
    ob.enqueue(stmt("A"), "[]");
    ob.close();
    const err = errorOf(() => ob.enqueueBatch([{ tag: stmt("B"), payload: "[]" }]));
    expect(err).toBeInstanceOf(OutboxClosedError);
    expect(err).toMatchObject({ code: "E_CLOSED", file: tmp.file("t.db"), namespace: "t" });
  });

  test("a table name that would escape db_dir (the same rule the config loader and the commands apply)", () => {
    const mw = new SQLMiddleware({ dbDir: tmp.path });
    for (const table of ["../evil", "a/b", "", "..", "-x", ".hidden", "a..b"]) {
      const err = errorOf(() => mw.push(table, stmt("X"), []));
      expect(err).toBeInstanceOf(InvalidArgumentError);
      expect(err.message).toStartWith(
        `invalid table name ${JSON.stringify(table)}: use letters, digits, _ $ . - (not starting with . or -)`,
      );
      expect(errorOf(() => mw.pushMany(table, [[stmt("X")]]))).toBeInstanceOf(InvalidArgumentError);
    }
    expect(Object.keys(hashTree(tmp.path))).toEqual([]);
  });

  test("a producer asking for a different durability than the already shared outbox has", () => {
    new SQLMiddleware({ dbDir: tmp.path }).push("t", stmt("A"), []);
    const err = errorOf(() => new SQLMiddleware({ dbDir: tmp.path, durability: "full" }).push("t", stmt("B"), []));
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err.message).toContain('durability="normal"');
    expect(err).toMatchObject({ details: { namespace: "t", file: tmp.file("t.db") } });
  });

  test("a producer with a different maxPending for an already shared outbox", () => {
    new SQLMiddleware({ dbDir: tmp.path, maxPending: 5 }).push("t", stmt("A"), []);
    const err = errorOf(() => new SQLMiddleware({ dbDir: tmp.path }).push("t", stmt("B"), []));
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err.message).toContain("maxPending=5");
  });
});

describe("statements are checked at push, before anything is written", () => {
  function statementError(fn: () => unknown): InvalidStatementError {
    const err = errorOf(fn);
    expect(err).toBeInstanceOf(InvalidStatementError);
    expect(err.code).toBe("E_INVALID_STATEMENT");
    return err as unknown as InvalidStatementError;
  }

  test.each([
    ["empty text", "", [], "empty statement"],
    ["whitespace", "  \n ", [], "empty statement"],
    ["a comment", "-- just a note", [], "empty statement (only comments)"],
    ["two semicolons", "DELETE FROM orders;;", [], "empty statement before ';' at offset 19"],
    [
      "two statements",
      "DELETE FROM orders; DROP TABLE orders",
      [],
      "more than one statement: ';' at offset 18 is followed by more SQL",
    ],
    ["not a statement", "hello world", [], "'hello' at offset 0 does not start a statement"],
    ["a transaction statement", "COMMIT", [], "COMMIT steers the connection or its transaction"],
    [
      "too few arguments",
      "INSERT INTO orders (id, amount) VALUES (?, ?)",
      [1],
      "statement takes 2 bind arguments but 1 were given",
    ],
    [
      "an argument for a ? inside a literal",
      "INSERT INTO orders (note) VALUES ('?')",
      [1],
      "statement takes 0 bind arguments (1 more '?' inside string literals",
    ],
    [
      "a named placeholder",
      "INSERT INTO orders (id) VALUES (:id)",
      [1],
      "named or numbered-dollar placeholder :id at offset 32 is not supported",
    ],
    [
      "a string one dialect ends early",
      "INSERT INTO orders (note) VALUES ('x\\'; DROP TABLE victim; --')",
      [],
      "more than one statement",
    ],
  ] as const)("%s", (_name, sql, args, reason) => {
    const mw = new SQLMiddleware({ dbDir: tmp.path });
    mw.push("orders", stmt("kept"), []);
    closeSharedOutboxes();
    const before = hashTree(tmp.path);
    const err = statementError(() => mw.push("orders", sql, [...args]));
    expect(err.table).toBe("orders");
    expect(err.reason).toContain(reason);
    expect(err.message).toStartWith(`invalid statement for table "orders": ${err.reason}`);
    // The same text is refused again from the cache, naming the table it is pushed for.
    expect(statementError(() => mw.pushMany("payments", [[stmt("ok")], [sql, [...args]]])).table).toBe("payments");
    closeSharedOutboxes();
    expect(hashTree(tmp.path)).toEqual(before);
  });

  test("pushMany checks a repeated text once, yet refuses a repeat with another argument count or a bad argument, naming the statement, with nothing written", () => {
    const mw = new SQLMiddleware({ dbDir: tmp.path });
    const sql = "INSERT INTO t (a, b) VALUES (?, ?)";
    const other = "DELETE FROM t";
    for (const [stmts, at] of [
      [
        [
          [sql, [1, 2]],
          [sql, [3, 4]],
          [sql, [5]],
        ],
        2,
      ],
      [[[sql, [1, 2]], [other], [sql, [1, 2, 3]]], 2],
      [[[sql, []]], 0],
    ] as const) {
      const err = statementError(() => mw.pushMany("t", stmts));
      expect(err).toMatchObject({ table: "t", statement: at });
      expect(err.reason).toContain("statement takes 2 bind arguments but");
      expect(err.message).toStartWith(
        `invalid statement for table "t" (statement ${at} of the pushMany): ${err.reason}`,
      );
    }
    const badArg = errorOf<InvalidArgumentError>(() =>
      mw.pushMany("t", [
        [sql, [1, 2]],
        [sql, [3, new Date()]],
      ]),
    );
    expect(badArg).toBeInstanceOf(InvalidArgumentError);
    expect(badArg.details).toMatchObject({ namespace: "t", statement: 1, index: 1 });
    expect(badArg.message).toStartWith("statement 1: argument 1 is a Date");
    const small = new SQLMiddleware({ dbDir: tmp.path, maxPayloadBytes: 60 });
    const tooLarge = errorOf<InvalidArgumentError>(() =>
      small.pushMany("t", [
        [sql, [1, 2]],
        [sql, [1, "x".repeat(30)]],
      ]),
    );
    expect(tooLarge.details).toMatchObject({ statement: 1 });
    expect(tooLarge.message).toStartWith('statement 1: statement for table "t" is');
    expect(
      mw.pushMany("t", [
        [sql, [1, 2]],
        [sql, [3, 4]],
      ]),
    ).toEqual([1, 2]); // nothing before these
  });

  test("a bad statement creates no file for a table pushed for the first time", () => {
    const mw = new SQLMiddleware({ dbDir: tmp.file("data") });
    statementError(() => mw.push("fresh", "hello world", []));
    expect(existsSync(tmp.file("data"))).toBe(false);
  });

  test("accepts trailing semicolons and comments, DDL, and SET without a placeholder", () => {
    const mw = new SQLMiddleware({ dbDir: tmp.path });
    mw.push("t", "UPDATE t SET status = 'shipped' WHERE id = ?; -- done", [1]);
    mw.push("t", "CREATE TABLE IF NOT EXISTS audit (id INTEGER)", []);
    mw.pushMany("t", [["INSERT INTO t (a, b) VALUES (?2, ?1)", [1, 2]], ["DELETE FROM t"]]);
    expect(mw.outbox("t").pendingCount()).toBe(4);
  });

  test("dialect: a producer that knows its target reads statements with that dialect's lexer only", () => {
    const sql = "INSERT INTO orders (note) VALUES ('x\\'; DROP TABLE victim; --')";
    expect(new SQLMiddleware({ dbDir: tmp.path, dialect: "mysql" }).push("orders", sql, [])).toBe(1);
    expect(
      statementError(() => new SQLMiddleware({ dbDir: tmp.path, dialect: "postgres" }).push("orders", sql, [])).reason,
    ).toStartWith("more than one statement");
    const userVariable = "UPDATE orders SET total = @rate * ? WHERE id = 1";
    expect(new SQLMiddleware({ dbDir: tmp.path, dialect: "mysql" }).push("orders", userVariable, [2])).toBe(2);
    expect(
      statementError(() => new SQLMiddleware({ dbDir: tmp.path }).push("orders", userVariable, [2])).reason,
    ).toContain("@rate");
    expect(errorOf(() => new SQLMiddleware({ dbDir: tmp.path, dialect: "oracle" as never }))).toBeInstanceOf(
      InvalidArgumentError,
    );
  });

  test("injectOutboxSeq: the statements of the named tables must be ones the rewriter accepts", () => {
    const mw = new SQLMiddleware({ dbDir: tmp.path, injectOutboxSeq: ["orders"] });
    const err = statementError(() => mw.push("orders", "DELETE FROM orders WHERE id = ?", [1]));
    expect(err.reason).toBe(
      "inject_outbox_seq cannot rewrite it for sqlite: only INSERT and UPDATE can be rewritten, got 'DELETE' at offset 0",
    );
    expect(mw.push("payments", "DELETE FROM payments WHERE id = ?", [1])).toBe(1);
    mw.push("orders", "UPDATE orders SET status = 'paid' WHERE id = ?", [1]);
    // Without a dialect every dialect's rewrite must accept it; with one, that dialect's.
    const aggregate = "INSERT INTO orders (id, total) VALUES (?, max(?))";
    expect(statementError(() => mw.push("orders", aggregate, [1, 2])).reason).toContain(
      "cannot rewrite it for mysql: the aggregate function max()",
    );
    expect(
      new SQLMiddleware({ dbDir: tmp.path, injectOutboxSeq: true, dialect: "postgres" }).push(
        "orders",
        aggregate,
        [1, 2],
      ),
    ).toBeGreaterThan(0);
    expect(
      statementError(() =>
        new SQLMiddleware({ dbDir: tmp.path, injectOutboxSeq: true }).push("payments", "DELETE FROM payments", []),
      ).table,
    ).toBe("payments");
    expect(errorOf(() => new SQLMiddleware({ dbDir: tmp.path, injectOutboxSeq: "orders" as never }))).toBeInstanceOf(
      InvalidArgumentError,
    );
  });

  test("maxPayloadBytes: SQL text plus encoded arguments, in UTF-8 bytes, 1 MiB by default", () => {
    const mw = new SQLMiddleware({ dbDir: tmp.path });
    expect(mw.maxPayloadBytes).toBe(1_048_576);
    const sql = "INSERT INTO t (a) VALUES (?)";
    mw.push("t", sql, ["x".repeat(1_000_000)]);
    const big = errorOf(() => mw.push("t", sql, ["x".repeat(1_048_576)]));
    expect(big).toBeInstanceOf(InvalidArgumentError);
    expect(big.message).toBe(
      `statement for table "t" is ${sql.length + 1_048_576 + 4} bytes of SQL text and encoded arguments, over maxPayloadBytes=1048576 (in ${tmp.file("t.db")})`,
    );
    expect(big.details).toMatchObject({ namespace: "t", file: tmp.file("t.db") });
    expect(mw.outbox("t").pendingCount()).toBe(1);
  });

  test("maxPayloadBytes counts UTF-8 bytes, not characters, and allows exactly the limit", () => {
    const sql = "INSERT INTO t (a) VALUES (?)"; // 28 bytes; the payload ["…"] adds 4
    const limit = 28 + 4 + 300;
    const mw = new SQLMiddleware({ dbDir: tmp.path, maxPayloadBytes: limit });
    mw.push("t", sql, ["a".repeat(300)]);
    mw.push("t", sql, ["€".repeat(100)]); // 300 bytes in 100 characters
    expect(errorOf(() => mw.push("t", sql, ["€".repeat(101)]))).toBeInstanceOf(InvalidArgumentError);
    expect(errorOf(() => mw.push("t", sql, ["a".repeat(301)])).message).toContain(`is ${limit + 1} bytes`);
    // A text longer than the limit is refused before it is read.
    expect(errorOf(() => mw.push("t", `${sql} -- ${"x".repeat(limit)}`, ["a"])).message).toContain(
      `over maxPayloadBytes=${limit}`,
    );
    expect(
      errorOf(() =>
        mw.pushMany("t", [
          [sql, ["a"]],
          [sql, ["€".repeat(101)]],
        ]),
      ),
    ).toBeInstanceOf(InvalidArgumentError);
    expect(mw.outbox("t").pendingCount()).toBe(2);
    for (const bad of [0, -1, 1.5, Number.NaN])
      expect(errorOf(() => new SQLMiddleware({ dbDir: tmp.path, maxPayloadBytes: bad }))).toBeInstanceOf(
        InvalidArgumentError,
      );
  });

  test("a non-string SQL text is an InvalidStatementError, not a crash", () => {
    const mw = new SQLMiddleware({ dbDir: tmp.path });
    expect(statementError(() => mw.push("t", 42 as never, [])).reason).toBe("SQL text must be a string, got number");
    expect(statementError(() => mw.pushMany("t", [[null as never]])).reason).toBe(
      "SQL text must be a string, got null",
    );
  });
});
