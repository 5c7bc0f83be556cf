// What a producer commits together is one group: a pushMany, everything pushed inside
// transaction(fn) — in one file per table, across the tables of one db_file, and inside the
// application's own bun:sqlite database together with its own writes.
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { existsSync, readdirSync } from "node:fs";
import {
  CrossTableTransactionError,
  ForeignTransactionError,
  InvalidArgumentError,
  SQLMiddleware,
  StorageError,
} from "../src/index.ts";
import { verifyFile } from "../src/outbox/inspect.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { errorOf } from "./support/errors.ts";

const cleanups = cleanupsAfterEach();

/** The rows of a queue file: seq, namespace, group and the SQL text, in seq order. */
function rowsOf(file: string): Array<{ seq: number; namespace: string; grp: number | null; tag: string }> {
  const db = new Database(file, { readonly: true });
  try {
    return db
      .query<{ seq: number; namespace: string; grp: number | null; tag: string }, []>(
        "SELECT seq, namespace, grp, tag FROM outbox_queue ORDER BY seq",
      )
      .all();
  } finally {
    db.close();
  }
}

const insert = (table: string) => `INSERT INTO ${table} (id) VALUES (?)`;

describe("groups in one file per table (dbDir)", () => {
  test("a pushMany is one group named by its first seq; a push alone has none", () => {
    const dir = tempDirCleanedBy(cleanups);
    const mw = new SQLMiddleware({ dbDir: dir.path });
    const alone = mw.push("orders", insert("orders"), [1]);
    const [a, b, c] = mw.pushMany("orders", [
      [insert("orders"), [2]],
      [insert("orders"), [3]],
      [insert("orders"), [4]],
    ]) as [number, number, number];
    expect(rowsOf(dir.file("orders.db")).map((r) => [r.seq, r.grp])).toEqual([
      [alone, null],
      [a, a],
      [b, a],
      [c, a],
    ]);
  });

  test("transaction(fn): every push of one table is one group; a throw inside leaves nothing", () => {
    const dir = tempDirCleanedBy(cleanups);
    const mw = new SQLMiddleware({ dbDir: dir.path });
    const seqs = mw.transaction(() => [
      mw.push("orders", insert("orders"), [1]),
      ...mw.pushMany("orders", [[insert("orders"), [2]]]),
      mw.push("orders", insert("orders"), [3]),
    ]);
    expect(rowsOf(dir.file("orders.db")).map((r) => r.grp)).toEqual([seqs[0]!, seqs[0]!, seqs[0]!]);
    const thrown = errorOf(() =>
      mw.transaction(() => {
        mw.push("orders", insert("orders"), [4]);
        throw new Error("the application changed its mind");
      }),
    );
    expect(thrown.message).toBe("the application changed its mind");
    expect(rowsOf(dir.file("orders.db"))).toHaveLength(3);
    expect(mw.push("orders", insert("orders"), [5])).toBe(seqs[2]! + 1); // the rolled-back seq is not lost to a gap: the chain goes on
    expect(verifyFile(dir.file("orders.db")).ok).toBe(true);
  });

  test("a transaction that touches a second table throws CrossTableTransactionError naming both tables and the fix; nothing commits", () => {
    const dir = tempDirCleanedBy(cleanups);
    const mw = new SQLMiddleware({ dbDir: dir.path });
    mw.push("order_items", insert("order_items"), [0]); // the file exists: the refusal is not about a missing file
    const err = errorOf(() =>
      mw.transaction(() => {
        mw.push("orders", insert("orders"), [1]);
        mw.push("order_items", insert("order_items"), [1]);
      }),
    );
    expect(err).toBeInstanceOf(CrossTableTransactionError);
    expect(err).toMatchObject({
      code: "E_TRANSACTION",
      tables: ["orders", "order_items"],
      files: [dir.file("orders.db"), dir.file("order_items.db")],
    });
    expect(err.message).toContain("db_file");
    expect(rowsOf(dir.file("orders.db"))).toEqual([]);
    expect(rowsOf(dir.file("order_items.db"))).toHaveLength(1);
  });

  test("a push refused for crossing tables leaves no file behind: the db_dir holds only the files of the tables written", () => {
    const dir = tempDirCleanedBy(cleanups);
    const mw = new SQLMiddleware({ dbDir: dir.path });
    mw.push("orders", insert("orders"), [0]);
    // Another producer whose db_dir does not exist yet: refusing its push must not create it either.
    const elsewhere = new SQLMiddleware({ dbDir: dir.file("elsewhere") });
    for (const [producer, table] of [
      [mw, "other"],
      [elsewhere, "audit"],
    ] as const) {
      const err = errorOf(() =>
        mw.transaction(() => {
          mw.push("orders", insert("orders"), [1]);
          producer.push(table, insert(table), [1]);
        }),
      );
      expect(err).toBeInstanceOf(CrossTableTransactionError);
      expect(err).toMatchObject({ tables: ["orders", table] });
      expect(
        errorOf(() =>
          mw.transaction(() => [
            mw.push("orders", insert("orders"), [1]),
            producer.pushMany(table, [[insert(table), [1]]]),
          ]),
        ),
      ).toBeInstanceOf(CrossTableTransactionError);
    }
    expect(readdirSync(dir.path).filter((f) => !f.startsWith("orders.db"))).toEqual([]);
    expect(rowsOf(dir.file("orders.db"))).toHaveLength(1);
    // The table is still there to be written outside a transaction, and then its file exists.
    mw.push("other", insert("other"), [2]);
    expect(rowsOf(dir.file("other.db"))).toHaveLength(1);
  });

  test("pushes of another producer inside the transaction join it; a nested transaction joins it too", () => {
    const dir = tempDirCleanedBy(cleanups);
    const one = new SQLMiddleware({ dbDir: dir.path });
    const other = new SQLMiddleware({ dbDir: dir.path, source: "other" });
    const first = one.transaction(() => {
      const s = one.push("orders", insert("orders"), [1]);
      other.push("orders", insert("orders"), [2]);
      other.transaction(() => one.push("orders", insert("orders"), [3]));
      return s;
    });
    expect(rowsOf(dir.file("orders.db")).map((r) => r.grp)).toEqual([first, first, first]);
  });

  test("an async function is refused and rolled back: an await would let other code into the transaction", () => {
    const dir = tempDirCleanedBy(cleanups);
    const mw = new SQLMiddleware({ dbDir: dir.path });
    const err = errorOf(() =>
      mw.transaction(async () => {
        mw.push("orders", insert("orders"), [1]);
      }),
    );
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err.message).toContain("synchronous");
    expect(rowsOf(dir.file("orders.db"))).toEqual([]);
  });

  test("a transaction larger than maxGroupStatements is refused whole, saying how to fix it", () => {
    const dir = tempDirCleanedBy(cleanups);
    const mw = new SQLMiddleware({ dbDir: dir.path, maxGroupStatements: 3 });
    const err = errorOf(() =>
      mw.transaction(() => {
        for (let i = 0; i < 4; i++) mw.push("orders", insert("orders"), [i]);
      }),
    );
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err.message).toContain("4 statements, over the limit of 3");
    expect(err.message).toContain("split it into smaller transactions");
    expect(rowsOf(dir.file("orders.db"))).toEqual([]);
    expect(
      errorOf(() =>
        mw.pushMany("orders", [
          [insert("orders"), [1]],
          [insert("orders"), [2]],
          [insert("orders"), [3]],
          [insert("orders"), [4]],
        ]),
      ),
    ).toBeInstanceOf(InvalidArgumentError);
    expect(
      mw.pushMany("orders", [
        [insert("orders"), [1]],
        [insert("orders"), [2]],
        [insert("orders"), [3]],
      ]),
    ).toHaveLength(3);
  });
});

