import { describe, expect, test } from "bun:test";
import { InvalidArgumentError, UnsupportedStatementError } from "../src/errors.ts";
import { injectOutboxSeq, toDialect } from "../src/sql/rewrite.ts";
import { bindTemplate, rewriteTemplate, SEQ_ARG } from "../src/sql/template.ts";
import type { BindValue, Dialect } from "../src/vocabulary.ts";
import { errorOf } from "./support/errors.ts";

const SEQ = 42;
const CONFLICT = " ON CONFLICT (outbox_seq) WHERE outbox_seq != 0 DO NOTHING";

/** Expected output per dialect family; `pg` uses $n, the others `?`. libsql = sqlite. */
interface Expect {
  sqlite: string;
  pg: string;
  mysql: string;
  args: BindValue[];
}
interface Case {
  name: string;
  sql: string;
  args: BindValue[];
  want: Expect;
}

const inserts: Case[] = [
  {
    name: "a plain INSERT",
    sql: "INSERT INTO t (a, b) VALUES (?, ?)",
    args: [1, "x"],
    want: {
      sqlite: `INSERT INTO t (a, b, outbox_seq) VALUES (?, ?, ?)${CONFLICT}`,
      pg: `INSERT INTO t (a, b, outbox_seq) VALUES ($1, $2, $3)${CONFLICT}`,
      mysql:
        "INSERT INTO t (a, b, outbox_seq) SELECT ?, ?, ? FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM t WHERE outbox_seq = ?)",
      args: [1, "x", SEQ],
    },
  },
  {
    name: "lower case, no spaces, newlines and tabs",
    sql: "insert\ninto\tt(a,b)values(?,?)",
    args: [1, 2],
    want: {
      sqlite: `insert\ninto\tt(a,b, outbox_seq)values(?,?, ?)${CONFLICT}`,
      pg: `insert\ninto\tt(a,b, outbox_seq)values($1,$2, $3)${CONFLICT}`,
      mysql:
        "insert\ninto\tt(a,b, outbox_seq) SELECT ?,?, ? FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM t WHERE outbox_seq = ?)",
      args: [1, 2, SEQ],
    },
  },
  {
    name: "literals holding ?, ), WHERE, an escaped quote and ;",
    sql: "INSERT INTO t (a, b, c) VALUES ('it''s ?) WHERE x;', ?, ')')",
    args: [7],
    want: {
      sqlite: `INSERT INTO t (a, b, c, outbox_seq) VALUES ('it''s ?) WHERE x;', ?, ')', ?)${CONFLICT}`,
      pg: `INSERT INTO t (a, b, c, outbox_seq) VALUES ('it''s ?) WHERE x;', $1, ')', $2)${CONFLICT}`,
      mysql:
        "INSERT INTO t (a, b, c, outbox_seq) SELECT 'it''s ?) WHERE x;', ?, ')', ? FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM t WHERE outbox_seq = ?)",
      args: [7, SEQ],
    },
  },
  {
    name: "comments holding ? and ) and a trailing line comment",
    sql: "INSERT INTO t /* (x?) */ (a -- b?)\n) VALUES (? /* ? */) -- done?",
    args: [1],
    want: {
      sqlite: `INSERT INTO t /* (x?) */ (a -- b?)\n, outbox_seq) VALUES (? /* ? */, ?)${CONFLICT} -- done?`,
      pg: `INSERT INTO t /* (x?) */ (a -- b?)\n, outbox_seq) VALUES ($1 /* ? */, $2)${CONFLICT} -- done?`,
      mysql:
        "INSERT INTO t /* (x?) */ (a -- b?)\n, outbox_seq) SELECT ? /* ? */, ? FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM t WHERE outbox_seq = ?) -- done?",
      args: [1, SEQ],
    },
  },
  {
    name: "a trailing semicolon (kept, with the whitespace after it)",
    sql: "INSERT INTO t (a) VALUES (?);  ",
    args: [1],
    want: {
      sqlite: `INSERT INTO t (a, outbox_seq) VALUES (?, ?)${CONFLICT};  `,
      pg: `INSERT INTO t (a, outbox_seq) VALUES ($1, $2)${CONFLICT};  `,
      mysql:
        "INSERT INTO t (a, outbox_seq) SELECT ?, ? FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM t WHERE outbox_seq = ?);  ",
      args: [1, SEQ],
    },
  },
  {
    name: "function calls and nested parentheses among the values",
    sql: "INSERT INTO t (a, b, c) VALUES (coalesce(?, 1), (upper(lower(?))), ? + 1)",
    args: [1, 2, 3],
    want: {
      sqlite: `INSERT INTO t (a, b, c, outbox_seq) VALUES (coalesce(?, 1), (upper(lower(?))), ? + 1, ?)${CONFLICT}`,
      pg: `INSERT INTO t (a, b, c, outbox_seq) VALUES (coalesce($1, 1), (upper(lower($2))), $3 + 1, $4)${CONFLICT}`,
      mysql:
        "INSERT INTO t (a, b, c, outbox_seq) SELECT coalesce(?, 1), (upper(lower(?))), ? + 1, ? FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM t WHERE outbox_seq = ?)",
      args: [1, 2, 3, SEQ],
    },
  },
  {
    name: "no placeholder at all (a '?' in a literal with no args is unambiguous)",
    sql: "INSERT INTO t (a) VALUES ('?')",
    args: [],
    want: {
      sqlite: `INSERT INTO t (a, outbox_seq) VALUES ('?', ?)${CONFLICT}`,
      pg: `INSERT INTO t (a, outbox_seq) VALUES ('?', $1)${CONFLICT}`,
      mysql:
        "INSERT INTO t (a, outbox_seq) SELECT '?', ? FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM t WHERE outbox_seq = ?)",
      args: [SEQ],
    },
  },
  {
    name: "numbered ?NNN placeholders (renumbered in order, arguments reordered)",
    sql: "INSERT INTO t (a, b, c) VALUES (?2, ?1, ?2)",
    args: ["one", "two"],
    want: {
      sqlite: `INSERT INTO t (a, b, c, outbox_seq) VALUES (?, ?, ?, ?)${CONFLICT}`,
      pg: `INSERT INTO t (a, b, c, outbox_seq) VALUES ($1, $2, $3, $4)${CONFLICT}`,
      mysql:
        "INSERT INTO t (a, b, c, outbox_seq) SELECT ?, ?, ? , ? FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM t WHERE outbox_seq = ?)".replace(
          "? , ?",
          "?, ?",
        ),
      args: ["two", "one", "two", SEQ],
    },
  },
];

