import { describe, expect, test } from "bun:test";
import { InvalidArgumentError } from "../src/errors.ts";
import { quoteIdent } from "../src/sql/ident.ts";
import { dropSchemaSql, maxSeqSql, schemaSql } from "../src/sql/schema.ts";
import type { Dialect } from "../src/vocabulary.ts";
import { errorOf } from "./support/errors.ts";

describe("schemaSql", () => {
  test.each([
    [
      "sqlite",
      [
        'ALTER TABLE "orders" ADD COLUMN outbox_seq INTEGER NOT NULL DEFAULT 0',
        'CREATE UNIQUE INDEX IF NOT EXISTS "idx_orders_outbox_seq" ON "orders" (outbox_seq) WHERE outbox_seq != 0',
      ],
    ],
    [
      "libsql",
      [
        'ALTER TABLE "orders" ADD COLUMN outbox_seq INTEGER NOT NULL DEFAULT 0',
        'CREATE UNIQUE INDEX IF NOT EXISTS "idx_orders_outbox_seq" ON "orders" (outbox_seq) WHERE outbox_seq != 0',
      ],
    ],
    [
      "postgres",
      [
        'ALTER TABLE "orders" ADD COLUMN IF NOT EXISTS outbox_seq BIGINT NOT NULL DEFAULT 0',
        'CREATE UNIQUE INDEX IF NOT EXISTS "idx_orders_outbox_seq" ON "orders" (outbox_seq) WHERE outbox_seq != 0',
      ],
    ],
    [
      "mysql",
      [
        "ALTER TABLE `orders` ADD COLUMN outbox_seq BIGINT NULL DEFAULT NULL",
        "CREATE UNIQUE INDEX `idx_orders_outbox_seq` ON `orders` (outbox_seq)",
      ],
    ],
  ] as const)("%s: adds the column and the unique index", (d, want) => {
    expect(schemaSql(["orders"], d)).toEqual([...want]);
  });

  test("emits column then index for every table, in order", () => {
    expect(schemaSql(["a", "b"], "sqlite").map((s) => s.split(" ").slice(0, 3).join(" "))).toEqual([
      'ALTER TABLE "a"',
      "CREATE UNIQUE INDEX",
      'ALTER TABLE "b"',
      "CREATE UNIQUE INDEX",
    ]);
  });
});

describe("dropSchemaSql", () => {
  test.each([
    ["sqlite", ['DROP INDEX IF EXISTS "idx_orders_outbox_seq"', 'ALTER TABLE "orders" DROP COLUMN outbox_seq']],
    [
      "postgres",
      ['DROP INDEX IF EXISTS "idx_orders_outbox_seq"', 'ALTER TABLE "orders" DROP COLUMN IF EXISTS outbox_seq'],
    ],
    ["mysql", ["DROP INDEX `idx_orders_outbox_seq` ON `orders`", "ALTER TABLE `orders` DROP COLUMN outbox_seq"]],
  ] as const)("%s: drops the index, then the column", (d, want) => {
    expect(dropSchemaSql(["orders"], d)).toEqual([...want]);
  });
});

describe("maxSeqSql", () => {
  test.each([
    ["sqlite", 'SELECT MAX(outbox_seq) FROM "my ""t"""'],
    ["postgres", 'SELECT MAX(outbox_seq) FROM "my ""t"""'],
    ["mysql", 'SELECT MAX(outbox_seq) FROM `my "t"`'],
  ] as const)("%s: quotes the table", (d, want) => {
    expect(maxSeqSql('my "t"', d)).toBe(want);
  });
});

describe("quoteIdent", () => {
  test.each([
    ["sqlite", 'a"b', '"a""b"'],
    ["libsql", "a`b", '"a`b"'],
    ["postgres", 'We"ird', '"We""ird"'],
    ["mysql", "a`b", "`a``b`"],
    ["mysql", 'a"b', '`a"b`'],
  ] as const)("%s: quotes %p as %p", (d, name, want) => {
    expect(quoteIdent(name, d)).toBe(want);
  });

  const bad: Array<[Dialect, string, string]> = [
    ["sqlite", "", "it is empty"],
    ["postgres", "a\0b", "it contains a NUL character"],
    ["mysql", "a\uD800", "unpaired UTF-16 surrogate"],
    ["postgres", "x".repeat(64), "longer than 63 bytes"],
    ["postgres", "é".repeat(32), "longer than 63 bytes"],
    ["mysql", "x".repeat(65), "longer than 64 characters"],
    ["mysql", "trailing ", "cannot end with a space"],
    ["mysql", "emoji😀", "outside the Basic Multilingual Plane"],
  ];
  test.each(bad)("%s: rejects %p", (d, name, why) => {
    const error = errorOf<InvalidArgumentError>(() => quoteIdent(name, d));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error.code).toBe("E_INVALID_ARG");
    expect(error.message).toContain(why);
  });

  test("accepts the longest names each dialect keeps intact", () => {
    expect(quoteIdent("x".repeat(63), "postgres")).toBe(`"${"x".repeat(63)}"`);
    expect(quoteIdent("x".repeat(64), "mysql")).toBe(`\`${"x".repeat(64)}\``);
    expect(quoteIdent("x".repeat(1000), "sqlite")).toHaveLength(1002);
  });

  test("schemaSql rejects a table whose index name would be too long", () => {
    const table = "t".repeat(49); // idx_ + 49 + _outbox_seq = 64 bytes
    expect(() => schemaSql([table], "postgres")).toThrow(`idx_${table}_outbox_seq`);
    expect(schemaSql([table], "mysql")).toHaveLength(2);
  });
});
