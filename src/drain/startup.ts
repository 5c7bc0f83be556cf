import { maxSeqSql, schemaSql } from "../sql/index.ts";
import type { Statement } from "../writers/writer.ts";
import { isAlreadyApplied, parseMaxSeq } from "./answers.ts";
import { describeError, type TargetContext } from "./context.ts";
import { resequenceAboveRemote } from "./resequence.ts";
import { timedWriteBatch } from "./write.ts";

/**
 * Startup for one target: with `auto_schema`, adds `outbox_seq` + its unique index to every
 * injected table (never drops anything), then seeds each injected table's local sequence above
 * the remote `MAX(outbox_seq)`, so a fresh queue never reuses a seq the remote already absorbed,
 * and moves rows already pending at or below that mark above it (see resequenceAboveRemote).
 * An outage throws `WriteError` (the caller retries before delivering); a table-level refusal
 * (missing table, no permission) is logged and does not block the others.
 */
export async function prepareTarget(ctx: TargetContext): Promise<void> {
  const injected = ctx.tables.filter((t) => t.config.injectOutboxSeq);
  if (ctx.app.autoSchema) {
    for (const table of injected) {
      // One call per statement: a writer skips the rest of a namespace after a failure, and
      // "column already exists" must not stop the index from being created.
      for (const sql of schemaSql([table.config.name], ctx.dialect)) {
        const [result] = await timedWriteBatch(ctx, [ddl(sql, table.config.name)]);
        if (!isAlreadyApplied(result!)) {
          ctx.logger.warn(`drain: auto_schema on ${ctx.target.name}, table "${table.config.name}" failed: ${(result as { error?: string }).error}`);
        }
      }
    }
  }
  for (const table of injected) {
    const name = table.config.name;
    const [result] = await timedWriteBatch(ctx, [ddl(maxSeqSql(name, ctx.dialect), name)]);
    if (!result!.ok) {
      ctx.logger.warn(`drain: cannot read MAX(outbox_seq) of "${name}" on ${ctx.target.name}, local sequence not seeded: ${result!.error}`);
      continue;
    }
    const max = parseMaxSeq(result!.rows);
    if (max === undefined) {
      ctx.logger.warn(`drain: MAX(outbox_seq) of "${name}" on ${ctx.target.name} is not a number, local sequence not seeded`);
      continue;
    }
    // Set before anything local can fail: should seeding or the move fail here, planning still
    // moves colliding rows before they go out. A head marked `sentThrough` is never moved: rows
    // sent before a crash may be ours at the remote, and reconcileSent settles them first.
    table.remoteMark = Math.max(table.remoteMark, max);
    try {
      if (max > 0) table.outbox.seedSequence(max);
      resequenceAboveRemote(ctx, table);
    } catch (error) {
      ctx.logger.error(`drain: seeding "${name}" (${table.file}) above ${max} failed: ${describeError(error).message}`);
    }
  }
}

function ddl(sql: string, namespace: string): Statement {
  return { sql, args: [], namespace, seq: 0 };
}
