import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { maxRows, multiRowSql, valuesInsert } from "../src/sql/coalesce.ts";
import { coalesce } from "../src/writers/coalesce.ts";
import { runIsolated, type Outcome, type PassResult } from "../src/writers/isolate.ts";
import type { Statement, WriteResult } from "../src/writers/writer.ts";
import type { BindValue, Dialect } from "../src/vocabulary.ts";
import { classifyPostgres } from "../src/writers/classify.ts";
import { WriteError } from "../src/errors.ts";
import { type Engine, openRemote, type Remote } from "./support/remote.ts";

describe("valuesInsert: which statements may be merged into one multi-row INSERT", () => {
  test.each([
    ["postgres", "INSERT INTO t (a, b) VALUES ($1, $2)", 2],
    ["postgres", "insert into s.t (a, b, c) values ($1::jsonb, -$2, 'x''y') ON CONFLICT (a) DO NOTHING;", 2],
    ["postgres", "INSERT INTO t (a, b) VALUES ($1, NULL) ON CONFLICT (a) DO UPDATE SET b = excluded.b", 1],
    ["mysql", 'INSERT INTO `t` (a, b) VALUES (?, "lit") ON DUPLICATE KEY UPDATE b = VALUES(b)', 1],
    ["mysql", "INSERT IGNORE INTO t (a) VALUES (?)", 1],
    ["sqlite", "INSERT OR IGNORE INTO t (a, b) VALUES (?, TRUE) -- trailing comment", 1],
    ["sqlite", "INSERT INTO t VALUES (1.5, 'x')", 0],
    ["libsql", "INSERT INTO t (a) VALUES (?) /* c */ ;", 1],
  ] as Array<[Dialect, string, number]>)("%s accepts %s", (dialect, sql, width) => {
    expect(valuesInsert(sql, dialect)?.width).toBe(width);
  });

  test.each([
    ["postgres", "INSERT INTO t (a) VALUES (now())", "a function call: evaluated per statement, not per row"],
    [
      "postgres",
      "INSERT INTO t (a) VALUES ((SELECT max(a) FROM t))",
      "a subquery would not see the rows merged before it",
    ],
    ["postgres", "INSERT INTO t (a) VALUES ($1) RETURNING a", "RETURNING answers per row"],
    ["postgres", "INSERT INTO t (a, b) VALUES ($2, $1)", "placeholders out of order"],
    ["postgres", "INSERT INTO t (a) VALUES ($1) ON CONFLICT (a) DO UPDATE SET b = $2", "a placeholder after the tuple"],
    ["postgres", "INSERT INTO t (a) VALUES ($1), ($2)", "already multi-row"],
    ["postgres", "INSERT INTO t (a) SELECT $1", "INSERT … SELECT"],
    ["postgres", "WITH x AS (SELECT 1) INSERT INTO t (a) VALUES ($1)", "a CTE"],
    ["mysql", "INSERT INTO t (a) VALUES (?) ; DELETE FROM t", "two statements"],
    ["mysql", "INSERT INTO t SET a = ?", "INSERT … SET"],
    ["mysql", "UPDATE t SET a = ? WHERE id = ?", "UPDATE is never merged"],
    ["mysql", "DELETE FROM t WHERE id = ?", "DELETE is never merged"],
    ["sqlite", "INSERT INTO t (a) VALUES (?1)", "numbered placeholders may bind one argument twice"],
    ["sqlite", "INSERT INTO t (a) VALUES (:a)", "named placeholders"],
    ["sqlite", "INSERT INTO t DEFAULT VALUES", "DEFAULT VALUES"],
    ["sqlite", "INSERT INTO t (a) VALUES (CURRENT_TIMESTAMP)", "a keyword value"],
  ] as Array<[Dialect, string, string]>)("%s refuses %s (%s)", (dialect, sql) => {
    expect(valuesInsert(sql, dialect)).toBeNull();
  });

  test("multi-row text repeats the tuple as written and renumbers PostgreSQL's placeholders", () => {
    const pg = valuesInsert("INSERT INTO t (a, b, c) VALUES ($1, 'x', $2::int) ON CONFLICT DO NOTHING", "postgres")!;
    expect(multiRowSql(pg, 3)).toBe(
      "INSERT INTO t (a, b, c) VALUES ($1, 'x', $2::int), ($3, 'x', $4::int), ($5, 'x', $6::int) ON CONFLICT DO NOTHING",
    );
    const my = valuesInsert("INSERT INTO t (a, b) VALUES (?, ?);", "mysql")!;
    expect(multiRowSql(my, 2)).toBe("INSERT INTO t (a, b) VALUES (?, ?), (?, ?);");
  });

  test("rows per statement stay within each engine's parameter limit", () => {
    const four = valuesInsert("INSERT INTO t (a, b, c, d) VALUES (?, ?, ?, ?)", "sqlite")!;
    expect(maxRows(four, "sqlite")).toBe(8191);
    expect(maxRows(four, "mysql")).toBe(16383);
    expect(maxRows(valuesInsert("INSERT INTO t (a) VALUES (1)", "sqlite")!, "sqlite")).toBe(1000);
  });
});

