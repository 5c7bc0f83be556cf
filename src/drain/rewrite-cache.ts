import { BoundedMemo } from "../bounded-memo.ts";
import { UnsupportedStatementError } from "../errors.ts";
import { bindTemplate, rewriteTemplate, type RewriteTemplate } from "../sql/template.ts";
import type { BindValue, Dialect } from "../vocabulary.ts";

/** A cached conversion: its template, and whether it binds the row's arguments as they are (most texts). */
type Entry = { template: RewriteTemplate; asIs: boolean } | { error: UnsupportedStatementError };

const MAX_ENTRIES = 2048;

/**
 * The conversion of each row's statement for a target, memoised per (SQL text, argument count,
 * inject): a backlog repeats a handful of statement texts thousands of times, and lexing one costs
 * more than everything else the drain does per row. `sql/` returns the conversion as a template
 * (the text, and where each argument goes), so a cached row costs one map lookup, and an array
 * copy only when the template reorders its arguments or adds the seq. Refusals
 * (UnsupportedStatementError) are cached as such.
 */
export class RewriteCache {
  /**
   * Per argument count and inject flag, the templates by SQL text (the text itself is the key: no key is
   * built per row).
   */
  private readonly entries = new Map<number, { memo: BoundedMemo<Entry>; compute: (sql: string) => Entry }>();

  constructor(
    private readonly dialect: Dialect,
    private readonly compat: boolean,
  ) {}

  /**
   * The statement of one row: with outbox_seq injected (`inject`), or placeholders converted only.
   * `args` are the row's own, freshly decoded: they may be sent as they are. Throws what the
   * rewriter throws.
   */
  rewrite(sql: string, args: BindValue[], seq: number, inject: boolean): { sql: string; args: BindValue[] } {
    const kind = args.length * 2 + (inject ? 1 : 0);
    let cache = this.entries.get(kind);
    if (!cache) this.entries.set(kind, (cache = this.#cacheFor(args.length, inject)));
    const entry = cache.memo.get(sql, cache.compute);
    if ("error" in entry) throw entry.error;
    const { template } = entry;
    return { sql: template.sql, args: entry.asIs ? args : bindTemplate(template, args, seq) };
  }

  /** The memo of one argument count and inject flag, and how it converts a text it has not seen. */
  #cacheFor(argCount: number, inject: boolean): { memo: BoundedMemo<Entry>; compute: (sql: string) => Entry } {
    const compute = (sql: string): Entry => {
      try {
        const template = rewriteTemplate(sql, this.dialect, argCount, { inject, compat: this.compat });
        return { template, asIs: template.args.length === argCount && template.args.every((pick, i) => pick === i) };
      } catch (error) {
        if (!(error instanceof UnsupportedStatementError)) throw error;
        return { error };
      }
    };
    return { memo: new BoundedMemo<Entry>(MAX_ENTRIES), compute };
  }
}
