import type { OutboxRow } from "../outbox/outbox.ts";
import type { ServedTable, TargetContext } from "./context.ts";

/**
 * Moves an injected table's pending queue above `table.remoteMark` (the remote `MAX(outbox_seq)`
 * read once this drain's own sent rows were settled) when its head is at or below it. Such rows
 * were never applied by us — the remote got those seqs from another queue (the old machine of a
 * migration) — and would be absorbed by `ON CONFLICT (outbox_seq) DO NOTHING` or skipped by the
 * UPDATE guard: silent loss. Moving the WHOLE queue keeps table order. A head still marked
 * `sentThrough` is left to reconcileSent; a queue with history is not moved (see `freshQueue`).
 * Returns how many rows moved; a local error propagates.
 */
export function resequenceAboveRemote(ctx: TargetContext, table: ServedTable, head: OutboxRow | null = table.outbox.head()): number {
  const mark = table.remoteMark;
  if (mark <= 0 || !table.config.injectOutboxSeq) return 0;
  if (!head || head.seq > mark || head.sentThrough != null) return 0;
  if (!table.freshQueue) {
    // Rows an earlier drain applied but never confirmed (it recorded no sent_through) look just
    // like this; resending them under new seqs would duplicate them. Redeliver as they are.
    if (table.reportedMark !== mark) {
      table.reportedMark = mark;
      ctx.logger.warn(
        `drain: "${table.config.name}" on ${ctx.target.name} holds outbox_seq up to ${mark}, at or above pending seq ${head.seq} of a queue that has delivered before: ` +
          `treating those rows as applied by an earlier drain (their redelivery is absorbed). If another queue writes this table, its seqs collide with this one's.`,
      );
    }
    return 0;
  }
  const moved = table.outbox.resequenceAbove(mark);
  if (!moved) return 0;
  ctx.logger.warn(
    `drain: "${table.config.name}" on ${ctx.target.name} already holds outbox_seq up to ${mark} from rows this queue did not write ` +
      `(another machine's outbox?); moved ${moved.count} pending rows from seq ${moved.oldFirst}..${moved.oldLast} to ${moved.newFirst}..${moved.newLast}, ` +
      `in order, so none is absorbed as a duplicate (the old seqs are in the dead log as "resequenced", already replayed)`,
  );
  return moved.count;
}
