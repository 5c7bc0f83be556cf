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
  private readonly verdicts = new Map<string, number | string>();
  private readonly injectVerdicts = new Map<string, string | null>();

  constructor(
    readonly dialect: Dialect | null,
    private readonly maxEntries = MAX_ENTRIES,
  ) {}

  /**
   * Throws `InvalidStatementError` naming `table` unless `sql` is one valid statement taking
   * exactly `argCount` arguments and, with `inject`, one the rewriter accepts.
   */
  check(table: string, sql: string, argCount: number, inject: boolean): void {
    if (typeof sql !== "string") throw new InvalidStatementError(`SQL text must be a string, got ${sql === null ? "null" : typeof sql}`, table);
    let verdict = this.verdicts.get(sql);
    if (verdict === undefined) {
      try {
        verdict = validateStatement(sql, this.dialect);
      } catch (error) {
        if (!(error instanceof InvalidStatementError)) throw error;
        verdict = error.reason;
      }
      remember(this.verdicts, sql, verdict, this.maxEntries);
    }
    if (typeof verdict === "string") throw new InvalidStatementError(verdict, table);
    if (verdict !== argCount) checkStatement(sql, argCount, this.dialect, table); // throws, with the full reason
    if (!inject) return;
    let problem = this.injectVerdicts.get(sql);
    if (problem === undefined) {
      problem = null;
      try {
        checkInjectable(sql, argCount, this.dialect);
      } catch (error) {
        if (!(error instanceof InvalidStatementError)) throw error;
        problem = error.reason;
      }
      remember(this.injectVerdicts, sql, problem, this.maxEntries);
    }
    if (problem !== null) throw new InvalidStatementError(problem, table);
  }
}

function remember<V>(map: Map<string, V>, key: string, value: V, max: number): void {
  if (map.size >= max) map.delete(map.keys().next().value!);
  map.set(key, value);
}
