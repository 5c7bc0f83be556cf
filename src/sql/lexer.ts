import { UnsupportedStatementError } from "../errors.ts";
import type { Dialect } from "../vocabulary.ts";
import { DIALECT_TRAITS } from "./dialect.ts";

/**
 * What a significant token is. Whitespace and comments are not tokens: they stay in the source
 * text between tokens, so a rewrite that copies the gaps keeps them.
 * - `word`: a bare identifier or keyword; `quoted`: a quoted identifier (`"…"`, `` `…` ``, `[…]`);
 * - `string`: any string literal (incl. PostgreSQL `E'…'` with its continuations, dollar-quoted,
 *   MySQL `"…"`);
 * - `param`: a positional `?` or `?NNN`; `named`: a placeholder we do not support (`:x`, `@x`,
 *   `$x` in SQLite, `$1` in PostgreSQL);
 * - `op`: any other single punctuation character.
 */
export type TokenKind =
  | "word"
  | "quoted"
  | "string"
  | "number"
  | "param"
  | "named"
  | "("
  | ")"
  | ","
  | ";"
  | "."
  | "op";

/**
 * One significant token: `[start, end)` in the source, its parenthesis depth, and for `?NNN` its number (0
 * for a plain `?`).
 */
export interface Token {
  kind: TokenKind;
  start: number;
  end: number;
  /** Parenthesis depth the token sits at; a `(` and its `)` sit at the outer depth. */
  depth: number;
  /** For `param`: NNN of `?NNN`, 0 for a plain `?`. */
  num: number;
}

/** How the `reason` of a refused MySQL/MariaDB executable comment (`/*!…*\/`, `/*M!…*\/`) starts. */
export const EXECUTABLE_COMMENT = "MySQL executable comment";

// SQLite's SQLITE_MAX_VARIABLE_NUMBER default: `?NNN` above it cannot be bound anywhere we deliver to.
const MAX_PARAM_NUMBER = 32766;

