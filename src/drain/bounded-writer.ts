import { describeError, isMisconfigured, isWriteError, WriteError } from "../errors.ts";
import { realScheduler, type Scheduler } from "../scheduler.ts";
import { withTimeout } from "../timeout.ts";
import type { OutboxWriter, Statement, WriteOptions, WriteResult } from "../writers/writer.ts";
import type { BindValue } from "../vocabulary.ts";
import { formatDuration } from "../duration.ts";

/**
 * Checks a writer's answer for shape: exactly one object per statement, each with a boolean `ok`.
 * Returns the reason it is garbage, or null. Garbage is an outage, never the rows' fault.
 */
export function resultShapeProblem(results: unknown, expected: number): string | null {
  if (!Array.isArray(results)) return `writeBatch returned ${results === null ? "null" : typeof results}, not an array`;
  if (results.length !== expected) return `writeBatch returned ${results.length} results for ${expected} statements`;
  for (let i = 0; i < results.length; i++) {
    const r = results[i] as { ok?: unknown } | null;
    if (typeof r !== "object" || r === null || typeof r.ok !== "boolean") {
      return `writeBatch result ${i} has no boolean "ok"`;
    }
  }
  return null;
}

/**
 * A target's writer as the drain calls it: every call bounded by `write_timeout` and its answer
 * checked for shape. Anything that is not a well-formed answer in time — a throw, a timeout, the
 * wrong number of results, a result without boolean `ok` — becomes a `WriteError`: the target is
 * down (or misconfigured, when the writer says so), the rows are not at fault. A timed-out call
 * keeps running in the background; `onTimeout` receives it.
 */
export class BoundedWriter {
  constructor(
    readonly target: string,
    readonly writer: OutboxWriter,
    private readonly timeoutMs: number,
    /** Whose time `write_timeout` is measured in. */
    private readonly scheduler: Scheduler = realScheduler,
  ) {}

  async send(
    stmts: Statement[],
    onTimeout?: (abandoned: Promise<WriteResult[]>) => void,
    options?: WriteOptions,
  ): Promise<WriteResult[]> {
    const name = this.target;
    let call: Promise<WriteResult[]>;
    try {
      call = Promise.resolve(
        options === undefined ? this.writer.writeBatch(stmts) : this.writer.writeBatch(stmts, options),
      );
    } catch (error) {
      throw new WriteError(`target ${name}: writeBatch threw: ${describeError(error).message}`, name, { cause: error });
    }
    let results: unknown;
    try {
      results = await withTimeout(
        call,
        this.timeoutMs,
        () => {
          onTimeout?.(call);
          throw new WriteError(
            `target ${name}: writeBatch did not answer within write_timeout (${formatDuration(this.timeoutMs)})`,
            name,
          );
        },
        this.scheduler,
      );
    } catch (error) {
      if (isWriteError(error) && error.target === name) throw error;
      throw new WriteError(`target ${name}: ${describeError(error).message}`, name, {
        cause: error,
        misconfigured: isMisconfigured(error),
      });
    }
    const problem = resultShapeProblem(results, stmts.length);
    if (problem) throw new WriteError(`target ${name}: ${problem}`, name);
    return results as WriteResult[];
  }

  /** Sends one statement of the drain's own (DDL, a probe, a read) as a batch of one; `seq` 0 marks it as no row's. */
  async control(sql: string, namespace: string, args: BindValue[] = []): Promise<WriteResult> {
    const [result] = await this.send([{ sql, args, namespace, seq: 0 }]);
    return result!;
  }
}

/**
 * The single value of a one-column answer (`SELECT MAX(…)`, `SELECT through …`) as a number:
 * drivers hand it back as a number, a bigint or a string (PostgreSQL bigint), in an array row or an
 * object row. No row or NULL is `absent`; anything else that is not a non-negative safe integer is
 * undefined.
 */
export function parseCount(rows: unknown, absent: number | null): number | null | undefined {
  if (!Array.isArray(rows) || rows.length === 0) return absent;
  const row = rows[0];
  const value = Array.isArray(row) ? row[0] : row && typeof row === "object" ? Object.values(row)[0] : row;
  if (value === null || value === undefined) return absent;
  const n = typeof value === "bigint" ? Number(value) : typeof value === "string" ? Number(value.trim()) : value;
  return typeof n === "number" && Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}
