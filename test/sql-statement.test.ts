import { describe, expect, test } from "bun:test";
import { InvalidArgumentError, InvalidStatementError, UnsupportedStatementError } from "../src/errors.ts";
import { checkInjectable, checkStatement, statementCount, validateStatement } from "../src/sql/statement.ts";
import type { Dialect } from "../src/vocabulary.ts";
import { errorOf } from "./support/errors.ts";

/** The reason of the InvalidStatementError `fn` throws. */
function reasonOf(fn: () => unknown): string {
  const error = errorOf<InvalidStatementError>(fn);
  expect(error).toBeInstanceOf(InvalidStatementError);
  expect(error.code).toBe("E_INVALID_STATEMENT");
  return error.reason;
}

describe("validateStatement accepts one statement and returns its argument count", () => {
  test.each([
    ["INSERT INTO t (a, b) VALUES (?, ?)", 2],
    ["insert into t (a) values (?);", 1],
    ["UPDATE t SET status = 'shipped' WHERE id = ?;  -- done\n", 1],
    ["DELETE FROM t WHERE id = ? /* trailing */", 1],
    ["REPLACE INTO t (a) VALUES (?)", 1],
    ["INSERT INTO t (a) VALUES (?) ON CONFLICT (a) DO UPDATE SET a = excluded.a", 1],
    ["WITH x AS (SELECT ? AS v) INSERT INTO t (a) SELECT v FROM x", 1],
    ["SELECT 1", 0],
    ["CREATE TABLE t (a INTEGER, b TEXT)", 0],
    ["ALTER TABLE t ADD COLUMN c TEXT", 0],
    ["DROP TABLE IF EXISTS t", 0],
    ["  \n-- leading comment\nINSERT INTO t (a) VALUES ('it''s ?; -- no')", 0],
    ["INSERT INTO t (a, b, c) VALUES (?2, ?1, ?2)", 2],
    ["SELECT ?, ?3", 3],
    ["SELECT x::int FROM t", 0],
  ] as const)("%p takes %p", (sql, args) => {
    expect(validateStatement(sql, null)).toBe(args);
    for (const d of ["sqlite", "libsql", "postgres", "mysql"] as const) expect(validateStatement(sql, d)).toBe(args);
  });
});

