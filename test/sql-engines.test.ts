import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { UnsupportedStatementError } from "../src/errors.ts";
import { quoteIdent } from "../src/sql/ident.ts";
import { tokenize } from "../src/sql/lexer.ts";
import { injectOutboxSeq, toDialect } from "../src/sql/rewrite.ts";
import { dropSchemaSql, maxSeqSql, schemaSql } from "../src/sql/schema.ts";
import type { BindValue, Dialect } from "../src/vocabulary.ts";
import { createMysqlDb, createPgDb } from "./support/server-db.ts";
import { SLOW } from "./support/slow.ts";
import { rng, StatementGenerator } from "./support/sql-gen.ts";
import { makeTempDir } from "./support/tmp.ts";

/** A fresh database on one real engine, with just what these tests need. */
interface Engine {
  dialect: Dialect;
  /** Runs one statement; resolves to the affected row count. */
  run(sql: string, args?: readonly BindValue[]): Promise<number>;
  rows(sql: string): Promise<unknown[][]>;
  /** The engine's own error code: SQLite's `SQLITE_CONSTRAINT_*`, PostgreSQL's SQLSTATE, MySQL's errno. */
  codeOf(error: unknown): string;
  drop(): Promise<void>;
}

type EngineName = "sqlite" | "postgres" | "mysql";

async function openEngine(name: EngineName): Promise<Engine> {
  if (name === "sqlite") {
    const tmp = makeTempDir();
    const db = new Database(tmp.file("remote.db"));
    db.run("PRAGMA journal_mode = WAL");
    return {
      dialect: "sqlite",
      async run(sql, args = []) {
        const stmt = db.prepare(sql);
        try {
          return stmt.run(...(args as BindValue[])).changes;
        } finally {
          stmt.finalize();
        }
      },
      async rows(sql) {
        return db.prepare(sql).values() as unknown[][];
      },
      codeOf: (e) => String((e as { code?: unknown }).code),
      async drop() {
        db.close();
        tmp.cleanup();
      },
    };
  }
  const t = name === "postgres" ? await createPgDb() : await createMysqlDb();
  return {
    dialect: name,
    async run(sql, args = []) {
      const result = await t.sql.unsafe(sql, args as BindValue[]);
      // Without arguments Bun's MySQL client sends text with multi-statements on: a trailing
      // `; /* comment */` comes back as two results, each with its own count.
      if (result.count === undefined && Array.isArray(result[0]))
        return (result as unknown as Array<{ count?: number }>).reduce((n, r) => n + (r.count ?? 0), 0);
      return result.count;
    },
    async rows(sql) {
      const rows = (await t.sql.unsafe(sql).values()) as unknown[][];
      // PostgreSQL's BIGINT arrives as a string; compare outbox_seq as the number it is.
      return rows.map((r) => r.map((v) => (typeof v === "string" && /^-?\d+$/.test(v) ? Number(v) : v)));
    },
    codeOf: (e) => String((e as { errno?: unknown }).errno),
    drop: () => t.drop(),
  };
}

const ENGINES: EngineName[] = ["sqlite", "postgres", "mysql"];

// Per engine: the codes a NOT NULL, CHECK and primary-key violation must still raise.
const CODES: Record<EngineName, { notNull: string; check: string; pk: string }> = {
  sqlite: {
    notNull: "SQLITE_CONSTRAINT_NOTNULL",
    check: "SQLITE_CONSTRAINT_CHECK",
    pk: "SQLITE_CONSTRAINT_PRIMARYKEY",
  },
  postgres: { notNull: "23502", check: "23514", pk: "23505" },
  mysql: { notNull: "1048", check: "4025", pk: "1062" },
};

async function withEngine(name: EngineName, fn: (e: Engine) => Promise<void>): Promise<void> {
  const engine = await openEngine(name);
  try {
    await fn(engine);
  } finally {
    await engine.drop();
  }
}

async function createOrders(e: Engine, table = "orders"): Promise<string> {
  const t = quoteIdent(table, e.dialect);
  const note = e.dialect === "mysql" ? "VARCHAR(50)" : "TEXT";
  await e.run(`CREATE TABLE ${t} (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL CHECK (amount >= 0), note ${note})`);
  for (const ddl of schemaSql([table], e.dialect)) await e.run(ddl);
  return t;
}