const updates: Case[] = [
  {
    name: "a plain UPDATE",
    sql: "UPDATE t SET a = ?, b = ? WHERE id = ?",
    args: [1, 2, 3],
    want: {
      sqlite: "UPDATE t SET a = ?, b = ?, outbox_seq = ? WHERE (id = ?) AND outbox_seq < ?",
      pg: "UPDATE t SET a = $1, b = $2, outbox_seq = $3 WHERE (id = $4) AND outbox_seq < $5",
      mysql: "UPDATE t SET a = ?, b = ?, outbox_seq = ? WHERE (id = ?) AND COALESCE(outbox_seq, 0) < ?",
      args: [1, 2, SEQ, 3, SEQ],
    },
  },
  {
    name: "an UPDATE without WHERE",
    sql: "update t set a=?",
    args: [1],
    want: {
      sqlite: "update t set a=?, outbox_seq = ? WHERE outbox_seq < ?",
      pg: "update t set a=$1, outbox_seq = $2 WHERE outbox_seq < $3",
      mysql: "update t set a=?, outbox_seq = ? WHERE COALESCE(outbox_seq, 0) < ?",
      args: [1, SEQ, SEQ],
    },
  },
  {
    name: "an OR in WHERE (parenthesised so the guard binds to all of it)",
    sql: "UPDATE t SET a = ? WHERE id = ? OR id = ?",
    args: [1, 2, 3],
    want: {
      sqlite: "UPDATE t SET a = ?, outbox_seq = ? WHERE (id = ? OR id = ?) AND outbox_seq < ?",
      pg: "UPDATE t SET a = $1, outbox_seq = $2 WHERE (id = $3 OR id = $4) AND outbox_seq < $5",
      mysql: "UPDATE t SET a = ?, outbox_seq = ? WHERE (id = ? OR id = ?) AND COALESCE(outbox_seq, 0) < ?",
      args: [1, SEQ, 2, 3, SEQ],
    },
  },
  {
    name: "literals with WHERE, ? and ; in SET, and a comment before WHERE",
    sql: "UPDATE t\n  SET note = 'x WHERE y = ?;', a = ? /* WHERE ? */\n  WHERE id = ? -- trailing ?",
    args: [1, 2],
    want: {
      sqlite:
        "UPDATE t\n  SET note = 'x WHERE y = ?;', a = ?, outbox_seq = ? /* WHERE ? */\n  WHERE (id = ?) AND outbox_seq < ? -- trailing ?",
      pg: "UPDATE t\n  SET note = 'x WHERE y = ?;', a = $1, outbox_seq = $2 /* WHERE ? */\n  WHERE (id = $3) AND outbox_seq < $4 -- trailing ?",
      mysql:
        "UPDATE t\n  SET note = 'x WHERE y = ?;', a = ?, outbox_seq = ? /* WHERE ? */\n  WHERE (id = ?) AND COALESCE(outbox_seq, 0) < ? -- trailing ?",
      args: [1, SEQ, 2, SEQ],
    },
  },
  {
    name: "subqueries with their own WHERE in SET and in WHERE",
    sql: "UPDATE t SET a = (SELECT v FROM u WHERE u.k = ?), b = ? WHERE id IN (SELECT id FROM w WHERE z = ?)",
    args: [1, 2, 3],
    want: {
      sqlite:
        "UPDATE t SET a = (SELECT v FROM u WHERE u.k = ?), b = ?, outbox_seq = ? WHERE (id IN (SELECT id FROM w WHERE z = ?)) AND outbox_seq < ?",
      pg: "UPDATE t SET a = (SELECT v FROM u WHERE u.k = $1), b = $2, outbox_seq = $3 WHERE (id IN (SELECT id FROM w WHERE z = $4)) AND outbox_seq < $5",
      mysql:
        "UPDATE t SET a = (SELECT v FROM u WHERE u.k = ?), b = ?, outbox_seq = ? WHERE (id IN (SELECT id FROM w WHERE z = ?)) AND COALESCE(outbox_seq, 0) < ?",
      args: [1, 2, SEQ, 3, SEQ],
    },
  },
  {
    name: "a trailing semicolon (kept)",
    sql: "UPDATE t SET a = ? WHERE id = ?;",
    args: [1, 2],
    want: {
      sqlite: "UPDATE t SET a = ?, outbox_seq = ? WHERE (id = ?) AND outbox_seq < ?;",
      pg: "UPDATE t SET a = $1, outbox_seq = $2 WHERE (id = $3) AND outbox_seq < $4;",
      mysql: "UPDATE t SET a = ?, outbox_seq = ? WHERE (id = ?) AND COALESCE(outbox_seq, 0) < ?;",
      args: [1, SEQ, 2, SEQ],
    },
  },
  {
    name: "a constant SET (no placeholder there: nothing to guard against)",
    sql: "UPDATE t SET status = 'shipped' WHERE id = ?",
    args: [7],
    want: {
      sqlite: "UPDATE t SET status = 'shipped', outbox_seq = ? WHERE (id = ?) AND outbox_seq < ?",
      pg: "UPDATE t SET status = 'shipped', outbox_seq = $1 WHERE (id = $2) AND outbox_seq < $3",
      mysql: "UPDATE t SET status = 'shipped', outbox_seq = ? WHERE (id = ?) AND COALESCE(outbox_seq, 0) < ?",
      args: [SEQ, 7, SEQ],
    },
  },
  {
    name: "a ? only in a literal of SET, the real one in WHERE",
    sql: "UPDATE t SET a = '?' /* ? */ WHERE id = ?",
    args: [7],
    want: {
      sqlite: "UPDATE t SET a = '?', outbox_seq = ? /* ? */ WHERE (id = ?) AND outbox_seq < ?",
      pg: "UPDATE t SET a = '?', outbox_seq = $1 /* ? */ WHERE (id = $2) AND outbox_seq < $3",
      mysql: "UPDATE t SET a = '?', outbox_seq = ? /* ? */ WHERE (id = ?) AND COALESCE(outbox_seq, 0) < ?",
      args: [SEQ, 7, SEQ],
    },
  },
  {
    name: "placeholders touching keywords (a separating space: $1where is junk to PostgreSQL, ?where to MariaDB)",
    sql: "UPDATE t SET a=?WHERE id=?AND b IS NOT?",
    args: [1, 2, null],
    want: {
      sqlite: "UPDATE t SET a=?, outbox_seq = ? WHERE (id=? AND b IS NOT ?) AND outbox_seq < ?",
      pg: "UPDATE t SET a=$1, outbox_seq = $2 WHERE (id=$3 AND b IS NOT $4) AND outbox_seq < $5",
      mysql: "UPDATE t SET a=?, outbox_seq = ? WHERE (id=? AND b IS NOT ?) AND COALESCE(outbox_seq, 0) < ?",
      args: [1, SEQ, 2, null, SEQ],
    },
  },
  {
    name: "a CASE expression and IS DISTINCT FROM in SET",
    sql: "UPDATE t SET a = CASE WHEN ? THEN 1 ELSE 2 END, b = (x IS DISTINCT FROM ?) WHERE id = ?",
    args: [true, 5, 6],
    want: {
      sqlite:
        "UPDATE t SET a = CASE WHEN ? THEN 1 ELSE 2 END, b = (x IS DISTINCT FROM ?), outbox_seq = ? WHERE (id = ?) AND outbox_seq < ?",
      pg: "UPDATE t SET a = CASE WHEN $1 THEN 1 ELSE 2 END, b = (x IS DISTINCT FROM $2), outbox_seq = $3 WHERE (id = $4) AND outbox_seq < $5",
      mysql:
        "UPDATE t SET a = CASE WHEN ? THEN 1 ELSE 2 END, b = (x IS DISTINCT FROM ?), outbox_seq = ? WHERE (id = ?) AND COALESCE(outbox_seq, 0) < ?",
      args: [true, 5, SEQ, 6, SEQ],
    },
  },
];