describe("validateStatement refuses", () => {
  test.each([
    ["empty text", "", "empty statement"],
    ["whitespace only", " \n\t ", "empty statement"],
    ["a comment only", "-- nothing\n/* at all */", "empty statement (only comments)"],
    ["a lone semicolon", " ; ", "empty statement before ';' at offset 1"],
    ["two semicolons", "UPDATE t SET a = 1;;", "empty statement before ';' at offset 19"],
    [
      "two statements",
      "UPDATE t SET a = 1; DELETE FROM t",
      "more than one statement: ';' at offset 18 is followed by more SQL",
    ],
    ["a second statement behind a comment", "SELECT 1; -- x\nSELECT 2", "more than one statement"],
    ["text that is not a statement", "hello world", "'hello' at offset 0 does not start a statement"],
    ["a quoted first word", '"INSERT" INTO t (a) VALUES (1)', `'"INSERT"' at offset 0 does not start a statement`],
    ["a statement in parentheses", "(SELECT 1)", "'(' at offset 0 does not start a statement"],
    ["a transaction statement", "COMMIT", "COMMIT steers the connection or its transaction"],
    ["a session statement", "set autocommit = 1", "SET steers the connection or its transaction"],
    ["an unterminated literal", "INSERT INTO t (a) VALUES ('x)", "unterminated string literal starting at offset 26"],
    ["a NUL character", "DELETE FROM t\0 WHERE id = 1", "NUL character at offset 13"],
    ["a lone surrogate", "INSERT INTO t (a) VALUES ('\ud800')", "lone UTF-16 surrogate"],
  ] as const)("%s", (_name, sql, reason) => {
    for (const d of [null, "sqlite", "postgres", "mysql"] as const)
      expect(reasonOf(() => validateStatement(sql, d))).toContain(reason);
  });

  test.each([
    ["sqlite", ":name"],
    ["sqlite", "@name"],
    ["sqlite", "$name"],
    ["postgres", "$1"],
  ] as const)("%s: the named placeholder %s", (d, p) => {
    const reason = `named or numbered-dollar placeholder ${p} at offset 26 is not supported`;
    expect(reasonOf(() => validateStatement(`INSERT INTO t (a) VALUES (${p})`, d))).toContain(reason);
    expect(reasonOf(() => validateStatement(`INSERT INTO t (a) VALUES (${p})`, null))).toContain(reason);
  });

  test("mysql: @name is a user variable there, not a placeholder", () => {
    expect(validateStatement("UPDATE t SET a = @v + ?", "mysql")).toBe(1);
  });

  test("a string MySQL reads as one literal but the others as two statements (every dialect's lexer decides)", () => {
    const sql = "INSERT INTO t (a) VALUES ('x\\'; DROP TABLE victim; --')";
    expect(reasonOf(() => validateStatement(sql, null))).toBe(
      "more than one statement: ';' at offset 30 is followed by more SQL (as sqlite reads it; set the producer's dialect if the target is another engine)",
    );
    expect(reasonOf(() => validateStatement(sql, "postgres"))).toBe(
      "more than one statement: ';' at offset 30 is followed by more SQL",
    );
    expect(validateStatement(sql, "mysql")).toBe(0); // the producer said where it goes: one string there
  });

  test.each([
    ["postgres ends a -- comment at a bare \\r", "SELECT 1 --\r; DROP TABLE victim", "as postgres reads it"],
    ["mysql reads # as a comment, the others do not", "SELECT 1 # ; DROP TABLE victim", "as sqlite reads it"],
    ["mysql reads -- before a letter as two minus signs", "SELECT 1 --x; DROP TABLE victim", "as mysql reads it"],
    ["postgres has no backtick quoting", "SELECT `a; DROP TABLE victim; b`", "as postgres reads it"],
  ])("%s: a second statement any dialect sees is refused", (_name, sql, who) => {
    const reason = reasonOf(() => validateStatement(sql, null));
    expect(reason).toStartWith("more than one statement");
    expect(reason).toContain(who);
  });

  test("dialects that read different placeholder counts", () => {
    expect(reasonOf(() => validateStatement("SELECT $$?$$", null))).toBe(
      "the SQL dialects read different placeholder counts (sqlite: 1, postgres: 0, mysql: 1): a literal or comment means different things to them; set the producer's dialect",
    );
    expect(validateStatement("SELECT $$?$$", "postgres")).toBe(0);
    expect(reasonOf(() => validateStatement("UPDATE t SET a = 1 --\r, b = ?", null))).toContain(
      "(sqlite: 0, postgres: 1, mysql: 0)",
    );
  });

  test("a MySQL executable comment, even when the other dialects read it as a comment", () => {
    expect(reasonOf(() => validateStatement("SELECT 1 /*! ; DROP TABLE victim */", null))).toBe(
      "MySQL executable comment /*!…*/ at offset 9 is not supported",
    );
    expect(reasonOf(() => validateStatement("SELECT 1 /*M!100000 , 2 */", null))).toContain(
      "MySQL executable comment /*M!…*/",
    );
    expect(validateStatement("SELECT 1 /*! , 2 */", "postgres")).toBe(0);
  });

  test("text no dialect can read, with each dialect's reason", () => {
    expect(reasonOf(() => validateStatement("SELECT 'x", null))).toBe(
      "no SQL dialect can read it: sqlite: unterminated string literal starting at offset 7; postgres: unterminated string literal starting at offset 7; mysql: unterminated string literal starting at offset 7",
    );
  });

  test("a dialect's lexer that fails is outvoted only by the others agreeing", () => {
    // MySQL reads 'a\' as unterminated; SQLite and PostgreSQL agree on one statement, no placeholder.
    expect(validateStatement("SELECT 'a\\'", null)).toBe(0);
  });

  test("an unknown dialect is an InvalidArgumentError", () => {
    expect(() => validateStatement("SELECT 1", "oracle" as Dialect)).toThrow(InvalidArgumentError);
  });
});