function isWordStart(c: number): boolean {
  return (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || c === 95 || c >= 128;
}
/** A character that continues an identifier in every dialect (`$` included: it does in all four). */
export function isWordChar(c: number): boolean {
  return isWordStart(c) || (c >= 48 && c <= 57) || c === 36;
}
function isDigit(c: number): boolean {
  return c >= 48 && c <= 57;
}
function isSpace(c: number): boolean {
  return c === 32 || (c >= 9 && c <= 13);
}
/** Whitespace or a control character (DEL included), as MariaDB's `my_isspace`/`my_iscntrl` read it. */
function isControlOrSpace(c: number): boolean {
  return c <= 32 || c === 127;
}

function fail(reason: string, sql: string): never {
  throw new UnsupportedStatementError(reason, sql);
}

/** End (exclusive) of a quoted run opened at `i` by `q`; doubled `q` escapes it, and `\` escapes when `backslash`. */
function skipQuoted(sql: string, i: number, q: number, backslash: boolean, what: string): number {
  const n = sql.length;
  let j = i + 1;
  while (j < n) {
    const c = sql.charCodeAt(j);
    if (backslash && c === 92) j += 2;
    else if (c === q) {
      if (sql.charCodeAt(j + 1) === q) j += 2;
      else return j + 1;
    } else j++;
  }
  return fail(`unterminated ${what} starting at offset ${i}`, sql);
}

/** End of a block comment opened at `i`; PostgreSQL nests them, the others do not. */
function skipBlockComment(sql: string, i: number, nested: boolean): number {
  const n = sql.length;
  let depth = 1;
  let j = i + 2;
  while (j < n) {
    const c = sql.charCodeAt(j);
    if (c === 42 && sql.charCodeAt(j + 1) === 47) {
      j += 2;
      if (--depth === 0) return j;
    } else if (nested && c === 47 && sql.charCodeAt(j + 1) === 42) {
      depth++;
      j += 2;
    } else j++;
  }
  return fail(`unterminated block comment starting at offset ${i}`, sql);
}

/** Offset of the first character at or after `i` that ends a line comment: `\n`, or also `\r` when `cr`. */
function lineEnd(sql: string, i: number, cr: boolean): number {
  const n = sql.length;
  for (; i < n; i++) {
    const c = sql.charCodeAt(i);
    if (c === 10 || (cr && c === 13)) return i;
  }
  return n;
}

/**
 * Where a PostgreSQL string continues after its closing quote at `i - 1`: the offset of the next
 * `'` when only whitespace and `--` comments, with at least one newline, stand between them (its
 * scanner's `quotecontinue`; a block comment breaks it), else -1.
 */
function pgContinuation(sql: string, i: number): number {
  const n = sql.length;
  let newline = false;
  while (i < n) {
    const c = sql.charCodeAt(i);
    if (c === 10 || c === 13) {
      newline = true;
      i++;
    } else if (isSpace(c)) i++;
    else if (c === 45 && sql.charCodeAt(i + 1) === 45) i = lineEnd(sql, i + 2, true);
    else return c === 39 && newline ? i : -1;
  }
  return -1;
}

/**
 * Splits `sql` into significant tokens the way `dialect` reads it, appending them to `out` (also
 * returned): literals (doubled-quote escapes; backslash escapes in MySQL strings and PostgreSQL
 * `E'…'`, continuations included; PostgreSQL dollar quoting), quoted identifiers (backticks not
 * in PostgreSQL, brackets only in SQLite), comments (`--` to the end of the line — PostgreSQL
 * also ends it at a bare `\r`; MySQL `#`, and `--` only before whitespace or a control
 * character), `?`/`?NNN` placeholders, and parenthesis depth. Throws `UnsupportedStatementError`
 * on a NUL character, an unterminated literal, identifier or comment, a MySQL/MariaDB executable
 * comment (`/*!…*\/`, `/*M!…*\/`), a `?NNN` outside 1…32766, and — unless `checkParens` is
 * false — unbalanced parentheses; `out` then holds the tokens read before the problem. With
 * `sparse`, only placeholders (`param`, `named`), each `;` and the token after it are kept: what
 * translating placeholders needs, without a token object per word.
 */
export function tokenize(
  sql: string,
  dialect: Dialect,
  out: Token[] = [],
  checkParens = true,
  sparse = false,
): Token[] {
  const lexer = DIALECT_TRAITS[dialect].lexer;
  const my = lexer === "mysql";
  const pg = lexer === "postgres";
  const lite = lexer === "sqlite";
  // SQLite stops reading at a NUL (the rest is silently ignored) and PostgreSQL's protocol
  // cannot carry one: text after it would mean different things to us and to the engine.
  const nul = sql.indexOf("\0");
  if (nul >= 0) fail(`NUL character at offset ${nul}`, sql);
  const n = sql.length;
  const opens: number[] = []; // start offsets of unclosed `(`, for the error message
  let depth = 0;
  let i = 0;
  let afterSemicolon = false;
  const push = sparse
    ? (kind: TokenKind, start: number, end: number, d = depth, num = 0) => {
        if (!afterSemicolon && kind !== "param" && kind !== "named" && kind !== ";") return;
        afterSemicolon = kind === ";";
        out.push({ kind, start, end, depth: d, num });
      }
    : (kind: TokenKind, start: number, end: number, d = depth, num = 0) => {
        out.push({ kind, start, end, depth: d, num });
      };
  while (i < n) {
    const c = sql.charCodeAt(i);
    if (isSpace(c)) {
      i++;
      continue;
    }
    const start = i;
    const next = sql.charCodeAt(i + 1);
    if (c === 39) {
      i = skipQuoted(sql, i, 39, my, "string literal");
      push("string", start, i);
    } else if (c === 34) {
      // MySQL (default sql_mode) reads "…" as a string with backslash escapes; the others as an identifier.
      i = skipQuoted(sql, i, 34, my, my ? "string literal" : "quoted identifier");
      push(my ? "string" : "quoted", start, i);
    } else if (c === 96 && !pg) {
      // PostgreSQL has no backtick quoting: there `` ` `` is an operator character.
      i = skipQuoted(sql, i, 96, false, "quoted identifier");
      push("quoted", start, i);
    } else if (c === 91 && lite) {
      const close = sql.indexOf("]", i + 1);
      if (close < 0) fail(`unterminated quoted identifier starting at offset ${i}`, sql);
      i = close + 1;
      push("quoted", start, i);
    } else if (c === 45 && next === 45 && (!my || i + 2 >= n || isControlOrSpace(sql.charCodeAt(i + 2)))) {
      // MariaDB reads `--` as a comment only before whitespace or a control character (DEL too).
      i = lineEnd(sql, i + 2, pg);
    } else if (c === 35 && my) {
      i = lineEnd(sql, i + 1, false);
    } else if (c === 47 && next === 42) {
      // `/*!…*/` (MySQL, MariaDB) and `/*M!…*/` (MariaDB) are executed, not ignored: reading
      // them as comments would hide SQL from us.
      if (my) {
        const bang =
          sql.charCodeAt(i + 2) === 33 ? 3 : sql.charCodeAt(i + 2) === 77 && sql.charCodeAt(i + 3) === 33 ? 4 : 0;
        if (bang > 0) fail(`${EXECUTABLE_COMMENT} ${sql.slice(i, i + bang)}…*/ at offset ${i} is not supported`, sql);
      }
      i = skipBlockComment(sql, i, pg);
    } else if (c === 63) {
      i++;
      while (i < n && isDigit(sql.charCodeAt(i))) i++;
      let num = 0;
      if (i > start + 1) {
        num = Number(sql.slice(start + 1, i));
        if (num < 1 || num > MAX_PARAM_NUMBER)
          fail(`placeholder ${sql.slice(start, i)} at offset ${start} is out of range 1…${MAX_PARAM_NUMBER}`, sql);
      }
      push("param", start, i, depth, num);
    } else if (c === 40) {
      opens.push(start);
      push("(", start, ++i);
      depth++;
    } else if (c === 41) {
      if (depth > 0) {
        opens.pop();
        depth--;
      } else if (checkParens) fail(`unbalanced parentheses: ')' at offset ${i} has no matching '('`, sql);
      push(")", start, ++i);
    } else if (c === 44) push(",", start, ++i);
    else if (c === 59) push(";", start, ++i);
    else if (c === 46 && !isDigit(next)) push(".", start, ++i);
    else if (isDigit(c) || c === 46) {
      i++;
      while (i < n) {
        const d = sql.charCodeAt(i);
        if (isWordChar(d) || d === 46) i++;
        else break;
      }
      push("number", start, i);
    } else if (c === 36 && pg) {
      if (isDigit(next)) {
        i++;
        while (i < n && isDigit(sql.charCodeAt(i))) i++;
        push("named", start, i);
      } else {
        // Dollar quoting: $tag$ … $tag$ (tag optional, no `$`, not starting with a digit).
        let j = i + 1;
        while (j < n && isWordChar(sql.charCodeAt(j)) && sql.charCodeAt(j) !== 36) j++;
        if (sql.charCodeAt(j) !== 36) {
          push("op", start, ++i);
        } else {
          const delim = sql.slice(i, j + 1);
          const close = sql.indexOf(delim, j + 1);
          if (close < 0) fail(`unterminated dollar-quoted string starting at offset ${i}`, sql);
          i = close + delim.length;
          push("string", start, i);
        }
      }
    } else if (
      lite &&
      (c === 58 || c === 64 || c === 36 || c === 35) &&
      isWordChar(next) &&
      !(c === 58 && sql.charCodeAt(i - 1) === 58)
    ) {
      // SQLite binds :name, @name, $name (and #name) as named parameters. `::name` is not one:
      // SQLite refuses `::` as an illegal token, so it never binds anything.
      i++;
      while (i < n && isWordChar(sql.charCodeAt(i))) i++;
      push("named", start, i);
    } else if (isWordStart(c) || (my && c === 36)) {
      i++;
      while (i < n && isWordChar(sql.charCodeAt(i))) i++;
      // PostgreSQL E'…' strings take backslash escapes; the E must touch the quote. A string
      // continued on a later line (`E'a'` newline `'b\'c'`) stays in escape mode.
      if (pg && i === start + 1 && (c === 69 || c === 101) && sql.charCodeAt(i) === 39) {
        i = skipQuoted(sql, i, 39, true, "string literal");
        for (let j = pgContinuation(sql, i); j >= 0; j = pgContinuation(sql, i))
          i = skipQuoted(sql, j, 39, true, "string literal");
        push("string", start, i);
      } else push("word", start, i);
    } else push("op", start, ++i);
  }
  if (depth > 0 && checkParens)
    fail(`unbalanced parentheses: '(' at offset ${opens[opens.length - 1]} is never closed`, sql);
  return out;
}

/** True when `t` is the bare keyword `upper` (case-insensitive). */
export function isKeyword(sql: string, t: Token | undefined, upper: string): boolean {
  return t !== undefined && t.kind === "word" && wordIs(sql, t.start, t.end, upper);
}

/** True when `sql[start, end)` is `upper`, compared case-insensitively (ASCII). */
export function wordIs(sql: string, start: number, end: number, upper: string): boolean {
  if (end - start !== upper.length) return false;
  for (let k = 0; k < upper.length; k++) {
    let c = sql.charCodeAt(start + k);
    if (c >= 97 && c <= 122) c -= 32;
    if (c !== upper.charCodeAt(k)) return false;
  }
  return true;
}

/** The unquoted name of a `word` or `quoted` token (quotes stripped, doubled quotes undone). */
export function identName(sql: string, t: Token): string {
  if (t.kind === "word") return sql.slice(t.start, t.end);
  const q = sql.charAt(t.start);
  const inner = sql.slice(t.start + 1, t.end - 1);
  if (q === "[") return inner;
  return inner.replaceAll(q + q, q);
}