// Quoted identifiers differ per dialect, so these cases are per dialect.
const quotedCases: Array<[Dialect, string, string]> = [
  [
    "sqlite",
    'INSERT INTO "my tab" ("a b", [c?], `d)`) VALUES (?, 2, 3)',
    `INSERT INTO "my tab" ("a b", [c?], \`d)\`, outbox_seq) VALUES (?, 2, 3, ?)${CONFLICT}`,
  ],
  [
    "libsql",
    'INSERT INTO main."t""q" ("x?") VALUES (?)',
    `INSERT INTO main."t""q" ("x?", outbox_seq) VALUES (?, ?)${CONFLICT}`,
  ],
  [
    "postgres",
    'INSERT INTO "Sch"."T" ("?col") VALUES (?)',
    `INSERT INTO "Sch"."T" ("?col", outbox_seq) VALUES ($1, $2)${CONFLICT}`,
  ],
  [
    "mysql",
    "INSERT INTO `db`.`t?` (`a``)`) VALUES (?)",
    "INSERT INTO `db`.`t?` (`a``)`, outbox_seq) SELECT ?, ? FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM `db`.`t?` WHERE outbox_seq = ?)",
  ],
];

const dialects: Dialect[] = ["sqlite", "libsql", "postgres", "mysql"];
const pick = (w: Expect, d: Dialect) => (d === "postgres" ? w.pg : d === "mysql" ? w.mysql : w.sqlite);
const expectedArgs = (w: Expect, d: Dialect) =>
  d === "mysql" && w.mysql.includes("FROM DUAL") ? [...w.args, SEQ] : w.args;