describe("checkStatement", () => {
  test("refuses a wrong argument count, naming the table", () => {
    const error = errorOf(() => checkStatement("UPDATE t SET a = '?' WHERE id = ?", 2, null, "orders"));
    expect(error).toBeInstanceOf(InvalidStatementError);
    expect(error).toMatchObject({
      code: "E_INVALID_STATEMENT",
      table: "orders",
      reason:
        "statement takes 1 bind arguments (1 more '?' inside string literals, identifiers or comments do not count) but 2 were given",
    });
    expect(error.message).toBe(
      `invalid statement for table "orders": statement takes 1 bind arguments (1 more '?' inside string literals, identifiers or comments do not count) but 2 were given`,
    );
  });

  test("names the table for every other refusal too", () => {
    expect(() => checkStatement("SELECT 1; SELECT 2", 0, "sqlite", "t")).toThrow(
      `invalid statement for table "t": more than one statement`,
    );
    expect(() => checkStatement("SELECT 1; SELECT 2", 0, "sqlite")).toThrow(
      "invalid statement: more than one statement",
    );
  });

  test("accepts the right count, ?NNN counted the SQLite way", () => {
    checkStatement("INSERT INTO t (a, b) VALUES (?2, ?1)", 2, null, "t");
    expect(() => checkStatement("INSERT INTO t (a, b) VALUES (?2, ?1)", 1, null, "t")).toThrow(
      "statement takes 2 bind arguments but 1 were given",
    );
  });
});

describe("checkInjectable", () => {
  test("refuses what injectOutboxSeq refuses, naming the dialect", () => {
    expect(reasonOf(() => checkInjectable("DELETE FROM t WHERE id = ?", 1, null))).toBe(
      "inject_outbox_seq cannot rewrite it for sqlite: only INSERT and UPDATE can be rewritten, got 'DELETE' at offset 0",
    );
    // Only MySQL's rewrite (an INSERT … SELECT) cannot carry an aggregate in VALUES.
    const sql = "INSERT INTO t (a, b) VALUES (?, max(?))";
    expect(reasonOf(() => checkInjectable(sql, 2, null))).toContain(
      "inject_outbox_seq cannot rewrite it for mysql: the aggregate function max() in VALUES",
    );
    checkInjectable(sql, 2, "postgres");
    checkInjectable("UPDATE t SET status = 'shipped' WHERE id = ?", 1, null);
  });
});

describe("statementCount", () => {
  test.each([
    ["sqlite", "", 0],
    ["sqlite", "-- only a comment", 0],
    ["sqlite", ";;", 0],
    ["sqlite", "SELECT 1", 1],
    ["sqlite", "SELECT 1; -- done", 1],
    ["sqlite", "SELECT 1; SELECT 2;", 2],
    ["sqlite", "SELECT ';'; SELECT \";\"", 2],
    ["sqlite", "SELECT (1; 2", 2], // parentheses are the engine's business, statement boundaries ours
    ["sqlite", "SELECT 1 --\r; SELECT 2", 1],
    ["postgres", "SELECT 1 --\r; SELECT 2", 2],
    ["postgres", "SELECT $x$;$x$", 1],
    ["mysql", "SELECT 'a\\'; b'", 1],
    ["postgres", "SELECT 'a\\'; SELECT 'b'", 2],
    ["mysql", "SELECT 1 # ; SELECT 2", 1],
  ] as const)("%s: %p holds %p", (d, sql, n) => {
    expect(statementCount(sql, d)).toBe(n);
  });

  test.each([
    ["sqlite", "SELECT 'x"],
    ["postgres", "SELECT 1 /* x"],
    ["mysql", "SELECT 1 /*!50000 ; DROP TABLE t */"],
    ["sqlite", "SELECT 1\0; DROP TABLE t"],
  ] as const)("%s: throws UnsupportedStatementError for %p (its boundaries are uncertain)", (d, sql) => {
    expect(() => statementCount(sql, d)).toThrow(UnsupportedStatementError);
  });
});
