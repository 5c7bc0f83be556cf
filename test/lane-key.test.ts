// The lane of a key is FNV-1a (32 bits) over its UTF-8 bytes, modulo the lane count: the same on
// every host. The vectors were computed by a second implementation (Python) and include FNV's own.
import { describe, expect, test } from "bun:test";
import { InvalidArgumentError } from "../src/errors.ts";
import { keyHash, laneKeyText, laneOf, MAX_KEY_LENGTH } from "../src/lane-key.ts";

describe("lane keys", () => {
  test.each([
    ["a", 0xe40c292c, 44, 5],
    ["foobar", 0xbf9cf968, 40, 0],
    ["customer-42", 0xfe68adbe, 62, 0],
    ["42", 0x87e38583, 3, 6],
    ["ключ", 0x95c4e9e1, 33, 4],
    ["🙂", 0x57a37a4b, 11, 3],
    ["键值", 0x3328bb51, 17, 1],
    ["aé中🙂z", 0xe33c268d, 13, 3],
    ["x".repeat(256), 0x46b491c5, 5, 3],
  ])("%p hashes to %d: lane %d of 64, %d of 7", (key, hash, of64, of7) => {
    expect(keyHash(key)).toBe(hash);
    expect(laneOf(key, 64)).toBe(of64);
    expect(laneOf(key, 7)).toBe(of7);
    expect(laneOf(key, 1)).toBe(0);
  });

  test("a lone surrogate (never stored: refused at the door) hashes as U+FFFD, as a UTF-8 encoder writes it", () => {
    expect(keyHash("x\ud800y")).toBe(0x66b4d003);
    expect(keyHash("x\ufffdy")).toBe(0x66b4d003);
  });

  test("a row without a key has no lane", () => {
    expect(laneOf(null, 64)).toBeNull();
  });

  test("a key is a string or a safe integer; an integer is stored as its decimal text, so 42 and '42' are one key", () => {
    expect(laneKeyText("customer-42", "orders")).toBe("customer-42");
    expect(laneKeyText(42, "orders")).toBe("42");
    expect(laneKeyText(-7, "orders")).toBe("-7");
    expect(laneKeyText("x".repeat(MAX_KEY_LENGTH), "orders")).toHaveLength(MAX_KEY_LENGTH);
  });

  test.each([
    [1.5, "must be a string or a safe integer, got 1.5"],
    [2 ** 53, "must be a string or a safe integer, got 9007199254740992"],
    [Number.NaN, "must be a string or a safe integer, got NaN"],
    [null, "must be a string or a safe integer, got null"],
    [{ id: 1 }, "must be a string or a safe integer, got object"],
    [10n, "must be a string or a safe integer, got bigint"],
    ["", "is empty"],
    ["x".repeat(MAX_KEY_LENGTH + 1), `is ${MAX_KEY_LENGTH + 1} characters long; at most ${MAX_KEY_LENGTH}`],
    ["a\uD800b", "lone surrogate"],
  ])("refuses %p at the door, naming the table", (key, message) => {
    let error: unknown;
    try {
      laneKeyText(key, 'table "orders"');
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).code).toBe("E_INVALID_ARG");
    expect((error as Error).message).toStartWith('the key of a push into table "orders" ');
    expect((error as Error).message).toContain(message);
  });
});
