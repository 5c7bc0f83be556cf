import { InvalidArgumentError } from "../errors.ts";
import type { BindValue } from "../vocabulary.ts";

/*
 * Payload encoding: a JSON array of the bind arguments, one element per argument.
 *
 *   string, boolean, null  → JSON as is
 *   number                 → JSON number; -0 is written `-0.0` so it reads back as -0
 *   bigint                 → a bare JSON integer; beyond ±(2^53−1) it reads back as a bigint,
 *                            inside that range as a number (the same SQL INTEGER value)
 *   Uint8Array (Buffer)    → {"$b64": "<base64>"}: objects are never valid arguments, so any
 *                            object in a payload is such a tag and cannot be confused with data
 *
 * Rejected at push time: NaN and ±Infinity (SQLite stores NaN as NULL; JSON has no literal),
 * integral numbers beyond ±(2^53−1) (a double that large has already lost the integer it was
 * meant to be: pass a bigint), strings holding a lone UTF-16 surrogate (UTF-8 cannot carry it:
 * every engine would store U+FFFD), bigints outside signed 64-bit, Date, plain objects, arrays,
 * functions, symbols, undefined, and typed arrays other than Uint8Array.
 *
 * Decoding is tolerant of Python's `json.dumps` output (`[1, "a"]`, any whitespace); integers
 * beyond 2^53 decode to bigint so values written by Python survive, and numbers in exponent form
 * (`1e+21`, as earlier versions wrote large integral numbers) decode to numbers. Python's non-standard `NaN`,
 * `Infinity` and `-Infinity` literals are treated as undecodable, like anything else that is not
 * a flat array of the values above: the drain dead-letters such a row instead of guessing.
 */

const UNSAFE_DIGITS = /\d{16}/; // only integers of 16+ digits can exceed 2^53
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/** Where an argument came from, for error messages. */
export interface PayloadLocation {
  namespace?: string;
  file?: string;
}

/** Encodes bind arguments as a payload string; throws InvalidArgumentError naming the argument index. */
export function encodeArgs(args: readonly unknown[], where: PayloadLocation = {}): string {
  if (!Array.isArray(args)) {
    throw invalid(`bind arguments must be an array, got ${describe(args)}`, where);
  }
  let plain = true;
  for (let i = 0; i < args.length; i++) {
    const v = args[i];
    switch (typeof v) {
      case "string":
        if (!v.isWellFormed()) {
          throw invalid(
            `argument ${i} is a string with a lone UTF-16 surrogate at index ${loneSurrogateAt(v)}, which cannot be stored as UTF-8 losslessly`,
            where,
            i,
          );
        }
        continue;
      case "boolean":
        continue;
      case "number":
        if (!Number.isFinite(v)) throw invalid(`argument ${i} is ${v}, which cannot be stored losslessly`, where, i);
        if (Number.isInteger(v) && !Number.isSafeInteger(v)) {
          // Every double that large is integral, and it may be a 64-bit id already rounded: refused, never
          // stored as a different integer.
          const beyond64 = Math.abs(v) >= 2 ** 63 ? " (or a string: it is beyond 64 bits too)" : "";
          throw invalid(
            `argument ${i} is the number ${v}, an integer beyond ±(2^53−1) that a double cannot hold exactly; pass a bigint instead${beyond64}`,
            where,
            i,
          );
        }
        if (Object.is(v, -0)) plain = false;
        continue;
      case "bigint":
        if (v < INT64_MIN || v > INT64_MAX) {
          throw invalid(`argument ${i} is a bigint outside the signed 64-bit range SQL can store`, where, i);
        }
        plain = false;
        continue;
      case "object":
        if (v === null) continue;
        if (v instanceof Uint8Array) {
          plain = false;
          continue;
        }
        throw invalid(
          `argument ${i} is ${describe(v)}, which is not a bind value (string, number, bigint, boolean, null, Uint8Array)`,
          where,
          i,
        );
      default:
        throw invalid(
          `argument ${i} is ${describe(v)}, which is not a bind value (string, number, bigint, boolean, null, Uint8Array)`,
          where,
          i,
        );
    }
  }
  if (plain) return JSON.stringify(args);
  return `[${args.map(encodeOne).join(",")}]`;
}

function encodeOne(v: unknown): string {
  if (typeof v === "number") return Object.is(v, -0) ? "-0.0" : JSON.stringify(v);
  if (typeof v === "bigint") return v.toString();
  if (v instanceof Uint8Array) return `{"$b64":"${v.toBase64()}"}`;
  return JSON.stringify(v);
}

/** Decodes a payload written by us or by the reference; throws InvalidArgumentError("undecodable …"). */
export function decodeArgs(payload: string): BindValue[] {
  if (typeof payload !== "string") throw undecodable("payload is not text");
  let parsed: unknown;
  if (UNSAFE_DIGITS.test(payload)) return parseSlow(payload);
  try {
    parsed = JSON.parse(payload);
  } catch (e) {
    throw undecodable(`not JSON (${(e as Error).message})`);
  }
  if (!Array.isArray(parsed)) throw undecodable("not a JSON array");
  for (let i = 0; i < parsed.length; i++) {
    const v = parsed[i];
    const t = typeof v;
    if (t === "string" || t === "boolean" || v === null) continue;
    if (t === "number") {
      if (!Number.isFinite(v)) throw undecodable(`element ${i} is a number beyond the double range`);
      continue;
    }
    parsed[i] = decodeTag(v, i);
  }
  return parsed as BindValue[];
}

