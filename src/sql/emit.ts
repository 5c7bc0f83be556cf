import { UnsupportedStatementError } from "../errors.ts";
import type { BindValue, Dialect } from "../writers/writer.ts";
import type { Token } from "./lexer.ts";

/**
 * Maps every placeholder occurrence to the bind argument it reads, with SQLite's rules: `?NNN`
 * reads argument NNN, a plain `?` reads one past the largest number assigned so far. The
 * statement must take exactly `args.length` arguments (the largest number assigned), otherwise
 * a bind value would land in the wrong place.
 */
export function resolveParams(sql: string, tokens: readonly Token[], argCount: number): { params: Token[]; argIndex: number[] | null } {
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
  if (needed !== argCount) {
    const hidden = countQuestionMarks(sql) - params.length;
    const note = hidden > 0 ? ` (${hidden} more '?' inside string literals, identifiers or comments do not count)` : "";
    throw new UnsupportedStatementError(`statement takes ${needed} bind arguments${note} but ${argCount} were given`, sql);
  }
  return { params, argIndex };
}

function countQuestionMarks(sql: string): number {
  let n = 0;
  for (let i = sql.indexOf("?"); i >= 0; i = sql.indexOf("?", i + 1)) n++;
  return n;
}

/**
 * Builds the rewritten SQL left to right: copies source text, renumbers each placeholder it
 * passes for the dialect (`$n` for PostgreSQL, `?` elsewhere) while appending the argument it
 * reads, and lets the rewrite splice in text and extra bound values at the right places.
 */
export class Emitter {
  private out = "";
  private pos = 0;
  private next = 0; // next placeholder in `params`
  readonly args: BindValue[] = [];
  private readonly dollar: boolean;

  constructor(
    private readonly sql: string,
    private readonly params: Token[],
    private readonly argIndex: number[] | null,
    private readonly source: readonly BindValue[],
    dialect: Dialect,
  ) {
    this.dollar = dialect === "postgres";
  }

  /** Copies source text up to offset `end`, translating the placeholders in it. */
  copyTo(end: number): this {
    const { sql, params } = this;
    for (let p = params[this.next]; p !== undefined && p.start < end; p = params[++this.next]) {
      this.out += sql.slice(this.pos, p.start);
      const k = this.argIndex === null ? this.next : this.argIndex[this.next]!;
      this.placeholder(this.source[k]!);
      this.pos = p.end;
    }
    this.out += sql.slice(this.pos, end);
    this.pos = end;
    return this;
  }

  /** Moves the read position to `pos` without copying (the skipped text must hold no placeholder). */
  skipTo(pos: number): this {
    this.pos = pos;
    return this;
  }

  /** Appends literal SQL. */
  text(s: string): this {
    this.out += s;
    return this;
  }

  /** Appends a placeholder bound to `value`. */
  bind(value: BindValue): this {
    this.placeholder(value);
    return this;
  }

  /** The finished SQL. */
  toString(): string {
    return this.out;
  }

  private placeholder(value: BindValue): void {
    this.args.push(value);
    this.out += this.dollar ? `$${this.args.length}` : "?";
  }
}