describe("injectOutboxSeq accepts", () => {
  const rows = dialects.flatMap((d) => [...inserts, ...updates].map((c) => [d, c.name, c] as const));
  test.each(rows)("%s: %s", (d, _name, c) => {
    const input = c.args.slice();
    const out = injectOutboxSeq(c.sql, input, SEQ, d);
    expect(out.sql).toBe(pick(c.want, d));
    expect(out.args).toEqual(expectedArgs(c.want, d));
    expect(input).toEqual(c.args); // never mutates
    expect(out.args).not.toBe(input);
  });

  test.each(quotedCases)("%s: quoted identifiers in %s", (d, sql, want) => {
    const out = injectOutboxSeq(sql, [1], SEQ, d);
    expect(out.sql).toBe(want);
  });

  test("postgres: dollar-quoted and E'' strings hide ? and quotes", () => {
    const out = injectOutboxSeq(
      "INSERT INTO t (a, b, c) VALUES ($$it's ?)$$, E'x\\'?)', $tag$?$tag$) ",
      [],
      SEQ,
      "postgres",
    );
    expect(out.sql).toBe(
      `INSERT INTO t (a, b, c, outbox_seq) VALUES ($$it's ?)$$, E'x\\'?)', $tag$?$tag$, $1)${CONFLICT} `,
    );
    expect(out.args).toEqual([SEQ]);
  });

  test("mysql: backslash escapes, # comments and -- comments", () => {
    const out = injectOutboxSeq(
      "UPDATE t SET a = 'x\\'?', b = ? # c?\n, c = 5--1\n WHERE id = ? -- ?",
      [1, 2],
      SEQ,
      "mysql",
    );
    expect(out.sql).toBe(
      "UPDATE t SET a = 'x\\'?', b = ? # c?\n, c = 5--1, outbox_seq = ?\n WHERE (id = ?) AND COALESCE(outbox_seq, 0) < ? -- ?",
    );
    expect(out.args).toEqual([1, SEQ, 2, SEQ]);
  });
});

describe("injectOutboxSeq compat mode", () => {
  test.each(["sqlite", "libsql"] as const)("%s: reproduces the reference's INSERT OR IGNORE form", (d) => {
    expect(injectOutboxSeq("INSERT INTO t (c1, c2) VALUES (?, ?)", [1, 2], SEQ, d, { compat: true })).toEqual({
      sql: "INSERT OR IGNORE INTO t (c1, c2, outbox_seq) VALUES (?, ?, ?)",
      args: [1, 2, SEQ],
    });
  });
  test.each(["sqlite", "libsql"] as const)("%s: reproduces the reference's unguarded UPDATE form", (d) => {
    expect(injectOutboxSeq("UPDATE t SET c1=?, c2=? WHERE id=?", [1, 2, 3], SEQ, d, { compat: true })).toEqual({
      sql: "UPDATE t SET c1=?, c2=?, outbox_seq = ? WHERE id=?",
      args: [1, 2, SEQ, 3],
    });
  });
  test.each(["postgres", "mysql"] as const)("%s: rejects compat mode", (d) => {
    const e = errorOf<UnsupportedStatementError>(() =>
      injectOutboxSeq("INSERT INTO t (a) VALUES (?)", [1], SEQ, d, { compat: true }),
    );
    expect(e).toBeInstanceOf(UnsupportedStatementError);
    expect(e.reason).toContain("only for sqlite/libsql");
  });
});

