import { UnsupportedStatementError } from "../errors.ts";
import type { Dialect } from "../vocabulary.ts";
import { DIALECT_TRAITS } from "./dialect.ts";
import { isWordChar, type Token } from "./lexer.ts";

/** Marks, in a rewrite template's `args`, the place that binds the row's seq (see `RewriteTemplate`). */
export const SEQ_ARG = -1;

/**
 * Maps every placeholder occurrence to the bind argument it reads, with SQLite's numbering: `?NNN`
 * reads argument NNN, a plain `?` one past the largest number assigned so far, and the statement
 * takes the largest number assigned. It must take exactly `argCount` arguments, otherwise a bind
 * value would land in the wrong place: throws `UnsupportedStatementError`.
 */
export function resolveParams(
  sql: string,
  tokens: readonly Token[],
  argCount: number,
): { params: Token[]; argIndex: number[] | null } {
  const params: Token[] = [];
  let numbered = false;
  for (const t of tokens) {
    if (t.kind === "param") {
      params.push(t);
      if (t.num !== 0) numbered = true;
    }
  }
  let needed = params.length;
  let argIndex: number[] | null = null;
  if (numbered) {
    argIndex = [];
    let max = 0;
    for (const p of params) {
      const k = p.num !== 0 ? p.num : max + 1;
      if (k > max) max = k;
      argIndex.push(k - 1);
    }
    needed = max;
  }
  if (needed !== argCount)
    throw new UnsupportedStatementError(argCountProblem(sql, params.length, needed, argCount), sql);
  return { params, argIndex };
}

/**
 * Why a statement whose placeholders read `needed` arguments cannot take `given` (the '?' hidden in literals
 * are named).
 */
export function argCountProblem(sql: string, placeholders: number, needed: number, given: number): string {
  const hidden = countQuestionMarks(sql) - placeholders;
  const note = hidden > 0 ? ` (${hidden} more '?' inside string literals, identifiers or comments do not count)` : "";
  return `statement takes ${needed} bind arguments${note} but ${given} were given`;
}

function countQuestionMarks(sql: string): number {
  let n = 0;
  for (let i = sql.indexOf("?"); i >= 0; i = sql.indexOf("?", i + 1)) n++;
  return n;
}

/**
 * Builds rewritten SQL left to right: copies source text (gaps, comments and all), renumbers each
 * placeholder it passes for the dialect (`$n` for PostgreSQL, `?` elsewhere) while recording the
 * input argument it reads, and lets the rewrite splice in text and the row's seq at the right
 * places. The result is a template: SQL text plus, per output placeholder, an input index or `SEQ_ARG`.
 */
export class Emitter {
  private out = "";
  private pos = 0;
  private next = 0; // next placeholder in `params`
  private last = 0; // last character emitted (0 before the first)
  private afterPlaceholder = false; // the output ends in a placeholder
  readonly picks: number[] = [];
  private readonly dollar: boolean;

  constructor(
    private readonly sql: string,
    private readonly params: readonly Token[],
    private readonly argIndex: readonly number[] | null,
    dialect: Dialect,
  ) {
    this.dollar = DIALECT_TRAITS[dialect].placeholder === "dollar";
  }

  /** Copies source text up to offset `end`, translating the placeholders in it. */
  copyTo(end: number): this {
    const { params } = this;
    for (let p = params[this.next]; p !== undefined && p.start < end; p = params[++this.next]) {
      this.copy(p.start);
      this.placeholder(this.argIndex === null ? this.next : this.argIndex[this.next]!);
      this.pos = p.end;
    }
    this.copy(end);
    return this;
  }

  /** Moves the read position to `pos` without copying (the skipped text must hold no placeholder). */
  skipTo(pos: number): this {
    this.pos = pos;
    return this;
  }

  /** Appends literal SQL. */
  text(s: string): this {
    if (s.length > 0) this.append(s, s.charCodeAt(0), s.charCodeAt(s.length - 1));
    return this;
  }

  /** Appends a space unless the output already ends in whitespace (or is empty). */
  space(): this {
    const c = this.last;
    if (c !== 0 && c !== 32 && (c < 9 || c > 13)) this.text(" ");
    return this;
  }

  /** Appends a placeholder bound to the row's seq. */
  seq(): this {
    this.placeholder(SEQ_ARG);
    return this;
  }

  /** The finished SQL. */
  toString(): string {
    return this.out;
  }

  private copy(end: number): void {
    if (end <= this.pos) return;
    // The characters are read from the source: reading them from the slice would make JSC
    // flatten every slice on its own, which costs more than the whole rewrite.
    const { sql, pos } = this;
    this.append(sql.slice(pos, end), sql.charCodeAt(pos), sql.charCodeAt(end - 1));
    this.pos = end;
  }

  /** Appends `s`, which starts with character `first` and ends with `last`. */
  private append(s: string, first: number, last: number): void {
    // A placeholder must stay a token of its own: `a=?where` must not become `$1where`
    // (PostgreSQL: "trailing junk after parameter"; MariaDB refuses `?where` too), nor a `?`
    // take the digits of a `?NNN`.
    if (this.afterPlaceholder && isWordChar(first)) this.out += " ";
    this.afterPlaceholder = false;
    this.out += s;
    this.last = last;
  }

  private placeholder(pick: number): void {
    this.picks.push(pick);
    // `x?` must not become `x$1`, one identifier.
    if (isWordChar(this.last)) this.out += " ";
    this.out += this.dollar ? `$${this.picks.length}` : "?";
    this.last = 0;
    this.afterPlaceholder = true;
  }
}
