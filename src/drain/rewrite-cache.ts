import { injectOutboxSeq, toDialect } from "../sql/index.ts";
import { UnsupportedStatementError } from "../errors.ts";
import type { BindValue, Dialect } from "../writers/writer.ts";

function apply(picks: readonly number[], args: readonly BindValue[], seq: number): BindValue[] {
  const out = new Array<BindValue>(picks.length);
  for (let i = 0; i < picks.length; i++) {
    const p = picks[i]!;
    out[i] = p < 0 ? seq : args[p]!;
  }
  return out;
}

/**
 * How a statement's rewrite is rebuilt without lexing again: the rewritten SQL text and, per
 * output argument, the input argument it is (index ≥ 0) or the row's seq (-1).
 */
interface Template {
  sql: string;
  picks: number[];
}
type Entry = Template | { error: unknown } | null; // null: not cacheable, always call the rewriter

const SENTINEL = "\u0000sqloutbox-arg-";
const MAX_ENTRIES = 2048;

/**
 * Memoises `injectOutboxSeq` / `toDialect` per (SQL text, dialect, options, argument count).
 * A backlog repeats a handful of statement texts thousands of times, and lexing each one costs
 * more than everything else the drain does per row. The rewriter's output text depends only on
 * the SQL, dialect, options and argument count, and arguments flow through unchanged; the cache
 * learns where each one goes by rewriting once with sentinel arguments, then proves the template
 * on the first real row (identical SQL and arguments) before trusting it — otherwise that
 * statement text is never cached. Refusals (UnsupportedStatementError) are cached as such.
 */
export class RewriteCache {
  private readonly entries = new Map<string, Entry>();

  constructor(
    private readonly dialect: Dialect,
    private readonly compat: boolean,
  ) {}

  /** The rewrite of one row: injected (`inject`) or placeholder-translated only. Throws what the rewriter throws. */
  rewrite(sql: string, args: BindValue[], seq: number, inject: boolean): { sql: string; args: BindValue[] } {
    const key = `${inject ? "i" : "d"}${args.length}\u0000${sql}`;
    const entry = this.entries.get(key);
    if (entry === undefined) {
      let real;
      try {
        real = this.direct(sql, args, seq, inject);
      } catch (error) {
        if (error instanceof UnsupportedStatementError) this.remember(key, { error });
        throw error;
      }
      this.remember(key, this.learn(sql, args, seq, inject, real));
      return real;
    }
    if (entry === null) return this.direct(sql, args, seq, inject);
    if ("error" in entry) throw entry.error;
    return { sql: entry.sql, args: apply(entry.picks, args, seq) };
  }

  private direct(sql: string, args: BindValue[], seq: number, inject: boolean) {
    return inject ? injectOutboxSeq(sql, args, seq, this.dialect, { compat: this.compat }) : toDialect(sql, args, this.dialect);
  }

  private learn(sql: string, args: BindValue[], seq: number, inject: boolean, real: { sql: string; args: BindValue[] }): Entry {
    try {
      const sentinels = Array.from({ length: args.length }, (_, i) => `${SENTINEL}${i}`);
      const probe = this.direct(sql, sentinels, seq, inject);
      const picks: number[] = [];
      for (const value of probe.args) {
        if (value === seq) picks.push(-1);
        else if (typeof value === "string" && value.startsWith(SENTINEL)) picks.push(Number(value.slice(SENTINEL.length)));
        else return null; // the rewriter added a value of its own: do not guess
      }
      // Prove it on the real row: the template must reproduce the rewriter's answer exactly.
      if (probe.sql !== real.sql || picks.length !== real.args.length) return null;
      const rebuilt = apply(picks, args, seq);
      for (let i = 0; i < rebuilt.length; i++) if (!Object.is(rebuilt[i], real.args[i])) return null;
      return { sql: probe.sql, picks };
    } catch {
      return null;
    }
  }

  private remember(key: string, entry: Entry): void {
    if (this.entries.size >= MAX_ENTRIES) this.entries.clear(); // statement texts are few; a flood of unique ones just stops being cached well
    this.entries.set(key, entry);
  }
}