const rejected: Array<[string, string, BindValue[], string]> = [
  ["INSERT … SELECT", "INSERT INTO t (a) SELECT ? FROM u", [1], "INSERT … SELECT is not supported"],
  ["INSERT … (SELECT)", "INSERT INTO t (a) (SELECT 1)", [], "INSERT … SELECT is not supported"],
  ["multi-row VALUES", "INSERT INTO t (a) VALUES (?), (?)", [1, 2], "multi-row VALUES is not supported"],
  ["no column list", "INSERT INTO t VALUES (?)", [1], "INSERT without an explicit column list"],
  ["DEFAULT VALUES", "INSERT INTO t DEFAULT VALUES", [], "INSERT without an explicit column list"],
  [
    "INSERT OR REPLACE",
    "INSERT OR REPLACE INTO t (a) VALUES (?)",
    [1],
    "INSERT OR REPLACE is already a conflict policy",
  ],
  ["INSERT OR IGNORE", "insert or ignore into t (a) values (?)", [1], "INSERT OR IGNORE is already a conflict policy"],
  ["INSERT IGNORE", "INSERT IGNORE INTO t (a) VALUES (?)", [1], "INSERT IGNORE would hide constraint errors"],
  ["REPLACE", "REPLACE INTO t (a) VALUES (?)", [1], "REPLACE is not supported"],
  [
    "ON CONFLICT already present",
    "INSERT INTO t (a) VALUES (?) ON CONFLICT DO NOTHING",
    [1],
    "already has an ON CONFLICT / ON DUPLICATE KEY clause",
  ],
  [
    "ON DUPLICATE KEY",
    "INSERT INTO t (a) VALUES (?) ON DUPLICATE KEY UPDATE a = 1",
    [1],
    "already has an ON CONFLICT / ON DUPLICATE KEY clause",
  ],
  ["RETURNING on INSERT", "INSERT INTO t (a) VALUES (?) RETURNING id", [1], "RETURNING is not supported"],
  [
    "a ) only inside a literal",
    "INSERT INTO t (a) VALUES ('x)'",
    [],
    "unbalanced parentheses: '(' at offset 25 is never closed",
  ],
  [
    "a ? only inside a literal but an argument given",
    "INSERT INTO t (a) VALUES ('?')",
    [1],
    "statement takes 0 bind arguments (1 more '?' inside string literals, identifiers or comments do not count) but 1 were given",
  ],
  [
    "WHERE and ? only inside a literal of an UPDATE given an argument",
    "UPDATE t SET a = 'x WHERE id = ?'",
    [1],
    "statement takes 0 bind arguments (1 more '?' inside string literals",
  ],
  ["two statements", "INSERT INTO t (a) VALUES (?); DELETE FROM t", [1], "more than one statement: ';' at offset 28"],
  ["two semicolons", "UPDATE t SET a = ?;;", [1], "more than one statement"],
  [
    "fewer values than columns",
    "INSERT INTO t (a, b) VALUES (?)",
    [1],
    "column list names 2 columns but VALUES has 1 values",
  ],
  [
    "more values than columns",
    "INSERT INTO t (a) VALUES (?, (1, 2), ?)",
    [1, 2],
    "column list names 1 columns but VALUES has 3 values",
  ],
  [
    "an existing outbox_seq column",
    "INSERT INTO t (a, OUTBOX_SEQ) VALUES (?, ?)",
    [1, 2],
    "the statement already sets outbox_seq",
  ],
  [
    "an UPDATE setting outbox_seq",
    "UPDATE t SET a = ?, outbox_seq = ? WHERE id = 1",
    [1, 2],
    "the statement already sets outbox_seq",
  ],
  ["UPDATE … FROM", "UPDATE t SET a = u.b FROM u WHERE t.id = u.id AND u.x = ?", [1], "UPDATE … FROM is not supported"],
  [
    "UPDATE … FROM with a ? in SET",
    "UPDATE t SET a = ? FROM u WHERE t.id = u.id",
    [1],
    "UPDATE … FROM is not supported",
  ],
  ["UPDATE … ORDER BY", "UPDATE t SET a = ? WHERE x = 1 ORDER BY id", [1], "UPDATE … ORDER is not supported"],
  ["UPDATE … LIMIT", "UPDATE t SET a = ? LIMIT 1", [1], "UPDATE … LIMIT is not supported"],
  ["UPDATE … RETURNING", "UPDATE t SET a = ? WHERE id = 1 RETURNING a", [1], "UPDATE … RETURNING is not supported"],
  ["UPDATE with an alias", "UPDATE t AS x SET a = ?", [1], "expected SET after the table name"],
  ["UPDATE OR IGNORE", "UPDATE OR IGNORE t SET a = ?", [1], "UPDATE OR IGNORE is already a conflict policy"],
  ["multi-table UPDATE", "UPDATE t JOIN u ON t.id = u.id SET t.a = ?", [1], "expected SET after the table name"],
  ["SET without =", "UPDATE t SET a WHERE id = ?", [1], "SET assignment without '='"],
  ["WHERE without condition", "UPDATE t SET a = ? WHERE", [1], "WHERE without a condition"],
  [
    "too few arguments",
    "UPDATE t SET a = ?, b = ? WHERE id = ?",
    [1, 2],
    "statement takes 3 bind arguments but 2 were given",
  ],
  ["too many arguments", "INSERT INTO t (a) VALUES (?)", [1, 2], "statement takes 1 bind arguments but 2 were given"],
  ["a DELETE", "DELETE FROM t WHERE id = ?", [1], "only INSERT and UPDATE can be rewritten, got 'DELETE' at offset 0"],
  ["a CTE", "WITH x AS (SELECT 1) INSERT INTO t (a) SELECT * FROM x", [], "statements starting with WITH"],
  ["an empty statement", "  -- nothing\n ;", [], "empty statement"],
  ["an unterminated literal", "INSERT INTO t (a) VALUES ('x)", [], "unterminated string literal starting at offset 26"],
  [
    "an unterminated comment",
    "INSERT INTO t (a) VALUES (?) /* x",
    [1],
    "unterminated block comment starting at offset 29",
  ],
  ["an empty VALUES element", "INSERT INTO t (a, b) VALUES (?, )", [1], "empty element in VALUES"],
  [
    "expressions in the column list",
    "INSERT INTO t (a + 1) VALUES (?)",
    [1],
    "column list must hold plain column names",
  ],
  ["?0", "INSERT INTO t (a) VALUES (?0)", [1], "placeholder ?0 at offset 26 is out of range"],
];

