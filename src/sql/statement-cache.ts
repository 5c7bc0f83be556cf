import { BoundedMemo } from "../bounded-memo.ts";
import { InvalidStatementError } from "../errors.ts";
import type { Dialect } from "../vocabulary.ts";
import { checkInjectable, checkStatement, validateStatement } from "./statement.ts";

/** Verdicts kept per cache; a producer uses a handful of statement texts, a flood of unique ones just churns. */
const MAX_ENTRIES = 4096;

/**
 * Remembers, per SQL text, what `validateStatement` said (the argument count, or why it refused)
 * and, for injected tables, whether `injectOutboxSeq` can rewrite it, so checking a statement at
 * push costs one map lookup after the first time. Bounded: past `maxEntries` texts the oldest
 * verdict is forgotten. One cache per dialect (null: every dialect).
 */
export class StatementCache {
  private readonly verdicts: BoundedMemo<number | string>;
  private readonly injectVerdicts: BoundedMemo<string | null>;

  constructor(
    readonly dialect: Dialect | null,
    maxEntries = MAX_ENTRIES,
  ) {
    this.verdicts = new BoundedMemo(maxEntries);
    this.injectVerdicts = new BoundedMemo(maxEntries);
  }

  /**
   * Throws `InvalidStatementError` naming `table` unless `sql` is one valid statement taking
   * exactly `argCount` arguments and, with `inject`, one the rewriter accepts.
   */
  check(table: string, sql: string, argCount: number, inject: boolean): void {
    if (typeof sql !== "string")
      throw new InvalidStatementError(`SQL text must be a string, got ${sql === null ? "null" : typeof sql}`, table);
    const verdict = this.verdicts.get(sql, () => reasonOf(() => validateStatement(sql, this.dialect)));
    if (typeof verdict === "string") throw new InvalidStatementError(verdict, table);
    if (verdict !== argCount) checkStatement(sql, argCount, this.dialect, table); // throws, with the full reason
    if (!inject) return;
    const problem = this.injectVerdicts.get(sql, () => {
      const reason = reasonOf(() => checkInjectable(sql, argCount, this.dialect));
      return typeof reason === "string" ? reason : null;
    });
    if (problem !== null) throw new InvalidStatementError(problem, table);
  }
}

/** What `check` returns, or the reason of the InvalidStatementError it throws (anything else is thrown on). */
function reasonOf<T>(check: () => T): T | string {
  try {
    return check();
  } catch (error) {
    if (!(error instanceof InvalidStatementError)) throw error;
    return error.reason;
  }
}
