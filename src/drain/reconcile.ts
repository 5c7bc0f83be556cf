import { maxSeqSql } from "../sql/index.ts";
import { parseMaxSeq } from "./answers.ts";
import { describeError, holdAfterLocalError, type ServedTable, type TargetContext } from "./context.ts";
import { timedControlStatement } from "./write.ts";

/**
 * Settles batches whose outcome was lost — the drain died, or the target failed, after the rows
 * were sent — before anything is delivered again. Such a head carries `sentThrough`. For an
 * injected table the remote `MAX(outbox_seq)` is a high-water mark: a namespace is applied in seq
 * order and a failed statement stops it, so every sent row at or below that mark is already in
 * the remote. Those rows are confirmed instead of redelivered: a redelivered INSERT followed by an
 * UPDATE of the same row would otherwise meet a row whose outbox_seq the UPDATE already moved on
 * (a primary-key error, or a duplicate row where the table has no key). Rows never sent are
 * never confirmed this way, whatever the remote holds; pending rows still at or below the mark
 * afterwards are moved above it before delivery (`remoteMark`). An outage while asking throws `WriteError`.
 */
export async function reconcileSent(ctx: TargetContext): Promise<number> {
  let confirmed = 0;
  for (const table of ctx.tables) {
    if (table.holdUntil > ctx.now() || table.awaitingLateAnswer) continue;
    const head = table.outbox.head();
    if (head?.sentThrough == null) continue;
    if (!table.config.injectOutboxSeq) {
      table.outbox.clearSent(head.seq); // no high-water mark: at-least-once redelivery it is
      continue;
    }
    const name = table.config.name;
    const result = await timedControlStatement(ctx, maxSeqSql(name, ctx.dialect), name);
    const remoteMax = result.ok ? parseMaxSeq(result.rows) : undefined;
    try {
      if (remoteMax === undefined) {
        ctx.logger.warn(`drain: cannot read MAX(outbox_seq) of "${name}" on ${ctx.target.name}; redelivering its interrupted batch`);
        table.remoteMark = 0; // the batch may have landed: its rows must not be moved as foreign collisions
      } else {
        confirmed += confirmThrough(table, Math.min(remoteMax, head.sentThrough), ctx.app.batchSize);
        // What is left at or below the mark was never applied by us; planning moves it above.
        table.remoteMark = Math.max(table.remoteMark, remoteMax);
      }
      const still = table.outbox.head();
      if (still?.sentThrough != null) table.outbox.clearSent(still.seq);
    } catch (error) {
      const ms = holdAfterLocalError(table, ctx.now());
      ctx.logger.error(`drain: local error reconciling namespace "${name}" (${table.file}), retrying in ${ms} ms: ${describeError(error).message}`);
    }
  }
  if (confirmed > 0) ctx.logger.info(`drain: ${confirmed} rows sent to ${ctx.target.name} before an interruption were already applied there; confirmed without redelivery`);
  return confirmed;
}

function confirmThrough(table: ServedTable, bound: number, pageSize: number): number {
  let total = 0;
  for (;;) {
    const rows = table.outbox.fetchUnsynced(pageSize);
    const seqs = rows.filter((r) => r.seq <= bound).map((r) => r.seq);
    if (seqs.length === 0) return total;
    table.outbox.confirm(seqs);
    total += seqs.length;
    if (seqs.length < rows.length || rows.length < pageSize) return total;
  }
}