describe("injectOutboxSeq rejects", () => {
  const rows = dialects.flatMap((d) =>
    rejected.map(([name, sql, args, reason]) => [d, name, sql, args, reason] as const),
  );
  test.each(rows)("%s: %s", (d, _name, sql, args, reason) => {
    const e = errorOf<UnsupportedStatementError>(() => injectOutboxSeq(sql, args, SEQ, d));
    expect(e).toBeInstanceOf(UnsupportedStatementError);
    expect(e.code).toBe("E_UNSUPPORTED_STATEMENT");
    expect(e.reason).toContain(reason);
    expect(e.sql).toBe(sql);
    expect(e.message).toBe(`unsupported statement: ${e.reason}`);
  });

  test.each(["sqlite", "libsql", "mysql"] as const)("%s: an existing backtick-quoted outbox_seq column", (d) => {
    expect(() => injectOutboxSeq("INSERT INTO t (a, `outbox_seq`) VALUES (?, ?)", [1, 2], SEQ, d)).toThrow(
      "the statement already sets outbox_seq",
    );
  });

  test("postgres: a backtick is an operator character there, not a quote", () => {
    expect(() => injectOutboxSeq("INSERT INTO t (a, `outbox_seq`) VALUES (?, ?)", [1, 2], SEQ, "postgres")).toThrow(
      "column list must hold plain column names, got '`' at offset 18",
    );
  });

  test("mysql: DEFAULT in VALUES (not expressible in the INSERT … SELECT form)", () => {
    expect(() => injectOutboxSeq("INSERT INTO t (a, b) VALUES (DEFAULT, ?)", [1], SEQ, "mysql")).toThrow(
      "DEFAULT in VALUES is not supported on mysql",
    );
    expect(injectOutboxSeq("INSERT INTO t (a, b) VALUES (DEFAULT, ?)", [1], SEQ, "postgres").sql).toStartWith(
      "INSERT INTO t (a, b, outbox_seq) VALUES (DEFAULT, $1, $2)",
    );
  });

  test("mysql: a subquery in VALUES (INSERT … SELECT would not escalate its conversion warnings)", () => {
    const sql = "INSERT INTO t (a, b) VALUES (?, (SELECT max(x) FROM u WHERE y = ?))";
    expect(() => injectOutboxSeq(sql, [1, 2], SEQ, "mysql")).toThrow(
      "a subquery in VALUES (offset 33) is not supported on mysql",
    );
    expect(injectOutboxSeq(sql, [1, 2], SEQ, "sqlite").sql).toBe(
      `INSERT INTO t (a, b, outbox_seq) VALUES (?, (SELECT max(x) FROM u WHERE y = ?), ?)${CONFLICT}`,
    );
    expect(injectOutboxSeq(sql, [1, 2], SEQ, "postgres").args).toEqual([1, 2, SEQ]);
  });

  test("mysql: an executable /*! … */ comment", () => {
    expect(() => injectOutboxSeq("INSERT INTO t (a) VALUES (? /*!, 1 */)", [1], SEQ, "mysql")).toThrow(
      "MySQL executable comment",
    );
  });

  test.each(["/*M!, 2 */", "/*M!100000 , 2 */"])("mysql: MariaDB's executable comment %s", (comment) => {
    const sql = `INSERT INTO t (a) VALUES (? ${comment})`;
    expect(() => injectOutboxSeq(sql, [1], SEQ, "mysql")).toThrow(
      "MySQL executable comment /*M!…*/ at offset 28 is not supported",
    );
    expect(() => toDialect(sql.replace("?", "?1"), [1], "mysql")).toThrow("MySQL executable comment /*M!…*/");
    expect(injectOutboxSeq(sql, [1], SEQ, "postgres").sql).toContain(comment); // a plain comment elsewhere
  });

  test.each([
    ["INSERT INTO t (a, b) VALUES (?, max(?))", "the aggregate function max() in VALUES (offset 32)"],
    ["INSERT INTO t (a, b) VALUES (?, COUNT (*))", "the aggregate function COUNT() in VALUES (offset 32)"],
    ["INSERT INTO t (a, b) VALUES (?, group_concat(?))", "the aggregate function group_concat() in VALUES (offset 32)"],
    ["INSERT INTO t (a, b) VALUES (?, row_number() OVER ())", "a window function (OVER) in VALUES (offset 45)"],
    ["INSERT INTO t (a, b) VALUES (?, sum(?) over w)", "the aggregate function sum() in VALUES (offset 32)"],
  ])("mysql: %s (VALUES refuses it, the INSERT … SELECT would compute it)", (sql, reason) => {
    const args = Array.from({ length: (sql.match(/\?/g) ?? []).length }, (_, i) => i);
    expect(() => injectOutboxSeq(sql, args, SEQ, "mysql")).toThrow(`${reason} is not supported on mysql`);
    // Elsewhere the rewrite keeps VALUES, which refuses it exactly as the original does.
    expect(injectOutboxSeq(sql, args, SEQ, "postgres").sql).toContain(" VALUES (");
  });

  test("mysql: a column or function merely named like an aggregate is fine", () => {
    expect(injectOutboxSeq("INSERT INTO t (max, b) VALUES (?, coalesce(?, 0))", [1, 2], SEQ, "mysql").args).toEqual([
      1,
      2,
      SEQ,
      SEQ,
    ]);
  });

  test.each(["sqlite", "libsql"] as const)("%s: named parameters", (d) => {
    for (const p of [":a", "@a", "$a"]) {
      expect(() => injectOutboxSeq(`INSERT INTO t (a) VALUES (${p})`, [1], SEQ, d)).toThrow(
        `named or numbered-dollar placeholder ${p} at offset 26 is not supported; use ?`,
      );
    }
  });

  test("postgres: a native $1 placeholder", () => {
    expect(() => injectOutboxSeq("INSERT INTO t (a) VALUES ($1)", [1], SEQ, "postgres")).toThrow(
      "numbered-dollar placeholder $1",
    );
  });

  test.each([0, -1, 1.5, Number.NaN, 2 ** 53])("a seq of %p is an InvalidArgumentError", (seq) => {
    expect(() => injectOutboxSeq("INSERT INTO t (a) VALUES (?)", [1], seq, "sqlite")).toThrow(InvalidArgumentError);
  });

  test("an unknown dialect is an InvalidArgumentError", () => {
    expect(() => injectOutboxSeq("INSERT INTO t (a) VALUES (?)", [1], 1, "oracle" as Dialect)).toThrow(
      InvalidArgumentError,
    );
  });
});

