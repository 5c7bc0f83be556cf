import type { WriteResult } from "../writers/writer.ts";
import { resultShapeProblem } from "./answers.ts";
import type { PlannedBatch } from "./batch.ts";
import { describeError, type TargetContext } from "./context.ts";

/**
 * A batch given up after `write_timeout` may still commit. Rows of a table without outbox_seq have
 * no guard against a late commit landing after newer rows (an old UPDATE overwriting a newer one),
 * so such tables are held — not planned — until the abandoned call answers. A late well-formed
 * answer confirms the ok prefix it reports per table (those rows are committed: resending them
 * would duplicate them); anything else releases the rows for redelivery. Injected tables need no
 * hold: a late commit and a redelivery are both absorbed by outbox_seq. `onSettled` runs after.
 */
export function holdForLateAnswer(ctx: TargetContext, plan: PlannedBatch, call: Promise<WriteResult[]>, onSettled: () => void): void {
  const slices = plan.slices.filter((s) => !s.table.config.injectOutboxSeq);
  if (slices.length === 0) return;
  for (const s of slices) s.table.awaitingLateAnswer = true;
  const names = slices.map((s) => `"${s.table.config.name}"`).join(", ");
  ctx.logger.warn(
    `drain: ${names} on ${ctx.target.name} held until the timed-out batch answers: without outbox_seq a late commit must not land after newer rows`,
  );
  const settle = (results: unknown) => {
    if (resultShapeProblem(results, plan.stmts.length) !== null) return;
    const answers = results as WriteResult[];
    let confirmed = 0;
    for (const { table, rows, start } of slices) {
      const ok: number[] = [];
      for (let i = 0; i < rows.length && answers[start + i]!.ok; i++) ok.push(rows[i]!.seq);
      if (table.outbox.closed || ok.length === 0) continue;
      try {
        table.outbox.confirm(ok);
        confirmed += ok.length;
      } catch (error) {
        ctx.logger.error(`drain: confirming the late answer for "${table.config.name}" (${table.file}) failed; its rows are redelivered: ${describeError(error).message}`);
      }
    }
    ctx.logger.info(`drain: the timed-out batch to ${ctx.target.name} answered late; ${confirmed} rows of ${names} it committed are confirmed`);
  };
  call
    .then(settle, () => ctx.logger.info(`drain: the timed-out batch to ${ctx.target.name} failed late; ${names} are redelivered`))
    .finally(() => {
      for (const s of slices) s.table.awaitingLateAnswer = false;
      onSettled();
    });
}
