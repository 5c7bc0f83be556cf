import { describe, expect, test } from "bun:test";
import { UnsupportedStatementError } from "../src/errors.ts";
import { identName, isKeyword, tokenize } from "../src/sql/lexer.ts";
import type { Dialect } from "../src/vocabulary.ts";
import { errorOf } from "./support/errors.ts";

/** Token kinds (with ?NNN numbers and depth when non-zero) as one readable line. */
function kinds(sql: string, d: Dialect): string {
  return tokenize(sql, d)
    .map((t) => `${t.kind}${t.num ? t.num : ""}${t.depth ? `@${t.depth}` : ""}`)
    .join(" ");
}

describe("tokenize", () => {
  test.each([
    ["sqlite", "'a''b?' \"c\"\"d?\" [e?] `f``g?`", "string quoted quoted quoted"],
    ["sqlite", "? ?12 :x @y $z #w", "param param12 named named named named"],
    ["sqlite", "-- ? )\n/* ? ( */ x", "word"],
    ["sqlite", "f(a, (b)) ;", "word ( word@1 ,@1 (@1 word@2 )@1 ) ;"],
    ["sqlite", "x'0a' 1.5e3 .5 a.b", "word string number number word . word"],
    ["libsql", "[a b] ?", "quoted param"],
    ["postgres", "E'a\\'?' e'\\\\' 'b\\' ?", "string string string param"],
    ["postgres", "$$x?$$ $t$ ? $t$ $1 $", "string string named op"],
    ["postgres", "/* a /* nested ? */ still ? */ ?", "param"],
    ["postgres", "x::int a[?]", "word op op word word op param op"],
    ["mysql", "'a\\'?' \"b\\\"?\" `c``?`", "string string quoted"],
    ["mysql", "# c?\n-- d?\n5--1 ?", "number op op number param"],
    ["mysql", "@v @@x $y /*+ hint ? */ ?", "op word op op word word param"],
    // A line comment ends where the engine ends it: PostgreSQL at \n or a bare \r, the others at \n only.
    ["postgres", "a --\r b", "word word"],
    ["postgres", "a -- ?\r\n b", "word word"],
    ["sqlite", "a --\r b\n c", "word word"],
    ["mysql", "a -- \r b\n c", "word word"],
    ["mysql", "a #\r b\n c", "word word"],
    // MariaDB: `--` before DEL (a control character) starts a comment too; before a letter it does not.
    ["mysql", "a --\x7fb\n c", "word word"],
    ["mysql", "a --b", "word op op word"],
    // PostgreSQL continues a string on a later line; an E'…' string keeps its escapes there.
    ["postgres", "E'a'\n'b\\'c' ?", "string param"],
    ["postgres", "E'a'\r'b\\'c' ?", "string param"],
    ["postgres", "e'a' -- note\n  'b\\'c'\n'd' ?", "string param"],
    ["postgres", "E'a' 'b\\' ?", "string string param"], // no newline: no continuation
    ["postgres", "E'a' /* c */\n'b\\' ?", "string string param"], // a block comment breaks it
    ["postgres", "'a'\n'b\\' ?", "string string param"], // a standard string has no escapes to keep
    // PostgreSQL has no backtick quoting; MariaDB executes /*M!…*/ but not /*m!…*/.
    ["postgres", "`a?`", "op word param op"],
    ["mysql", "a /*m! b */ c", "word word"],
    // SQLite refuses `::` itself: `::int` binds nothing, unlike `:int`.
    ["sqlite", "x::int :a", "word op op word named"],
  ] as const)("%s: %p", (d, sql, want) => {
    expect(kinds(sql, d)).toBe(want);
  });

  test("reads keywords case-insensitively and unquotes identifiers", () => {
    const sql = 'InSeRt "we""ird" [b] `c``d`';
    const [kw, a, b, c] = tokenize(sql, "sqlite");
    expect(isKeyword(sql, kw, "INSERT")).toBe(true);
    expect(isKeyword(sql, kw, "INSERTX")).toBe(false);
    expect([a, b, c].map((t) => identName(sql, t!))).toEqual(['we"ird', "b", "c`d"]);
  });

  test.each([
    ["sqlite", "'abc", "unterminated string literal starting at offset 0"],
    ["sqlite", 'x "abc', "unterminated quoted identifier starting at offset 2"],
    ["sqlite", "[abc", "unterminated quoted identifier starting at offset 0"],
    ["sqlite", "a /* b", "unterminated block comment starting at offset 2"],
    ["postgres", "/* /* */", "unterminated block comment starting at offset 0"],
    ["postgres", "$x$ abc", "unterminated dollar-quoted string starting at offset 0"],
    ["mysql", "'it\\'", "unterminated string literal starting at offset 0"],
    ["mysql", "a /*! b */", "MySQL executable comment /*!…*/ at offset 2 is not supported"],
    ["mysql", "a /*M! b */", "MySQL executable comment /*M!…*/ at offset 2 is not supported"],
    ["mysql", "a /*M!100507 b */", "MySQL executable comment /*M!…*/ at offset 2 is not supported"],
    ["sqlite", "a\0b", "NUL character at offset 1"],
    ["postgres", "'\0'", "NUL character at offset 1"],
    ["mysql", "a -- \0", "NUL character at offset 5"],
    ["postgres", "E'a'\n'b\\'", "unterminated string literal starting at offset 5"],
    ["sqlite", "(a", "unbalanced parentheses: '(' at offset 0 is never closed"],
    ["sqlite", "a)", "unbalanced parentheses: ')' at offset 1 has no matching '('"],
    ["sqlite", "?40000", "placeholder ?40000 at offset 0 is out of range 1…32766"],
  ] as const)("%s: rejects %p", (d, sql, reason) => {
    const error = errorOf<UnsupportedStatementError>(() => tokenize(sql, d));
    expect(error).toBeInstanceOf(UnsupportedStatementError);
    expect(error.reason).toBe(reason);
  });
});