const stmt = (sql: string, args: BindValue[], namespace = "t", seq = 1): Statement => ({ sql, args, namespace, seq });

describe("coalesce: planning a batch", () => {
  test("merges consecutive same-text rows of one namespace; a fence, another text or namespace, a wrong argument count cut the run", () => {
    const ins = "INSERT INTO t (a) VALUES (?)";
    const batch: Statement[] = [
      { ...stmt("INSERT INTO ledger …", [], "t", 0), fence: true },
      stmt(ins, [1], "t", 1),
      stmt(ins, [2], "t", 2),
      stmt(ins, [3], "t", 3),
      stmt("UPDATE t SET a = ? WHERE a = ?", [4, 3], "t", 4),
      stmt(ins, [5], "t", 5),
      stmt(ins, [6], "u", 6),
      stmt(ins, [7, 8], "u", 7),
    ];
    const { sent, members } = coalesce(batch, "sqlite");
    expect(members).toEqual([[0], [1, 2, 3], [4], [5], [6], [7]]);
    expect(sent[1]).toEqual({ sql: "INSERT INTO t (a) VALUES (?), (?), (?)", args: [1, 2, 3], namespace: "t", seq: 3 });
    expect(sent[0]).toBe(batch[0]!);
  });

  test("a run longer than the parameter limit is split", () => {
    const batch = Array.from({ length: 40_000 }, (_, i) => stmt("INSERT INTO t (a) VALUES (?)", [i], "t", i + 1));
    expect(coalesce(batch, "sqlite").members.map((m) => m.length)).toEqual([32_766, 40_000 - 32_766]);
  });
});

