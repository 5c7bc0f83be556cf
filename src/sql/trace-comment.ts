// sqlcommenter (https://google.github.io/sqlcommenter/spec/): a statement's trace context as a
// comment the remote database logs with it, `INSERT … /*traceparent='00-…-01'*​/`. Pure text work.
import type { Dialect } from "../vocabulary.ts";
import { tokenize } from "./lexer.ts";

const OPEN = "/*traceparent='";
const CLOSE = "'*/";
/** A comment's length: the opening, a stored traceparent (55 characters), the closing, and the space before. */
const COMMENT_LENGTH = 1 + OPEN.length + 55 + CLOSE.length;

/**
 * The comment for `traceparent`, which must be a stored traceparent (isStoredTraceparent): nothing in it
 * needs escaping.
 */
export function traceComment(traceparent: string): string {
  return ` ${OPEN}${traceparent}${CLOSE}`;
}

/**
 * Where sqlcommenter's comment goes in `sql`: after its last token, before a terminating `;` and
 * anything after it — not inside a trailing `--` comment, which would swallow it. -1 when the text
 * cannot be read (it is then sent without a comment).
 */
export function commentPoint(sql: string, dialect: Dialect): number {
  try {
    const tokens = tokenize(sql, dialect, [], false, false);
    for (let i = tokens.length - 1; i >= 0; i--) if (tokens[i]!.kind !== ";") return tokens[i]!.end;
    return -1;
  } catch {
    return -1;
  }
}

/** `sql` with the comment of `traceparent` at `at` (see commentPoint). */
export function withTraceComment(sql: string, at: number, traceparent: string): string {
  return at === sql.length
    ? sql + traceComment(traceparent)
    : sql.slice(0, at) + traceComment(traceparent) + sql.slice(at);
}

/**
 * Splits a text the drain commented back into its text without the comment, the comment, and
 * where it was counted from the end of the text (what follows the comment is kept as it was), or
 * null for a text without one: how coalescing reads a commented INSERT's shape once per text, not
 * once per row.
 */
export function splitTraceComment(sql: string): { base: string; comment: string; fromEnd: number } | null {
  const open = sql.lastIndexOf(OPEN);
  if (open < 1 || sql.charCodeAt(open - 1) !== 32 || sql.substr(open + OPEN.length + 55, CLOSE.length) !== CLOSE)
    return null;
  const start = open - 1;
  const end = start + COMMENT_LENGTH;
  return { base: sql.slice(0, start) + sql.slice(end), comment: sql.slice(start, end), fromEnd: sql.length - end };
}