describe("toDialect", () => {
  test("postgres: translates ? to $n outside literals, comments and dollar quotes", () => {
    const args = [1, 2];
    const out = toDialect("SELECT ?, '?', \"?\", $$ ? $$, /* ? */ ? -- ?", args, "postgres");
    expect(out).toEqual({ sql: "SELECT $1, '?', \"?\", $$ ? $$, /* ? */ $2 -- ?", args: [1, 2] });
    expect(out.args).not.toBe(args);
  });
  test("postgres: maps ?NNN with SQLite's numbering", () => {
    expect(toDialect("DELETE FROM t WHERE a = ?2 AND b = ? AND c = ?1", ["a", "b", "c"], "postgres")).toEqual({
      sql: "DELETE FROM t WHERE a = $1 AND b = $2 AND c = $3",
      args: ["b", "c", "a"],
    });
  });
  test("postgres: leaves native $n statements alone", () => {
    expect(toDialect("DELETE FROM t WHERE a = $1 AND b = '?'", [1], "postgres")).toEqual({
      sql: "DELETE FROM t WHERE a = $1 AND b = '?'",
      args: [1],
    });
  });
  test("postgres: rejects mixing ? with $n", () => {
    expect(() => toDialect("DELETE FROM t WHERE a = $1 AND b = ?", [1, 2], "postgres")).toThrow(
      UnsupportedStatementError,
    );
  });
  test("postgres: rejects a wrong argument count", () => {
    expect(() => toDialect("DELETE FROM t WHERE a = ?", [], "postgres")).toThrow(
      "statement takes 1 bind arguments but 0 were given",
    );
  });
  test("mysql: expands ?NNN into plain ? with arguments reordered", () => {
    expect(toDialect("DELETE FROM t WHERE a = ?2 OR b = ?1 OR c = '?3'", ["x", "y"], "mysql")).toEqual({
      sql: "DELETE FROM t WHERE a = ? OR b = ? OR c = '?3'",
      args: ["y", "x"],
    });
  });
  test("postgres: keeps each $n a token of its own where ? touched a word", () => {
    expect(toDialect("UPDATE t SET a = ?WHERE id=?AND x = y$?", [1, 2, 3], "postgres")).toEqual({
      sql: "UPDATE t SET a = $1 WHERE id=$2 AND x = y$ $3",
      args: [1, 2, 3],
    });
  });
  test("mysql: separates a ? from a word MariaDB would read it with, and leaves SQLite's text as it is", () => {
    expect(toDialect("UPDATE t SET a = ?WHERE id=?AND b = 1", [1, 2], "mysql")).toEqual({
      sql: "UPDATE t SET a = ? WHERE id=? AND b = 1",
      args: [1, 2],
    });
    expect(toDialect("UPDATE t SET a = ?WHERE id=?AND b = 1", [1, 2], "sqlite").sql).toBe(
      "UPDATE t SET a = ?WHERE id=?AND b = 1",
    );
  });
  test.each(["sqlite", "libsql", "postgres", "mysql"] as const)(
    "%s: refuses a second statement it would send unseen",
    (d) => {
      expect(() => toDialect("DELETE FROM t WHERE a = 1; DROP TABLE t", [], d)).toThrow(
        "more than one statement: ';' at offset 25 is followed by more SQL",
      );
      expect(() => toDialect("DELETE FROM t WHERE a = ?; DROP TABLE t", [1], d)).toThrow(UnsupportedStatementError);
      expect(toDialect("DELETE FROM t WHERE a = ';' ; -- bye", [], d).sql).toBe("DELETE FROM t WHERE a = ';' ; -- bye");
    },
  );
  test("postgres: a -- comment ends at a bare \\r, so what follows is SQL there", () => {
    expect(() => toDialect("DELETE FROM t WHERE a = ? --\r; DROP TABLE t", [1], "postgres")).toThrow(
      "more than one statement",
    );
    expect(toDialect("DELETE FROM t WHERE a = ? --\r; DROP TABLE t", [1], "sqlite").sql).toBe(
      "DELETE FROM t WHERE a = ? --\r; DROP TABLE t",
    );
  });
  test.each(["sqlite", "libsql", "mysql"] as const)("%s: returns plain statements unchanged", (d) => {
    const sql = "DELETE FROM t WHERE a = ? AND b = '?'";
    expect(toDialect(sql, [1], d)).toEqual({ sql, args: [1] });
  });
});

