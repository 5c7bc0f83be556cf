import { maxSeqSql, schemaSql } from "../sql/index.ts";
import { isAlreadyApplied, parseMaxSeq } from "./answers.ts";
import { describeError, type TargetContext } from "./context.ts";
import { resequenceAboveRemote } from "./resequence.ts";
import { timedControlStatement } from "./write.ts";

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
  for (const table of injected) {
    const name = table.config.name;
    const schemaErrors = ctx.app.autoSchema ? await applySchema(ctx, name) : [];
    const schemaNote = schemaErrors.length ? `auto_schema failed: ${schemaErrors.join("; ")}` : "";
    const result = await timedControlStatement(ctx, maxSeqSql(name, ctx.dialect), name);
    if (!result.ok) {
      // One line for a table the remote cannot serve (typically: it does not exist yet).
      ctx.logger.warn(
        `drain: table "${name}" on ${ctx.target.name}: local sequence not seeded, its rows will fail until this is fixed: ${schemaNote ? `${schemaNote}; ` : ""}MAX(outbox_seq) failed: ${result.error}`,
      );
      continue;
    }
    // The column is readable (a DBA may have added it for a drain without ALTER rights), but the
    // unique index that absorbs redeliveries may be missing: say so.
    if (schemaNote) ctx.logger.warn(`drain: table "${name}" on ${ctx.target.name}: ${schemaNote} (check that its unique outbox_seq index exists; "sqloutbox schema" prints the DDL)`);
    const max = parseMaxSeq(result.rows);
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

/**
 * Adds `outbox_seq` and its index to one remote table; returns the refusals that do not mean
 * "already there" (missing table, no ALTER rights, …), for the caller to report once.
 */
async function applySchema(ctx: TargetContext, name: string): Promise<string[]> {
  const errors: string[] = [];
  // One call per statement: a writer skips the rest of a namespace after a failure, and
  // "column already exists" must not stop the index from being created.
  for (const sql of schemaSql([name], ctx.dialect)) {
    const result = await timedControlStatement(ctx, sql, name);
    if (!result.ok && !isAlreadyApplied(result)) errors.push(String(result.error));
  }
  return errors;
}
