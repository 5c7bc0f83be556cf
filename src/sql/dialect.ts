import { InvalidArgumentError } from "../errors.ts";
import { DIALECTS, type Dialect } from "../vocabulary.ts";


/** The dialects whose lexers differ (libsql reads SQL exactly like sqlite). */
export const LEXER_DIALECTS: readonly Dialect[] = ["sqlite", "postgres", "mysql"];

/** Throws `InvalidArgumentError` unless `dialect` is one of `DIALECTS`. */
export function checkDialect(dialect: Dialect): void {
  if (!DIALECTS.includes(dialect)) throw new InvalidArgumentError(`unknown SQL dialect "${String(dialect)}" (expected one of ${DIALECTS.join(", ")})`);
}
