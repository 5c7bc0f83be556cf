import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { decodeArgs, encodeArgs, InvalidArgumentError } from "../src/index.ts";
import { errorOf } from "./support/errors.ts";
import { makeTempDir } from "./support/tmp.ts";

describe("encodeArgs / decodeArgs", () => {
  test("round-trips every value bun:sqlite binds, losslessly", () => {
    const args = [
      "text",
      "",
      'quote " and \\ and \n',
      "emoji 🎉 and a pair \ud83d\ude00",
      0,
      1,
      -1,
      0.1,
      1e-300,
      4503599627370495.5,
      Number.MAX_SAFE_INTEGER,
      -Number.MAX_SAFE_INTEGER,
      Number.MIN_VALUE,
      2n ** 53n + 1n,
      -(2n ** 63n),
      2n ** 63n - 1n,
      true,
      false,
      null,
      new Uint8Array([]),
      new Uint8Array([0, 1, 2, 254, 255]),
      Buffer.from("blob"),
    ];
    const decoded = decodeArgs(encodeArgs(args));
    expect(decoded).toHaveLength(args.length);
    for (let i = 0; i < args.length; i++) {
      const want = args[i];
      if (want instanceof Uint8Array) expect(decoded[i]).toEqual(new Uint8Array(want));
      else expect(decoded[i]).toBe(want as never);
    }
  });

  test("keeps -0 as -0", () => {
    expect(Object.is(decodeArgs(encodeArgs([-0]))[0], -0)).toBe(true);
  });

  test("decodes integral numbers written in exponent form by earlier versions as numbers", () => {
    expect(decodeArgs("[1.152921504606847e+18,-1.1805916207174113e+21]")).toEqual([2 ** 60, -(2 ** 70)]);
    expect(decodeArgs('[1e+21, 12345678901234567890, "x"]')).toEqual([1e21, 12345678901234567890n, "x"]);
  });

  test.each([
    ["2^53", 2 ** 53],
    ["-(2^60)", -(2 ** 60)],
    ["1e21", 1e21],
    ["Number.MAX_VALUE", Number.MAX_VALUE],
  ])("refuses the integral number %s (beyond ±(2^53−1)): pass a bigint instead", (_name, value) => {
    const err = errorOf(() => encodeArgs([1, value], { namespace: "t", file: "/data/t.db" }));
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err).toMatchObject({ code: "E_INVALID_ARG", details: { index: 1, namespace: "t", file: "/data/t.db" } });
    expect(err.message).toContain("argument 1 is the number");
    expect(err.message).toContain("pass a bigint instead");
  });

  test.each([
    ["a lone high surrogate", "\ud800", 0],
    ["a lone low surrogate after text", "ab\udc00", 2],
    ["a high surrogate at the end after a valid pair", "\ud83d\ude00\ud83d", 2],
  ])("refuses a string with %s, naming the argument and why", (_name, value, at) => {
    const err = errorOf(() => encodeArgs(["ok", value]));
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err).toMatchObject({ details: { index: 1 } });
    expect(err.message).toBe(
      `argument 1 is a string with a lone UTF-16 surrogate at index ${at}, which cannot be stored as UTF-8 losslessly`,
    );
  });

  test("decodes a lone surrogate an earlier version stored (JSON escapes it), rather than dropping the row", () => {
    expect(decodeArgs('["\\ud800"]')).toEqual(["\ud800"]);
  });

  test("decodes a bigint inside the safe range as the same number", () => {
    expect(decodeArgs(encodeArgs([5n]))).toEqual([5]);
  });

  test("decodes Python-style JSON, with integers beyond 2^53 as bigint", () => {
    expect(decodeArgs('[1, "a", 2.5, true, null, 12345678901234567890, -9007199254740993]')).toEqual([
      1,
      "a",
      2.5,
      true,
      null,
      12345678901234567890n,
      -9007199254740993n,
    ]);
    expect(decodeArgs('[ "digits 12345678901234567890 in text" , 1e20 ]')).toEqual([
      "digits 12345678901234567890 in text",
      1e20,
    ]);
  });

  test("round-trips values through a real SQLite bind and read", () => {
    const tmp = makeTempDir();
    try {
      const db = new Database(tmp.file("b.db"), { safeIntegers: true });
      db.run("CREATE TABLE t (a, b, c, d, e)");
      const args = decodeArgs(encodeArgs(["x", 2n ** 62n, 0.5, new Uint8Array([9, 8]), null]));
      db.query("INSERT INTO t VALUES (?, ?, ?, ?, ?)").run(...(args as never[]));
      expect(db.query("SELECT * FROM t").get()).toEqual({
        a: "x",
        b: 2n ** 62n,
        c: 0.5,
        d: new Uint8Array([9, 8]),
        e: null,
      });
      db.close();
    } finally {
      tmp.cleanup();
    }
  });

  test.each([
    ["a Date", new Date()],
    ["a plain object", { a: 1 }],
    ["an array", [1]],
    ["a function", () => 1],
    ["undefined", undefined],
    ["a symbol", Symbol("s")],
    ["NaN", NaN],
    ["Infinity", Infinity],
    ["-Infinity", -Infinity],
    ["a bigint beyond int64", 2n ** 63n],
    ["an Int16Array", new Int16Array(2)],
    ["an ArrayBuffer", new ArrayBuffer(2)],
  ])("rejects %s naming the argument index, namespace and file", (_name, value) => {
    const err = errorOf(() => encodeArgs(["ok", value], { namespace: "orders", file: "/data/orders.db" }));
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err).toMatchObject({
      code: "E_INVALID_ARG",
      details: { index: 1, namespace: "orders", file: "/data/orders.db" },
    });
    expect(err.message).toContain("argument 1");
    expect(err.message).toContain('namespace "orders"');
    expect(err.message).toContain("/data/orders.db");
  });

  test.each([
    ["not JSON", "INSERT"],
    ["an object", '{"a": 1}'],
    ["Python NaN", "[NaN]"],
    ["Python Infinity", "[1, Infinity]"],
    ["Python True", "[True]"],
    ["a nested array", "[[1]]"],
    ["an unknown object", '[{"x": 1}]'],
    ["bad base64", '[{"$b64": "!!"}]'],
    ["trailing data", "[1] 2"],
    ["a big-int payload with garbage", "[12345678901234567890, oops]"],
    ["a big-int payload with an invalid string escape", '["\\x", 12345678901234567890]'],
    ["a big-int payload with a raw newline in a string", '["a\nb", 12345678901234567890]'],
    ["a number that overflows to Infinity", "[1e400]"],
  ])("decodeArgs throws InvalidArgumentError 'undecodable' for %s", (_name, payload) => {
    expect(() => decodeArgs(payload)).toThrow(InvalidArgumentError);
    expect(() => decodeArgs(payload)).toThrow(/undecodable/);
  });
});