describe("one file for several tables (dbFile)", () => {
  test("every table is a namespace of the one file; a transaction across tables is one group, recorded with its tables", () => {
    const dir = tempDirCleanedBy(cleanups);
    const file = dir.file("shop/outbox.db");
    const mw = new SQLMiddleware({ dbFile: file });
    mw.push("orders", insert("orders"), [1]);
    const first = mw.transaction(() => {
      const s = mw.push("orders", insert("orders"), [2]);
      mw.pushMany("order_items", [
        [insert("order_items"), [20]],
        [insert("order_items"), [21]],
      ]);
      mw.push("orders", "UPDATE orders SET id = id WHERE id = ?", [2]);
      return s;
    });
    expect(rowsOf(file).map((r) => [r.namespace, r.grp])).toEqual([
      ["orders", null],
      ["orders", first],
      ["order_items", first],
      ["order_items", first],
      ["orders", first],
    ]);
    const db = new Database(file, { readonly: true });
    expect(db.query("SELECT grp, last_seq AS last, namespaces FROM outbox_group").all()).toEqual([
      { grp: first, last: first + 3, namespaces: '["order_items","orders"]' },
    ]);
    db.close();
    expect(verifyFile(file).ok).toBe(true);
    expect(existsSync(dir.file("shop/orders.db"))).toBe(false);
  });

  test("a throw inside a transaction across tables leaves nothing of it in any table", () => {
    const dir = tempDirCleanedBy(cleanups);
    const file = dir.file("outbox.db");
    const mw = new SQLMiddleware({ dbFile: file });
    expect(() =>
      mw.transaction(() => {
        mw.push("orders", insert("orders"), [1]);
        mw.push("order_items", insert("order_items"), [1]);
        throw new Error("no");
      }),
    ).toThrow("no");
    expect(rowsOf(file)).toEqual([]);
  });

  test("a push into a different file inside the transaction is refused", () => {
    const dir = tempDirCleanedBy(cleanups);
    const shop = new SQLMiddleware({ dbFile: dir.file("shop.db") });
    const other = new SQLMiddleware({ dbFile: dir.file("other.db") });
    const err = errorOf(() =>
      shop.transaction(() => {
        shop.push("orders", insert("orders"), [1]);
        other.push("audit", insert("audit"), [1]);
      }),
    );
    expect(err).toBeInstanceOf(CrossTableTransactionError);
    expect(rowsOf(dir.file("shop.db"))).toEqual([]);
    expect(existsSync(dir.file("other.db"))).toBe(false); // the refused push created no file
  });
});