async function codeOfFailure(e: Engine, sql: string, args: BindValue[]): Promise<string> {
  try {
    await e.run(sql, args);
  } catch (error) {
    return e.codeOf(error);
  }
  return "no error";
}

const INSERT = "INSERT INTO orders (id, amount, note) VALUES (?, ?, ?)";
const UPDATE = "UPDATE orders SET amount = ?, note = ? WHERE id = ?";

describe.each(ENGINES)("%s", (name) => {
  test("the generated DDL applies cleanly, and a second time without error where the dialect allows", async () => {
    await withEngine(name, async (e) => {
      const table = 'odd "name`s" t';
      const t = await createOrders(e, table);
      const again: string[] = [];
      for (const ddl of schemaSql([table], e.dialect))
        again.push(
          await e.run(ddl).then(
            () => "ok",
            (err) => e.codeOf(err),
          ),
        );
      // SQLite has no ADD COLUMN IF NOT EXISTS; MySQL neither (nor CREATE INDEX IF NOT EXISTS):
      // the drain tolerates exactly these "already exists" codes.
      const expected = { sqlite: ["SQLITE_ERROR", "ok"], postgres: ["ok", "ok"], mysql: ["1060", "1061"] }[name];
      expect(again).toEqual(expected);
      // Rows written around the outbox (default outbox_seq 0 / NULL) never collide with each other.
      await e.run(`INSERT INTO ${t} (id, amount) VALUES (1, 1)`);
      await e.run(`INSERT INTO ${t} (id, amount) VALUES (2, 2)`);
      expect(await e.rows(maxSeqSql(table, e.dialect))).toEqual([[name === "mysql" ? null : 0]]);
      for (const ddl of dropSchemaSql([table], e.dialect)) await e.run(ddl);
      expect(await codeOfFailure(e, `SELECT outbox_seq FROM ${t}`, [])).not.toBe("no error");
    });
  });

  test("a rewritten INSERT executed twice lands one row", async () => {
    await withEngine(name, async (e) => {
      await createOrders(e);
      const { sql, args } = injectOutboxSeq(INSERT, [1, 10, "it's ?"], 7, e.dialect);
      expect(await e.run(sql, args)).toBe(1);
      expect(await e.run(sql, args)).toBe(0);
      expect(await e.rows("SELECT id, amount, note, outbox_seq FROM orders")).toEqual([[1, 10, "it's ?", 7]]);
      expect((await e.rows(maxSeqSql("orders", e.dialect)))[0]!.map(Number)).toEqual([7]);
    });
  });

  test("NOT NULL, CHECK and primary-key violations still fail after the rewrite", async () => {
    await withEngine(name, async (e) => {
      await createOrders(e);
      const ok = injectOutboxSeq(INSERT, [1, 10, null], 1, e.dialect);
      await e.run(ok.sql, ok.args);
      const attempt = (args: BindValue[], seq: number) => {
        const r = injectOutboxSeq(INSERT, args, seq, e.dialect);
        return codeOfFailure(e, r.sql, r.args);
      };
      expect(await attempt([2, null, "x"], 2)).toBe(CODES[name].notNull);
      expect(await attempt([2, -1, "x"], 3)).toBe(CODES[name].check);
      expect(await attempt([1, 5, "dup id"], 4)).toBe(CODES[name].pk);
      expect(await e.rows("SELECT id, amount, outbox_seq FROM orders")).toEqual([[1, 10, 1]]);
    });
  });

  test("a guarded UPDATE executed twice or out of order changes the row once, to the newest value", async () => {
    await withEngine(name, async (e) => {
      await createOrders(e);
      const ins = injectOutboxSeq(INSERT, [1, 10, "new"], 5, e.dialect);
      await e.run(ins.sql, ins.args);
      const newer = injectOutboxSeq(UPDATE, [30, "newest", 1], 9, e.dialect);
      const older = injectOutboxSeq(UPDATE, [20, "older", 1], 8, e.dialect);
      expect(await e.run(newer.sql, newer.args)).toBe(1);
      expect(await e.run(newer.sql, newer.args)).toBe(0);
      expect(await e.run(older.sql, older.args)).toBe(0);
      expect(await e.rows("SELECT id, amount, note, outbox_seq FROM orders")).toEqual([[1, 30, "newest", 9]]);
      // The INSERT's redelivery finds no row with its seq any more and hits the primary key: loud, not lost.
      expect(await codeOfFailure(e, ins.sql, ins.args)).toBe(CODES[name].pk);
    });
  });

  test("an injected UPDATE applies to a row written around the outbox", async () => {
    await withEngine(name, async (e) => {
      await createOrders(e);
      await e.run("INSERT INTO orders (id, amount) VALUES (1, 1)");
      const up = injectOutboxSeq(UPDATE, [2, "via outbox", 1], 3, e.dialect);
      expect(await e.run(up.sql, up.args)).toBe(1);
      expect(await e.rows("SELECT amount, note, outbox_seq FROM orders")).toEqual([[2, "via outbox", 3]]);
    });
  });

  test("toDialect's placeholders are accepted by the engine, ?NNN included", async () => {
    await withEngine(name, async (e) => {
      await createOrders(e);
      const { sql, args } = toDialect("INSERT INTO orders (note, id, amount) VALUES ('?2', ?2, ?1)", [5, 1], e.dialect);
      expect(await e.run(sql, args)).toBe(1);
      expect(await e.rows("SELECT id, amount, note FROM orders")).toEqual([[1, 5, "?2"]]);
      // A ? touching a word stays a token of its own ($1WHERE is "trailing junk" to PostgreSQL).
      const touching = toDialect("UPDATE orders SET note = ?WHERE id = ?AND amount = ?", ["n", 1, 5], e.dialect);
      expect(await e.run(touching.sql, touching.args)).toBe(1);
      const injected = injectOutboxSeq("UPDATE orders SET amount = ?WHERE id = ?", [6, 1], 3, e.dialect);
      expect(await e.run(injected.sql, injected.args)).toBe(1);
      expect(await e.rows("SELECT id, amount, note, outbox_seq FROM orders")).toEqual([[1, 6, "n", 3]]);
    });
  });

  test("a runtime error the original UPDATE's WHERE raises still surfaces after the rewrite, even where an outbox_seq index could skip its row", async () => {
    await withEngine(name, async (e) => {
      const text = e.dialect === "mysql" ? "VARCHAR(20)" : "TEXT";
      await e.run(`CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER, b ${text})`);
      for (const ddl of schemaSql(["t"], e.dialect)) await e.run(ddl);
      await e.run("CREATE INDEX plain_outbox_seq ON t (outbox_seq)"); // an index an operator might add
      // Most rows already carry a newer seq; the two written around the outbox hold text that
      // the WHERE cannot convert.
      const blank = e.dialect === "mysql" ? "NULL" : "0";
      for (let i = 1; i <= 200; i++)
        await e.run(
          `INSERT INTO t (id, a, b, outbox_seq) VALUES (${i}, ${i}, '${i <= 2 ? `b${i}` : "7"}', ${i <= 2 ? blank : 1000 + i})`,
        );
      await e.run(e.dialect === "mysql" ? "ANALYZE TABLE t" : "ANALYZE");
      const where = { sqlite: "json_extract(b, '$.x') = ?", postgres: "b::int = ?", mysql: "b = ?" }[name];
      const sql = `UPDATE t SET a = ? WHERE ${where}`;
      const plain = toDialect(sql, [1, 5], e.dialect);
      const original = await codeOfFailure(e, plain.sql, plain.args);
      expect(original).toBe({ sqlite: "SQLITE_ERROR", postgres: "22P02", mysql: "1292" }[name]);
      const rewritten = injectOutboxSeq(sql, [1, 5], 100, e.dialect);
      expect(await codeOfFailure(e, rewritten.sql, rewritten.args)).toBe(original);
      if (name === "mysql") {
        // The guard it replaces read the rows through the index and did not raise 1292.
        const old = rewritten.sql.replace("COALESCE(outbox_seq, 0) < ?", "(outbox_seq IS NULL OR outbox_seq < ?)");
        expect(await codeOfFailure(e, old, rewritten.args)).toBe("no error");
      }
    });
  });

  test("aggregate and window functions in VALUES fail after the rewrite as before it (mysql refuses them: its INSERT … SELECT would store the row)", async () => {
    await withEngine(name, async (e) => {
      await createOrders(e);
      const cases: Array<[string, BindValue[]]> = [
        ["INSERT INTO orders (id, amount) VALUES (?, max(?))", [1, 5]],
        ["INSERT INTO orders (id, amount) VALUES (?, count(*))", [1]],
        ["INSERT INTO orders (id, amount) VALUES (?, row_number() OVER ())", [1]],
      ];
      for (const [sql, args] of cases) {
        const plain = toDialect(sql, args, e.dialect);
        const original = await codeOfFailure(e, plain.sql, plain.args);
        expect(original).not.toBe("no error");
        if (name !== "mysql") {
          const rewritten = injectOutboxSeq(sql, args, 9, e.dialect);
          expect(await codeOfFailure(e, rewritten.sql, rewritten.args)).toBe(original);
          continue;
        }
        expect(() => injectOutboxSeq(sql, args, 9, e.dialect)).toThrow("is not supported on mysql");
        const values = sql.slice(sql.indexOf("(?, ") + 1, -1);
        const selectForm = `INSERT INTO orders (id, amount, outbox_seq) SELECT ${values}, ? FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM orders WHERE outbox_seq = ?)`;
        expect(await codeOfFailure(e, selectForm, [...args, 9, 9])).toBe("no error");
        await e.run("DELETE FROM orders");
      }
      expect(await e.rows("SELECT count(*) FROM orders")).toEqual([[0]]);
    });
  });
});