describe("rewriteTemplate", () => {
  test("gives the rewritten SQL and, per output argument, the input index or SEQ_ARG", () => {
    expect(rewriteTemplate("UPDATE t SET a = ?2, b = ?1 WHERE id = ?3", "postgres", 3, { inject: true })).toEqual({
      sql: "UPDATE t SET a = $1, b = $2, outbox_seq = $3 WHERE (id = $4) AND outbox_seq < $5",
      args: [1, 0, SEQ_ARG, 2, SEQ_ARG],
    });
    expect(rewriteTemplate("INSERT INTO t (a) VALUES (?)", "mysql", 1, { inject: true }).args).toEqual([
      0,
      SEQ_ARG,
      SEQ_ARG,
    ]);
    expect(rewriteTemplate("INSERT INTO t (a) VALUES (?)", "sqlite", 1, { inject: true, compat: true })).toEqual({
      sql: "INSERT OR IGNORE INTO t (a, outbox_seq) VALUES (?, ?)",
      args: [0, SEQ_ARG],
    });
    expect(rewriteTemplate("DELETE FROM t WHERE a = ?2 OR b = ?1", "mysql", 2, { inject: false })).toEqual({
      sql: "DELETE FROM t WHERE a = ? OR b = ?",
      args: [1, 0],
    });
    expect(rewriteTemplate("DELETE FROM t WHERE a = ?2 OR b = ?1", "sqlite", 2, { inject: false })).toEqual({
      sql: "DELETE FROM t WHERE a = ?2 OR b = ?1",
      args: [0, 1],
    });
  });

  test("bound with any row's arguments, equals what injectOutboxSeq / toDialect give for that row", () => {
    const sql = "UPDATE t SET a = ?, b = ?2 WHERE id = ? -- c";
    for (const d of ["sqlite", "libsql", "postgres", "mysql"] as const) {
      const injected = rewriteTemplate(sql, d, 3, { inject: true });
      const plain = rewriteTemplate(sql, d, 3, { inject: false });
      for (const [args, seq] of [
        [[1, "x", 3], 10],
        [[SEQ, null, new Uint8Array([1])], 11],
      ] as Array<[BindValue[], number]>) {
        expect({ sql: injected.sql, args: bindTemplate(injected, args, seq) }).toEqual(
          injectOutboxSeq(sql, args, seq, d),
        );
        expect({ sql: plain.sql, args: bindTemplate(plain, args, seq) }).toEqual(toDialect(sql, args, d));
      }
    }
  });

  test("refuses what the rewriter refuses, with its reason", () => {
    expect(() => rewriteTemplate("INSERT INTO t (a) SELECT ?", "postgres", 1, { inject: true })).toThrow(
      "INSERT … SELECT is not supported",
    );
    expect(() => rewriteTemplate("INSERT INTO t (a) VALUES (?)", "postgres", 2, { inject: true })).toThrow(
      "statement takes 1 bind arguments but 2 were given",
    );
    expect(() => rewriteTemplate("SELECT 1", "oracle" as Dialect, 0, { inject: false })).toThrow(InvalidArgumentError);
  });
});