describe("runIsolated with coalescing: a failed merged statement is retried row by row", () => {
  const ins = "INSERT INTO t (a) VALUES ($1)";
  const fail = (m: string, e: unknown) => new WriteError(m, undefined, { cause: e });
  /** A PostgreSQL-like engine: a pass fails at a negative value and rolls back; records each pass's statement count. */
  function engine(committing: "all-or-nothing" | "statement") {
    const passes: number[][] = [];
    const pass = async (stmts: Statement[]): Promise<PassResult> => {
      passes.push(stmts.map((s) => s.args.length));
      const outcomes: Outcome[] = stmts.map((s) =>
        s.args.some((a) => typeof a === "number" && a < 0)
          ? { error: Object.assign(new Error("check violated"), { errno: "23514" }) }
          : { result: { ok: true, rowsAffected: s.args.length } as WriteResult },
      );
      const failedNs = new Set(stmts.filter((_, i) => "error" in outcomes[i]!).map((s) => s.namespace));
      const committed =
        committing === "all-or-nothing"
          ? outcomes.every((o) => "result" in o)
          : stmts.every((s, i) => !failedNs.has(s.namespace) || "error" in outcomes[i]!); // MySQL: commits when a failed namespace had nothing applied
      return { outcomes, committed };
    };
    return { pass, passes };
  }

  test("PostgreSQL-like: one merged pass, then the same rows one by one, which blames the culprit", async () => {
    const { pass, passes } = engine("all-or-nothing");
    const batch = [1, 2, -3, 4]
      .map((v, i) => stmt(ins, [v], "t", i + 1))
      .concat([stmt(ins, [5], "u", 5), stmt(ins, [6], "u", 6)]);
    const results = await runIsolated(batch, pass, classifyPostgres, fail, "postgres", { coalesce: true });
    expect(passes).toEqual([
      [4, 2],
      [1, 1, 1, 1, 1, 1],
      [1, 1],
    ]);
    expect(results.map((r) => (r.ok ? "ok" : r.skipped ? "skipped" : "failed"))).toEqual([
      "skipped",
      "skipped",
      "failed",
      "skipped",
      "ok",
      "ok",
    ]);
  });

  test("MySQL-like: a pass that committed around a failed merged statement keeps what it applied and retries only that namespace", async () => {
    const { pass, passes } = engine("statement");
    const batch = [1, -2]
      .map((v, i) => stmt(ins, [v], "t", i + 1))
      .concat([stmt(ins, [5], "u", 3), stmt(ins, [6], "u", 4)]);
    const results = await runIsolated(batch, pass, classifyPostgres, fail, "postgres", { coalesce: true });
    expect(passes).toEqual([
      [2, 2],
      [1, 1],
    ]);
    expect(results).toEqual([
      { ok: false, skipped: true, error: expect.any(String) },
      { ok: false, error: expect.stringContaining("check violated"), errorClass: "23514" },
      { ok: true, rowsAffected: 1 },
      { ok: true, rowsAffected: 1 },
    ]);
  });
});

/*
 * The same batches through a coalescing writer and a `coalesce = false` one, into two copies of a
 * table on the real engine: the rows that land and each statement's ok/failed/skipped must match.
 */
/** An engine's placeholders and the table both runs of a case write. */
interface Fixture {
  engine: Engine;
  ph(n: number): string;
  ddl(table: string): string;
}

const cases: Record<
  string,
  Array<{ name: string; sql: (t: string, ph: (n: number) => string) => string; rows: BindValue[][] }>
> = {
  postgres: [
    {
      name: "ON CONFLICT DO NOTHING with a key repeated in the batch",
      sql: (t, p) => `INSERT INTO ${t} (k, v) VALUES (${p(1)}, ${p(2)}) ON CONFLICT (k) DO NOTHING`,
      rows: [
        [1, "a"],
        [2, "b"],
        [1, "c"],
        [0, "seed"],
      ],
    },
    {
      name: "ON CONFLICT DO UPDATE with a key repeated in the batch (the engine refuses it merged)",
      sql: (t, p) => `INSERT INTO ${t} (k, v) VALUES (${p(1)}, ${p(2)}) ON CONFLICT (k) DO UPDATE SET v = excluded.v`,
      rows: [
        [1, "a"],
        [1, "b"],
        [3, "c"],
      ],
    },
    {
      name: "values of different JS types in one column",
      sql: (t, p) => `INSERT INTO ${t} (k, v, n) VALUES (${p(1)}, ${p(2)}, ${p(3)})`,
      rows: [
        [1, "a", 1],
        [2, "b", 2.5],
        [3, "c", null],
        [4, "d", 10n],
      ],
    },
  ],
  mysql: [
    {
      name: "ON DUPLICATE KEY UPDATE with a key repeated in the batch",
      sql: (t) => `INSERT INTO ${t} (k, v) VALUES (?, ?) ON DUPLICATE KEY UPDATE v = VALUES(v)`,
      rows: [
        [1, "a"],
        [1, "b"],
        [0, "c"],
      ],
    },
    {
      name: "INSERT IGNORE with a key repeated in the batch",
      sql: (t) => `INSERT IGNORE INTO ${t} (k, v) VALUES (?, ?)`,
      rows: [
        [1, "a"],
        [1, "b"],
        [2, "c"],
      ],
    },
    {
      name: "a value strict mode refuses, in the middle",
      sql: (t) => `INSERT INTO ${t} (k, v) VALUES (?, ?)`,
      rows: [
        [1, "a"],
        [2, "x".repeat(40)],
        [3, "c"],
      ],
    },
  ],
  sqlite: [
    {
      name: "INSERT OR IGNORE with a key repeated in the batch",
      sql: (t) => `INSERT OR IGNORE INTO ${t} (k, v) VALUES (?, ?)`,
      rows: [
        [1, "a"],
        [1, "b"],
        [2, "c"],
      ],
    },
    {
      name: "an upsert with a key repeated in the batch",
      sql: (t) => `INSERT INTO ${t} (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v`,
      rows: [
        [1, "a"],
        [1, "b"],
        [2, "c"],
      ],
    },
    {
      name: "a NOT NULL violation in the middle",
      sql: (t) => `INSERT INTO ${t} (k, v) VALUES (?, ?)`,
      rows: [
        [1, "a"],
        [2, null],
        [3, "c"],
      ],
    },
  ],
};
cases.libsql = cases.sqlite!;