function decodeTag(v: unknown, i: number): Uint8Array {
  if (v !== null && typeof v === "object" && !Array.isArray(v)) {
    const keys = Object.keys(v);
    const b64 = (v as Record<string, unknown>).$b64;
    if (keys.length === 1 && typeof b64 === "string") {
      try {
        return Uint8Array.fromBase64(b64);
      } catch {
        throw undecodable(`element ${i} has invalid base64`);
      }
    }
  }
  throw undecodable(`element ${i} is ${Array.isArray(v) ? "an array" : "an object"}, not a bind value`);
}

const NUMBER = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/y;

/** Exact parser for payloads holding long digit runs: big integers must not pass through doubles. */
function parseSlow(text: string): BindValue[] {
  const out: BindValue[] = [];
  let i = skipWs(text, 0);
  if (text[i] !== "[") throw undecodable("not a JSON array");
  i = skipWs(text, i + 1);
  if (text[i] === "]") return finish(text, i + 1, out);
  for (;;) {
    const c = text[i];
    if (c === '"') {
      const end = stringEnd(text, i);
      try {
        out.push(JSON.parse(text.slice(i, end)) as string);
      } catch {
        throw undecodable(`element ${out.length} is not a valid JSON string`);
      }
      i = end;
    } else if (c === "{") {
      const end = objectEnd(text, i);
      let obj: unknown;
      try {
        obj = JSON.parse(text.slice(i, end));
      } catch {
        throw undecodable(`element ${out.length} is not valid JSON`);
      }
      out.push(decodeTag(obj, out.length));
      i = end;
    } else if (text.startsWith("null", i)) {
      out.push(null);
      i += 4;
    } else if (text.startsWith("true", i)) {
      out.push(true);
      i += 4;
    } else if (text.startsWith("false", i)) {
      out.push(false);
      i += 5;
    } else {
      NUMBER.lastIndex = i;
      const m = NUMBER.exec(text);
      if (!m) throw undecodable(`element ${out.length} is not a bind value`);
      const n = Number(m[0]);
      if ((m[1] || m[2]) && !Number.isFinite(n))
        throw undecodable(`element ${out.length} is a number beyond the double range`);
      out.push(!m[1] && !m[2] && !Number.isSafeInteger(n) ? BigInt(m[0]) : n);
      i += m[0].length;
    }
    i = skipWs(text, i);
    if (text[i] === ",") {
      i = skipWs(text, i + 1);
      continue;
    }
    if (text[i] === "]") return finish(text, i + 1, out);
    throw undecodable(`unexpected ${text[i] === undefined ? "end" : JSON.stringify(text[i])} at offset ${i}`);
  }
}

function finish(text: string, i: number, out: BindValue[]): BindValue[] {
  if (skipWs(text, i) !== text.length) throw undecodable("trailing data after the array");
  return out;
}

function skipWs(text: string, i: number): number {
  while (i < text.length && (text[i] === " " || text[i] === "\n" || text[i] === "\r" || text[i] === "\t")) i++;
  return i;
}

function stringEnd(text: string, start: number): number {
  for (let i = start + 1; i < text.length; i++) {
    if (text[i] === "\\") i++;
    else if (text[i] === '"') return i + 1;
  }
  throw undecodable("unterminated string");
}

function objectEnd(text: string, start: number): number {
  for (let i = start + 1; i < text.length; i++) {
    if (text[i] === '"') i = stringEnd(text, i) - 1;
    else if (text[i] === "{" || text[i] === "[") throw undecodable("nested value in a tagged argument");
    else if (text[i] === "}") return i + 1;
  }
  throw undecodable("unterminated object");
}

/** Index of the first unpaired surrogate in `s` (which is not well-formed). */
function loneSurrogateAt(s: string): number {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        i++;
        continue;
      }
    }
    if (c >= 0xd800 && c <= 0xdfff) return i;
  }
  return -1;
}

function undecodable(reason: string): InvalidArgumentError {
  return new InvalidArgumentError(`undecodable payload: ${reason}`);
}

function invalid(message: string, where: PayloadLocation, index?: number): InvalidArgumentError {
  const place = [where.namespace ? `namespace "${where.namespace}"` : "", where.file ? `in ${where.file}` : ""]
    .filter(Boolean)
    .join(" ");
  return new InvalidArgumentError(place ? `${message} (${place})` : message, { ...where, index });
}

function describe(v: unknown): string {
  if (v === undefined) return "undefined";
  if (v === null) return "null";
  if (typeof v === "function") return "a function";
  if (typeof v === "symbol") return "a symbol";
  if (v instanceof Date) return "a Date (store date.toISOString() or a number)";
  if (Array.isArray(v)) return "an array";
  if (ArrayBuffer.isView(v)) return `a ${v.constructor.name} (only Uint8Array binds as a blob)`;
  if (v instanceof ArrayBuffer) return "an ArrayBuffer (wrap it in a Uint8Array)";
  if (typeof v === "object") return `an object (${(v as object).constructor?.name ?? "Object"})`;
  return typeof v;
}
