import { InvalidArgumentError } from "./errors.ts";

/*
 * A row's key says which lane of its table it is delivered in: rows of one key keep their order,
 * rows of different keys need not wait for each other. The producer checks the key at the door
 * and stores its text; the drain maps the text to a lane. The mapping must be the same on every
 * host, platform and version, or two drains of a fleet would order one key two ways: it is
 * FNV-1a (32 bits) over the key's UTF-8 bytes, modulo the table's lane count — documented, with
 * test vectors, in docs/delivery.md.
 */

/** The longest key, in UTF-16 code units (a key is an identifier — a customer, an account — not data). */
export const MAX_KEY_LENGTH = 256;

/** What a producer may give as a key: a string, or a safe integer (stored as its decimal text). */
export type LaneKey = string | number;

/**
 * The stored text of a key given at push: a string of 1 to MAX_KEY_LENGTH well-formed characters
 * as it is, a safe integer as its decimal text (so `42` and `"42"` are one key). Anything else
 * throws InvalidArgumentError naming `where` (the table, say).
 */
export function laneKeyText(key: unknown, where: string): string {
  if (typeof key === "number") {
    if (Number.isSafeInteger(key)) return String(key);
    throw new InvalidArgumentError(`the key of a push into ${where} must be a string or a safe integer, got ${key}`);
  }
  if (typeof key !== "string")
    throw new InvalidArgumentError(
      `the key of a push into ${where} must be a string or a safe integer, got ${key === null ? "null" : typeof key}`,
    );
  if (key.length === 0) throw new InvalidArgumentError(`the key of a push into ${where} is empty`);
  if (key.length > MAX_KEY_LENGTH)
    throw new InvalidArgumentError(
      `the key of a push into ${where} is ${key.length} characters long; at most ${MAX_KEY_LENGTH} (a key names an entity, it is not data)`,
    );
  if (!key.isWellFormed())
    throw new InvalidArgumentError(`the key of a push into ${where} holds a lone surrogate (not well-formed UTF-16)`);
  return key;
}

/**
 * FNV-1a, 32 bits, over the UTF-8 bytes of `text` (a stored key). The bytes are made here, code
 * unit by code unit, rather than by a TextEncoder: the drain hashes every row's key, and a call
 * into the encoder costs more than hashing a short key (a lone surrogate counts as U+FFFD, as an
 * encoder writes it).
 */
export function keyHash(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    let c = text.charCodeAt(i);
    if (c < 0x80) {
      hash = Math.imul(hash ^ c, 0x01000193) >>> 0;
      continue;
    }
    if (c >= 0xd800 && c <= 0xdfff) {
      const next = text.charCodeAt(i + 1);
      if (c <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
        const point = 0x10000 + ((c - 0xd800) << 10) + (next - 0xdc00);
        i++;
        hash = fnvByte(hash, 0xf0 | (point >> 18));
        hash = fnvByte(hash, 0x80 | ((point >> 12) & 0x3f));
        hash = fnvByte(hash, 0x80 | ((point >> 6) & 0x3f));
        hash = fnvByte(hash, 0x80 | (point & 0x3f));
        continue;
      }
      c = 0xfffd;
    }
    if (c < 0x800) hash = fnvByte(hash, 0xc0 | (c >> 6));
    else {
      hash = fnvByte(hash, 0xe0 | (c >> 12));
      hash = fnvByte(hash, 0x80 | ((c >> 6) & 0x3f));
    }
    hash = fnvByte(hash, 0x80 | (c & 0x3f));
  }
  return hash;
}

/** One FNV-1a step: `hash` with the byte `b` folded in. */
function fnvByte(hash: number, b: number): number {
  return Math.imul(hash ^ b, 0x01000193) >>> 0;
}

/** The lane (0 … lanes − 1) of a row with the stored key `text`; a row without a key has none (null). */
export function laneOf(text: string | null, lanes: number): number | null {
  return text === null ? null : keyHash(text) % lanes;
}