// Dialect-flavoured statements with the literals, comments and placeholders each lexer must get
// right; each runs on the real engine as written (placeholders via toDialect) and rewritten.
const FLAVOURED: Record<EngineName, Array<[string, BindValue[]]>> = {
  sqlite: [
    ["INSERT INTO items ([id], a, \"b\", `c`) VALUES (?, ?, 'it''s ?)', 'x WHERE ?') -- end ?", [10, 1]],
    ["UPDATE items SET c = ? --\r, b = 'dropped by a wrong reading'\n WHERE id = ?", ["x", 2]], // SQLite ends -- at \n only
    ["UPDATE items SET c = 'constant' WHERE id = ?", [2]],
    ["INSERT INTO items (id, a) VALUES (?, ?); -- end\n", [13, 1]],
    [
      "UPDATE items SET b = ? || ' WHERE ?', a = (SELECT max(a) FROM items WHERE id < ?) /* ? */ WHERE id = ?",
      ["z", 3, 2],
    ],
    ["UPDATE items SET a = ?2, b = ?1 WHERE id = ?3", ["w", 7, 1]],
    ["UPDATE items SET c = ? WHERE id = ? OR id = 99;", ["or", 3]],
  ],
  postgres: [
    ["INSERT INTO items (id, a, b, c) VALUES (?, ?, E'it\\'s ?)', $$dollar ? ) WHERE$$)", [10, 1]],
    ["insert into \"items\" (\"id\", b) values (?, 'x' || ? || '?') -- end ?", [11, "y"]],
    [
      "UPDATE items SET b = $q$?$q$ || ?, a = (SELECT max(a) FROM items WHERE id < ?) /* /* ? */ ) */ WHERE id = ?::int",
      ["z", 3, 2],
    ],
    ["UPDATE items SET a = ?2, b = ?1 WHERE id = ?3", ["w", 7, 1]],
    ["UPDATE items SET c = ? WHERE b IS DISTINCT FROM ? AND id = ? OR id = 99;", ["or", "nope", 3]],
    // PostgreSQL ends a -- comment at a bare \r: what follows is SQL, in SET and in WHERE.
    ["UPDATE items SET a = ? --\r, b = 'z'\n WHERE id = ?", [5, 2]],
    ["UPDATE items SET c = ? WHERE id > ? --\r AND id < 3\n", ["w", 1]],
    // An E'…' string continued on the next line keeps its backslash escapes.
    ["INSERT INTO items (id, b) VALUES (?, E'it\\'s'\n' \\'?)')", [12]],
    ["UPDATE items SET c = 'constant' WHERE id = ?", [2]],
  ],
  mysql: [
    ["INSERT INTO items (id, a, b, c) VALUES (?, ?, 'it\\'s ?)', \"dq ? ) WHERE\")", [10, 1]],
    ["insert into `items` (`id`, b) values (?, concat('x', ?, '?')) # end ?", [11, "y"]],
    ["UPDATE items SET b = concat(?, 'WHERE ?'), a = 5--1\n WHERE id = ? -- ?", ["z", 2]],
    ["UPDATE items SET a = ?2, b = ?1 WHERE id = ?3", ["w", 7, 1]],
    ["UPDATE items SET c = ? WHERE id = ? OR id = 99;", ["or", 3]],
    // MariaDB starts a -- comment before DEL too, and ends # and -- comments at \n only.
    ["UPDATE items SET c = ? WHERE id = ? --\x7f OR id = 3\n", ["x", 2]],
    ["UPDATE items SET c = ? # ?\r, b = 'no'\n WHERE id = ?", ["x", 2]],
    ["UPDATE items SET c = 'constant' WHERE id = ?", [2]],
  ],
};

