import { BoundedMemo } from "../bounded-memo.ts";
import { commentPoint, withTraceComment } from "../sql/trace-comment.ts";
import { isStoredTraceparent } from "../trace-context.ts";
import type { Dialect } from "../vocabulary.ts";

/**
 * A target's `trace_comments`: each row's statement gets its `traceparent` as a sqlcommenter
 * comment, so the remote's own logs (pg_stat_activity, the slow query log) name the trace. Where
 * the comment goes is read once per statement text; a row is then one concatenation.
 */
export class TraceComments {
  readonly #points = new BoundedMemo<number>(4096);

  constructor(private readonly dialect: Dialect) {}

  /**
   * `sql` with the comment of `traceparent`, or `sql` as it is when the traceparent is not exactly
   * in the stored form (a row written by something else than `push`: nothing unchecked goes into a
   * statement) or the text has no place for one.
   */
  add(sql: string, traceparent: string): string {
    if (!isStoredTraceparent(traceparent)) return sql;
    const at = this.#points.get(sql, (text) => commentPoint(text, this.dialect));
    return at < 0 ? sql : withTraceComment(sql, at, traceparent);
  }
}