describe("inside the application's own database", () => {
  function appDatabase(dir: { file(name: string): string }, mode = "WAL"): Database {
    const db = new Database(dir.file("app.db"));
    db.run(`PRAGMA journal_mode = ${mode}`);
    db.run("PRAGMA busy_timeout = 5000");
    db.run("PRAGMA user_version = 7");
    db.run("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL CHECK (balance >= 0))");
    cleanups.push(() => db.close());
    return db;
  }

  test("the application's rows and the events commit together, as one group; its pragmas and tables stay its own", () => {
    const dir = tempDirCleanedBy(cleanups);
    const app = appDatabase(dir);
    const mw = new SQLMiddleware({ database: app });
    const seq = mw.transaction(() => {
      app.run("INSERT INTO accounts (id, balance) VALUES (1, 100)");
      return mw.push("accounts", "INSERT INTO accounts (id, balance) VALUES (?, ?)", [1, 100]);
    });
    expect(app.query("SELECT balance FROM accounts").all()).toEqual([{ balance: 100 }]);
    expect(rowsOf(dir.file("app.db")).map((r) => [r.seq, r.grp])).toEqual([[seq, seq]]);
    expect(app.query("PRAGMA user_version").get()).toEqual({ user_version: 7 });
    expect(app.query("PRAGMA application_id").get()).toEqual({ application_id: 0 });
    const tables = app
      .query<{ name: string }, []>(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
      )
      .all()
      .map((t) => t.name);
    expect(tables.filter((t) => !t.startsWith("outbox_"))).toEqual(["accounts"]);
    expect(verifyFile(dir.file("app.db")).ok).toBe(true);
  });

  test("a throw inside the transaction leaves neither the application's rows nor the events", () => {
    const dir = tempDirCleanedBy(cleanups);
    const app = appDatabase(dir);
    const mw = new SQLMiddleware({ database: app });
    expect(() =>
      mw.transaction(() => {
        app.run("INSERT INTO accounts (id, balance) VALUES (1, 100)");
        mw.push("accounts", "INSERT INTO accounts (id, balance) VALUES (?, ?)", [1, 100]);
        app.run("UPDATE accounts SET balance = -1 WHERE id = 1"); // the CHECK fails: the application's own error
      }),
    ).toThrow(/CHECK constraint failed/);
    expect(app.query("SELECT count(*) AS n FROM accounts").get()).toEqual({ n: 0 });
    expect(rowsOf(dir.file("app.db"))).toEqual([]);
  });

  test("the transaction takes the write lock up front (BEGIN IMMEDIATE): another writer waits from its first statement on", () => {
    const dir = tempDirCleanedBy(cleanups);
    const app = appDatabase(dir);
    const mw = new SQLMiddleware({ database: app });
    const other = new Database(dir.file("app.db"));
    other.run("PRAGMA busy_timeout = 0");
    cleanups.push(() => other.close());
    mw.transaction(() => {
      app.query("SELECT count(*) FROM accounts").get(); // a read first: a deferred transaction would hold no write lock yet
      expect(() => other.run("INSERT INTO accounts (id, balance) VALUES (9, 9)")).toThrow(/locked|busy/i);
      app.run("INSERT INTO accounts (id, balance) VALUES (1, 1)");
    });
    expect(app.query("SELECT id FROM accounts").all()).toEqual([{ id: 1 }]);
  });

  test("a push inside a transaction the outbox did not open is refused, naming outbox.transaction; nothing of it is written", () => {
    const dir = tempDirCleanedBy(cleanups);
    const app = appDatabase(dir);
    const mw = new SQLMiddleware({ database: app });
    const early = errorOf(() => app.transaction(() => mw.push("accounts", insert("accounts"), [1]))()); // before our tables exist
    expect(early).toBeInstanceOf(ForeignTransactionError);
    mw.outbox("accounts"); // our tables exist now: the push itself is refused
    const err = errorOf(() =>
      app.transaction(() => {
        app.run("INSERT INTO accounts (id, balance) VALUES (1, 100)");
        mw.push("accounts", "INSERT INTO accounts (id, balance) VALUES (?, ?)", [1, 100]);
      })(),
    );
    expect(err).toBeInstanceOf(ForeignTransactionError);
    expect(err.message).toContain("outbox.transaction");
    expect(app.query("SELECT count(*) AS n FROM accounts").get()).toEqual({ n: 0 });
    expect(rowsOf(dir.file("app.db"))).toEqual([]);
    expect(
      errorOf(() =>
        app.transaction(() =>
          mw.pushMany("accounts", [["INSERT INTO accounts (id, balance) VALUES (?, ?)", [2, 2]]]),
        )(),
      ),
    ).toBeInstanceOf(ForeignTransactionError);
  });

  test("a database not in WAL mode is refused with a clear error and left as it was; so is one in memory", () => {
    const dir = tempDirCleanedBy(cleanups);
    const app = appDatabase(dir, "DELETE");
    const err = errorOf(() => new SQLMiddleware({ database: app }).push("accounts", insert("accounts"), [1]));
    expect(err).toBeInstanceOf(StorageError);
    expect(err.message).toContain("journal_mode=delete, not WAL");
    expect(app.query("PRAGMA journal_mode").get()).toEqual({ journal_mode: "delete" });
    expect(
      app.query<{ n: number }, []>("SELECT count(*) AS n FROM sqlite_schema WHERE name LIKE 'outbox_%'").get()!.n,
    ).toBe(0);
    const memory = new Database(":memory:");
    cleanups.push(() => memory.close());
    expect(
      errorOf(() => new SQLMiddleware({ database: memory }).push("accounts", insert("accounts"), [1])),
    ).toBeInstanceOf(InvalidArgumentError);
  });

  test("without the opt-in the application's database is never touched: dbFile pointed at it is refused", () => {
    const dir = tempDirCleanedBy(cleanups);
    appDatabase(dir);
    const err = errorOf(() =>
      new SQLMiddleware({ dbFile: dir.file("app.db") }).push("accounts", insert("accounts"), [1]),
    );
    expect(err).toBeInstanceOf(StorageError);
    expect(err.message).toContain("holds other tables (accounts)");
  });

  test("exactly one of dbDir, dbFile and database", () => {
    const dir = tempDirCleanedBy(cleanups);
    expect(errorOf(() => new SQLMiddleware({} as never)).message).toContain("needs where its queues are");
    expect(errorOf(() => new SQLMiddleware({ dbDir: dir.path, dbFile: dir.file("a.db") })).message).toContain(
      "exactly one of dbDir, dbFile and database, got dbDir and dbFile",
    );
  });
});