// Where a comment or string ends decides how many columns these SELECTs return: each lexer must
// agree with its engine, or refuse the text. `engine` pins what the engine does (a column count,
// or "error"); `ours` is what our lexer for it reads, "refused" when it will not guess.
const PROBES: Array<{
  sql: string;
  engine: Record<EngineName, number | "error">;
  ours?: Partial<Record<EngineName, number | "refused">>;
}> = [
  { sql: "SELECT 1 AS a --\r, 2 AS b\n, 3 AS c", engine: { sqlite: 2, postgres: 3, mysql: 2 } },
  { sql: "SELECT 1 AS a -- x\r\n, 2 AS b", engine: { sqlite: 2, postgres: 2, mysql: 2 } },
  { sql: "SELECT 1 AS a --\x7f, 2 AS b\n, 3 AS c", engine: { sqlite: 2, postgres: 2, mysql: 2 } },
  { sql: "SELECT 1 AS a #\r, 2 AS b\n, 3 AS c", engine: { sqlite: "error", postgres: "error", mysql: 2 } },
  { sql: "SELECT 1 AS a /*M! , 2 AS b */", engine: { sqlite: 1, postgres: 1, mysql: 2 }, ours: { mysql: "refused" } },
  {
    sql: "SELECT 1 AS a /*M!100000 , 2 AS b */",
    engine: { sqlite: 1, postgres: 1, mysql: 2 },
    ours: { mysql: "refused" },
  },
  { sql: "SELECT 1 AS a /*m! , 2 AS b */", engine: { sqlite: 1, postgres: 1, mysql: 1 } },
  { sql: "SELECT 1 AS a /*! , 2 AS b */", engine: { sqlite: 1, postgres: 1, mysql: 2 }, ours: { mysql: "refused" } },
  { sql: "SELECT E'x'\n'\\', 2 AS b, ' AS a -- '\n", engine: { sqlite: "error", postgres: 1, mysql: "error" } },
  { sql: "SELECT E'x' -- c\n'\\', 2 AS b, ' AS a -- '\n", engine: { sqlite: "error", postgres: 1, mysql: "error" } },
  {
    sql: "SELECT 1 AS a\0, 2 AS b",
    engine: { sqlite: 1, postgres: "error", mysql: "error" },
    ours: { sqlite: "refused", postgres: "refused", mysql: "refused" },
  },
];

