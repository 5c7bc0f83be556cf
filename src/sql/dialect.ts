import { InvalidArgumentError } from "../errors.ts";
import type { Dialect } from "../writers/writer.ts";

/** Every SQL dialect the rewriter (and `dialect = "…"` in outbox.toml) accepts. */
export const DIALECTS: readonly Dialect[] = ["sqlite", "libsql", "postgres", "mysql"];

/** The dialects whose lexers differ (libsql reads SQL exactly like sqlite). */
export const LEXER_DIALECTS: readonly Dialect[] = ["sqlite", "postgres", "mysql"];

/** Throws `InvalidArgumentError` unless `dialect` is one of `DIALECTS`. */
export function checkDialect(dialect: Dialect): void {
  if (!DIALECTS.includes(dialect)) throw new InvalidArgumentError(`unknown SQL dialect "${String(dialect)}" (expected one of ${DIALECTS.join(", ")})`);
}
