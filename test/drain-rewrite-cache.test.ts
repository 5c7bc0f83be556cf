import { describe, expect, test } from "bun:test";
import { RewriteCache } from "../src/drain/rewrite-cache.ts";
import { UnsupportedStatementError } from "../src/errors.ts";
import { injectOutboxSeq, toDialect } from "../src/sql/rewrite.ts";
import type { BindValue, Dialect } from "../src/vocabulary.ts";
import { errorOf } from "./support/errors.ts";

const STATEMENTS: Array<[string, number]> = [
  ["INSERT INTO t (a, b, c) VALUES (?, ?, ?)", 3],
  ['INSERT INTO "odd table" ("x", y) VALUES (?, \'lit ? eral\', ?)', 2],
  ["UPDATE t SET a = ?, b = ? WHERE id = ?", 3],
  ["UPDATE t SET a = ? WHERE id = ? AND note = 'x?'", 2],
  ["UPDATE t SET n = n + ?", 1],
  ["INSERT INTO t (a, b) VALUES (?2, ?1)", 2],
  ["INSERT INTO t (a, b) VALUES (?, ?) -- trailing ? comment", 2],
];
const VALUES: BindValue[] = [
  null,
  0,
  7,
  -1.5,
  "s",
  "",
  "\u0000sqloutbox-arg-0",
  2n ** 60n,
  true,
  new Uint8Array([1, 2]),
];
const pick = (i: number) => VALUES[(i * 7 + 3) % VALUES.length]!;

describe("rewrite cache", () => {
  for (const dialect of ["sqlite", "libsql", "postgres", "mysql"] as Dialect[]) {
    for (const inject of [true, false]) {
      test(`reproduces the rewriter exactly (${dialect}, ${inject ? "injected" : "placeholders only"})`, () => {
        const cache = new RewriteCache(dialect, false);
        for (let row = 0; row < 40; row++) {
          for (const [sql, n] of STATEMENTS) {
            const seq = 100 + row;
            // Some arguments equal the seq on purpose: the template must not confuse them.
            const args = Array.from({ length: n }, (_, i) => (i === 0 && row % 3 === 0 ? seq : pick(row + i)));
            const direct = () => (inject ? injectOutboxSeq(sql, args, seq, dialect) : toDialect(sql, args, dialect));
            let expected: unknown;
            try {
              expected = direct();
            } catch (error) {
              expect(() => cache.rewrite(sql, args, seq, inject)).toThrow((error as Error).constructor as never);
              continue;
            }
            expect(cache.rewrite(sql, args, seq, inject)).toEqual(expected as never);
          }
        }
      });
    }
  }

  test("a refused statement keeps being refused with the rewriter's UnsupportedStatementError", () => {
    const cache = new RewriteCache("postgres", false);
    for (let i = 0; i < 3; i++) {
      const caught = errorOf<UnsupportedStatementError>(() =>
        cache.rewrite("INSERT INTO t (a) SELECT ?", [1], 5 + i, true),
      );
      expect(caught).toBeInstanceOf(UnsupportedStatementError);
      expect(caught.code).toBe("E_UNSUPPORTED_STATEMENT");
    }
  });
});