/** Columns of a one-row SELECT as our lexer reads it: top-level commas + 1. */
function columnsAsLexed(sql: string, dialect: Dialect): number | "refused" {
  try {
    return tokenize(sql, dialect).filter((t) => t.kind === "," && t.depth === 0).length + 1;
  } catch (error) {
    if (error instanceof UnsupportedStatementError) return "refused";
    throw error;
  }
}

describe.each(ENGINES)("%s lexer", (name) => {
  test("reads comments and strings where the engine does, or refuses the text", async () => {
    await withEngine(name, async (e) => {
      for (const probe of PROBES) {
        let engine: number | "error";
        try {
          engine = (await e.rows(probe.sql))[0]!.length;
        } catch {
          engine = "error";
        }
        expect({ sql: probe.sql, engine }).toEqual({ sql: probe.sql, engine: probe.engine[name] });
        const ours = columnsAsLexed(probe.sql, e.dialect);
        const want = probe.ours?.[name] ?? (engine === "error" ? ours : engine);
        expect({ sql: probe.sql, ours }).toEqual({ sql: probe.sql, ours: want });
      }
    });
  });
});

describe.each(ENGINES)("%s flavoured statements", (name) => {
  test("each rewrite changes exactly what the original changes, plus outbox_seq, and a redelivery nothing", async () => {
    await withEngine(name, async (e) => {
      const text = e.dialect === "mysql" ? "VARCHAR(100)" : "TEXT";
      await e.run(`CREATE TABLE items (id INTEGER PRIMARY KEY, a INTEGER, b ${text}, c ${text})`);
      for (const ddl of schemaSql(["items"], e.dialect)) await e.run(ddl);
      const reset = async () => {
        await e.run("DELETE FROM items");
        for (let i = 1; i <= 3; i++) await e.run(`INSERT INTO items (id, a, b) VALUES (${i}, ${i * 10}, 'b${i}')`);
      };
      const snapshot = () => e.rows("SELECT id, a, b, c, outbox_seq FROM items ORDER BY id");
      let seq = 100;
      for (const [sql, args] of FLAVOURED[name]) {
        await reset();
        const plain = toDialect(sql, args, e.dialect);
        const originalCount = await e.run(plain.sql, plain.args);
        expect(originalCount).toBe(1); // every case writes exactly one row
        const original = await snapshot();
        await reset();
        const rewritten = injectOutboxSeq(sql, args, ++seq, e.dialect);
        expect(await e.run(rewritten.sql, rewritten.args)).toBe(originalCount);
        const after = await snapshot();
        const blank = e.dialect === "mysql" ? null : 0;
        expect(after.map((r) => [...r.slice(0, 4), r[4] === seq ? blank : r[4]])).toEqual(original);
        expect(after.filter((r) => r[4] === seq)).toHaveLength(originalCount);
        expect(await e.run(rewritten.sql, rewritten.args)).toBe(0);
      }
    });
  });
});

