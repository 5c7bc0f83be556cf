import { InvalidArgumentError } from "../errors.ts";
import type { BindValue, Dialect } from "../vocabulary.ts";
import { bindTemplate, rewriteTemplate } from "./template.ts";

/** Options of `injectOutboxSeq`. */
export interface InjectOptions {
  /**
   * Emit exactly the reference implementation's SQL (`INSERT OR IGNORE INTO …`, an unguarded
   * `UPDATE … SET …, outbox_seq = ?`). sqlite/libsql only. Default false.
   */
  compat?: boolean;
}

/** A rewritten statement: SQL for the dialect and a fresh argument array. */
export interface RewrittenStatement {
  sql: string;
  args: BindValue[];
}

/**
 * Rewrites a single-row INSERT or an UPDATE so that delivering it twice, or after a newer
 * statement, changes nothing: it adds `outbox_seq = seq` and the dialect's duplicate-absorbing
 * clause or guard. Never mutates `args`. Throws `UnsupportedStatementError` (with `reason`) for
 * every other shape, and `InvalidArgumentError` for a `seq` that is not a positive safe integer.
 */
export function injectOutboxSeq(
  sql: string,
  args: readonly BindValue[],
  seq: number,
  dialect: Dialect,
  options: InjectOptions = {},
): RewrittenStatement {
  if (!Number.isSafeInteger(seq) || seq < 1)
    throw new InvalidArgumentError(`outbox seq must be a positive safe integer, got ${String(seq)}`);
  const template = rewriteTemplate(sql, dialect, args.length, { inject: true, compat: options.compat });
  return { sql: template.sql, args: bindTemplate(template, args, seq) };
}

/**
 * Translates placeholders only, for tables delivered without injection: `?`/`?NNN` become
 * `$1…$n` for PostgreSQL, `?NNN` becomes `?` (arguments reordered) for MySQL; SQLite/libSQL get
 * the statement unchanged. Literal- and comment-aware; never mutates `args`. Throws
 * `UnsupportedStatementError` for text holding more than one statement and when the
 * placeholders cannot be translated faithfully.
 */
export function toDialect(sql: string, args: readonly BindValue[], dialect: Dialect): RewrittenStatement {
  const template = rewriteTemplate(sql, dialect, args.length, { inject: false });
  return { sql: template.sql, args: bindTemplate(template, args, 0) };
}
