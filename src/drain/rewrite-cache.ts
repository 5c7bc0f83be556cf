import { BoundedMemo } from "../bounded-memo.ts";
import { UnsupportedStatementError } from "../errors.ts";
import { bindTemplate, rewriteTemplate, type RewriteTemplate } from "../sql/template.ts";
import type { BindValue, Dialect } from "../vocabulary.ts";

type Entry = RewriteTemplate | { error: UnsupportedStatementError };

const MAX_ENTRIES = 2048;

/**
 * The conversion of each row's statement for a target, memoised per (SQL text, argument count,
 * inject): a backlog repeats a handful of statement texts thousands of times, and lexing one costs
 * more than everything else the drain does per row. `sql/` returns the conversion as a template
 * (the text, and where each argument goes), so a cached row costs one map lookup and an array copy.
 * Refusals (UnsupportedStatementError) are cached as such.
 */
export class RewriteCache {
  /** Per argument count and inject flag, the templates by SQL text (the text itself is the key: no key is built per row). */
  private readonly entries = new Map<number, BoundedMemo<Entry>>();

  constructor(
    private readonly dialect: Dialect,
    private readonly compat: boolean,
  ) {}

  /** The statement of one row: with outbox_seq injected (`inject`), or placeholders converted only. Throws what the rewriter throws. */
  rewrite(sql: string, args: readonly BindValue[], seq: number, inject: boolean): { sql: string; args: BindValue[] } {
    const kind = args.length * 2 + (inject ? 1 : 0);
    let memo = this.entries.get(kind);
    if (!memo) this.entries.set(kind, (memo = new BoundedMemo<Entry>(MAX_ENTRIES)));
    const entry = memo.get(sql, () => {
      try {
        return rewriteTemplate(sql, this.dialect, args.length, { inject, compat: this.compat });
      } catch (error) {
        if (!(error instanceof UnsupportedStatementError)) throw error;
        return { error };
      }
    });
    if ("error" in entry) throw entry.error;
    return { sql: entry.sql, args: bindTemplate(entry, args, seq) };
  }
}
