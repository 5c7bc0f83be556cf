import { WriteError } from "../errors.ts";
import type { Statement, WriteResult } from "../writers/writer.ts";
import { describeError, type TargetContext } from "./context.ts";
import { resultShapeProblem } from "./answers.ts";

/**
 * Calls the target's `writeBatch` bounded by `write_timeout` and checks the answer's shape.
 * Anything that is not a well-formed answer in time — a throw, a timeout, the wrong number of
 * results, a result without boolean `ok` — becomes a `WriteError`: the target is down, the rows
 * are not at fault. A timed-out call keeps running in the background; `onTimeout` receives it.
 */
export async function timedWriteBatch(
  ctx: TargetContext,
  stmts: Statement[],
  onTimeout?: (abandoned: Promise<WriteResult[]>) => void,
): Promise<WriteResult[]> {
  const name = ctx.target.name;
  const timeoutMs = ctx.app.writeTimeout * 1000;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let call: Promise<WriteResult[]>;
  try {
    call = Promise.resolve(ctx.writer.writeBatch(stmts));
  } catch (error) {
    throw new WriteError(`target ${name}: writeBatch threw: ${describeError(error).message}`, name, { cause: error });
  }
  call.catch(() => {}); // a rejection after the timeout must not become an unhandled rejection
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reject(new WriteError(`target ${name}: writeBatch did not answer within write_timeout (${ctx.app.writeTimeout} s)`, name));
      onTimeout?.(call);
    }, timeoutMs);
  });
  let results: unknown;
  try {
    results = await Promise.race([call, timeout]);
  } catch (error) {
    if (error instanceof WriteError && error.target === name) throw error;
    throw new WriteError(`target ${name}: ${describeError(error).message}`, name, { cause: error });
  } finally {
    clearTimeout(timer);
  }
  const problem = resultShapeProblem(results, stmts.length);
  if (problem) throw new WriteError(`target ${name}: ${problem}`, name);
  return results as WriteResult[];
}

/**
 * Sends one statement of the drain's own (auto_schema DDL, `MAX(outbox_seq)`) as a batch of one,
 * bounded and checked like a batch; `seq` 0 marks it as no row's. Returns its result.
 */
export async function timedControlStatement(ctx: TargetContext, sql: string, namespace: string): Promise<WriteResult> {
  const [result] = await timedWriteBatch(ctx, [{ sql, args: [], namespace, seq: 0 }]);
  return result!;
}
