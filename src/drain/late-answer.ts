import { describeError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import type { WriteResult } from "../writers/writer.ts";
import { resultShapeProblem } from "./bounded-writer.ts";
import type { TableSlice } from "./table.ts";

/**
 * A batch given up after `write_timeout` may still commit. With a ledger that is harmless: its
 * fence moved the ledger row, so the next fence fails and settlement (which waits on that row)
 * confirms what it applied. Without one, nothing would stop a late commit from landing after newer
 * rows (an old UPDATE overwriting a newer one), so those tables are held until the call answers;
 * a late well-formed answer confirms the ok prefix it reports per table. `wake` is called once the
 * call has answered either way, so the target's loop plans those tables again.
 */
export function awaitLateAnswer(slices: TableSlice[], call: Promise<WriteResult[]>, runner: { target: string; logger: Logger; wake: () => void }): void {
  const { target, logger } = runner;
  const held = slices.filter((s) => !s.fenced);
  if (held.length === 0) return;
  for (const s of held) s.table.awaitingLateAnswer = true;
  const names = held.map((s) => `"${s.table.name}"`).join(", ");
  logger.warn(`drain: ${names} on ${target} held until the timed-out batch answers: without a ledger a late commit must not land after newer rows`, { target });
  const expected = slices.reduce((n, s) => n + s.stmts.length, 0);
  const settle = (results: unknown) => {
    if (resultShapeProblem(results, expected) !== null) return;
    const answers = results as WriteResult[];
    let start = 0;
    for (const s of slices) {
      if (!s.fenced && s.table.outbox) {
        let ok = 0;
        while (ok < s.rows.length && answers[start + ok]!.ok) ok++;
        try {
          if (ok > 0) s.table.outbox.confirmThrough(s.rows[ok - 1]!.seq);
        } catch (error) {
          logger.error(`drain: confirming the late answer for "${s.table.name}" failed; its rows are redelivered: ${describeError(error).message}`, { namespace: s.table.name });
        }
      }
      start += s.stmts.length;
    }
    logger.info(`drain: the timed-out batch to ${target} answered late; what it committed of ${names} is confirmed`, { target });
  };
  call
    .then(settle, () => logger.info(`drain: the timed-out batch to ${target} failed late; ${names} are redelivered`, { target }))
    .finally(() => {
      for (const s of held) s.table.awaitingLateAnswer = false;
      runner.wake();
    });
}