// 100 per engine by default, 300 with SQLOUTBOX_SLOW_TESTS=1; SQLOUTBOX_ENGINE_FUZZ_CASES overrides both.
const GENERATED = Number(process.env.SQLOUTBOX_ENGINE_FUZZ_CASES ?? (SLOW ? 300 : 100));

describe.each(["postgres", "mysql"] as const)("%s generated statements", (name) => {
  test(`${GENERATED} random accepted statements change exactly what the original does (same error code when it fails)`, async () => {
    await withEngine(name, async (e) => {
      const types =
        name === "mysql"
          ? { int: "BIGINT", text: "TEXT", real: "DOUBLE", blob: "BLOB" }
          : { int: "BIGINT", text: "TEXT", real: "DOUBLE PRECISION", blob: "BYTEA" };
      for (const t of ["t", "u"]) {
        await e.run(
          `CREATE TABLE ${t} (id INTEGER PRIMARY KEY, a ${types.int}, b ${types.text}, c ${types.real} CHECK (c IS NULL OR c > -1e9), d ${types.blob}, e ${types.text} NOT NULL DEFAULT 'dflt')`,
        );
        for (const ddl of schemaSql([t], e.dialect)) await e.run(ddl);
      }
      const reset = async (t: string) => {
        await e.run(`DELETE FROM ${t}`);
        if (t === "u") await e.run("INSERT INTO u (id, a, b, e) VALUES (1, 1, 'one', 'e1')");
        else
          await e.run(
            "INSERT INTO t (id, a, b, c, e) VALUES (1, 10, NULL, 0.5, 'e1'), (2, 20, 'b2', 1, 'e2'), (3, 30, NULL, 1.5, 'e3'), (4, 40, 'b4', 2, 'e4'), (5, 50, NULL, 2.5, 'e5')",
          );
      };
      const attempt = async (sql: string, args: BindValue[], t: string) => {
        try {
          const changes = await e.run(sql, args);
          return {
            error: null,
            changes,
            rows: await e.rows(`SELECT id, a, b, c, d, e, outbox_seq FROM ${t} ORDER BY id`),
          };
        } catch (error) {
          return { error: e.codeOf(error), changes: 0, rows: [] as unknown[][] };
        }
      };
      const gen = new StatementGenerator(rng(Number(process.env.SQLOUTBOX_ENGINE_FUZZ_SEED ?? 4242)), name);
      const failures: string[] = [];
      let checked = 0;
      let engineErrors = 0;
      for (let i = 0; checked < GENERATED && failures.length < 3; i++) {
        const g = gen.next();
        if (g.rejectReason !== undefined) continue;
        const seq = 1000 + i;
        let rewritten: { sql: string; args: BindValue[] };
        try {
          rewritten = injectOutboxSeq(g.sql, g.args, seq, e.dialect);
        } catch (error) {
          // The generator does not know the mysql-only refusals (subqueries or DEFAULT in VALUES).
          if (error instanceof UnsupportedStatementError && error.reason.includes("not supported on mysql")) continue;
          throw error;
        }
        checked++;
        const plain = toDialect(g.sql, g.args, e.dialect);
        await reset(g.table);
        const original = await attempt(plain.sql, plain.args, g.table);
        await reset(g.table);
        const first = await attempt(rewritten.sql, rewritten.args, g.table);
        const where = `${JSON.stringify(g.sql)} ${JSON.stringify(g.args, (_k, v) => (typeof v === "bigint" ? `${v}n` : v))}\n  → ${rewritten.sql}`;
        if (original.error !== null) {
          engineErrors++;
          if (first.error !== original.error)
            failures.push(`error ${first.error} instead of ${original.error}: ${where}`);
          continue;
        }
        const blank = name === "mysql" ? null : 0;
        const restored = first.rows.map((r) => (r[6] === seq ? [...r.slice(0, 6), blank] : r));
        // MySQL counts changed rows, not matched ones: an UPDATE that rewrites a value with itself
        // reports 0, while its rewrite also moves outbox_seq and reports 1. The rows must agree.
        const stamped = first.rows.filter((r) => r[6] === seq).length;
        const countsAgree =
          name === "mysql"
            ? first.changes >= original.changes && stamped === first.changes
            : first.changes === original.changes && stamped === first.changes;
        if (first.error !== null || !countsAgree || !Bun.deepEquals(restored, original.rows)) {
          failures.push(`differs (${first.error ?? `changes ${first.changes}`} vs ${original.changes}): ${where}`);
          continue;
        }
        const again = await attempt(rewritten.sql, rewritten.args, g.table);
        if (again.error !== null || again.changes !== 0)
          failures.push(`redelivery applied (${again.error ?? again.changes}): ${where}`);
      }
      expect(failures).toEqual([]);
      expect(engineErrors).toBeLessThan(checked); // most statements must really write
    });
  }, 60_000);
});

describe("compat mode on SQLite (the reference's forms)", () => {
  test("INSERT OR IGNORE hides a NOT NULL violation: the row silently vanishes", async () => {
    await withEngine("sqlite", async (e) => {
      await createOrders(e);
      const compat = injectOutboxSeq(INSERT, [1, null, "lost"], 1, "sqlite", { compat: true });
      expect(await e.run(compat.sql, compat.args)).toBe(0);
      const strict = injectOutboxSeq(INSERT, [1, null, "lost"], 1, "sqlite");
      expect(await codeOfFailure(e, strict.sql, strict.args)).toBe("SQLITE_CONSTRAINT_NOTNULL");
      expect(await e.rows("SELECT count(*) FROM orders")).toEqual([[0]]);
    });
  });
});