const fileDdl = (t: string) => `CREATE TABLE ${t} (k INTEGER PRIMARY KEY, v TEXT NOT NULL, n REAL)`;
const serverDdl = (t: string) => `CREATE TABLE ${t} (k BIGINT PRIMARY KEY, v VARCHAR(32) NOT NULL, n DOUBLE PRECISION)`;
const fixtures: Record<string, Fixture> = {
  sqlite: { engine: "sqlite", ph: () => "?", ddl: fileDdl },
  libsql: { engine: "libsql", ph: () => "?", ddl: fileDdl },
  postgres: { engine: "postgres", ph: (n) => `$${n}`, ddl: serverDdl },
  mysql: { engine: "mysql", ph: () => "?", ddl: serverDdl },
};

for (const [name, fx] of Object.entries(fixtures)) {
  describe(`coalesced equals serial on ${name}`, () => {
    // One remote per engine; each case writes tables of its own.
    let remote: Remote;
    beforeAll(async () => {
      remote = await openRemote(fx.engine);
    });
    afterAll(async () => {
      await remote?.done();
    });
    let n = 0;
    for (const c of cases[name]!) {
      test(c.name, async () => {
        const tables = [`merged_${n}`, `serial_${n}`];
        n++;
        for (const t of tables) {
          await remote.exec(fx.ddl(t));
          await remote.exec(`INSERT INTO ${t} (k, v) VALUES (0, 'existing')`);
        }
        const outcome = async (table: string, coalesceOn: boolean) => {
          const writer = remote.createWriter({ coalesce: coalesceOn });
          try {
            const batch = c.rows.map((args, i) => stmt(c.sql(table, fx.ph), args, table, i + 1));
            // A second namespace in the same batch must be unaffected either way.
            const other: BindValue[] = [100, "other", ...c.rows[0]!.slice(2)];
            batch.push(stmt(c.sql(table, fx.ph), other, `${table}-other`, 99));
            const results = await writer.writeBatch(batch);
            const rows = await remote.rows(`SELECT k, v FROM ${table} ORDER BY k`);
            return {
              results: results.map((r) => (r.ok ? "ok" : r.skipped ? "skipped" : `failed ${r.errorClass}`)),
              rows: rows.map((r) => r.map(String)),
            };
          } finally {
            await writer.close?.();
          }
        };
        const merged = await outcome(tables[0]!, true);
        const serial = await outcome(tables[1]!, false);
        expect(merged).toEqual(serial);
        expect(serial.rows.length).toBeGreaterThan(1); // the batch did something
      });
    }
  });
}
