import type { Logger } from "../logger.ts";
import { injectedSteps } from "../sql/probe.ts";
import { maxSeqSql } from "../sql/schema.ts";
import type { Dialect } from "../vocabulary.ts";
import { parseCount, type BoundedWriter } from "./bounded-writer.ts";
import { ensureStep } from "./remote-schema.ts";
import type { DrainTable } from "./table/table.ts";

/**
 * Startup of the compatibility mode (`inject_outbox_seq = true`) for one target's injected tables.
 * With `auto_schema`, adds the `outbox_seq` column and its unique index — only when a read-only
 * probe finds them missing, so a drain start takes no lock on a table that has them. Then the
 * local sequence is seeded above the remote `MAX(outbox_seq)`, and a fresh queue (a new machine
 * taking over from an old one) whose pending rows sit at or below it is moved above it: those seqs
 * belong to the old queue, and ON CONFLICT (outbox_seq) would absorb ours as duplicates. A table
 * the remote cannot serve is held (remote schema); an outage throws.
 */
export async function prepareInjected(
  writer: BoundedWriter,
  dialect: Dialect,
  tables: DrainTable[],
  autoSchema: boolean,
  logger: Logger,
  now: number,
): Promise<void> {
  for (const table of tables) {
    if (!table.needsCompatSetup(now)) continue;
    const name = table.name;
    const problem = autoSchema ? await ensureSeqSchema(writer, dialect, name) : null;
    const result = await writer.control(maxSeqSql(name, dialect), name);
    if (!result.ok) {
      table.hold(
        {
          reason: "remote schema",
          message: `outbox_seq of "${name}" is not readable${problem ? ` (${problem})` : ""}: ${result.error}; "sqloutbox schema" prints the DDL`,
        },
        now,
      );
      continue;
    }
    if (problem)
      logger.warn(
        `drain: table "${name}" on ${writer.target}: ${problem} (check that its unique outbox_seq index exists; "sqloutbox schema" prints the DDL)`,
        { target: writer.target, namespace: name },
      );
    const max = parseCount(result.rows, 0) ?? 0;
    try {
      const moved = table.compatReady(max);
      if (moved)
        logger.warn(
          `drain: "${name}" on ${writer.target} already holds outbox_seq up to ${max} from rows this queue did not write (another machine's outbox?); ` +
            `moved ${moved.count} pending rows from seq ${moved.oldFirst}..${moved.oldLast} to ${moved.newFirst}..${moved.newLast}, in order, so none is absorbed as a duplicate`,
          { target: writer.target, namespace: name, rows: moved.count },
        );
    } catch (error) {
      // Nothing is sent before this succeeds: rows under colliding seqs would be absorbed remotely.
      table.hold({ reason: "local", error, what: `seeding "${name}" above the remote MAX(outbox_seq) ${max}` }, now);
    }
  }
}

/** Adds what a probe finds missing of `outbox_seq` + its index; returns the refusal, if any (no ALTER rights, …). */
async function ensureSeqSchema(writer: BoundedWriter, dialect: Dialect, name: string): Promise<string | null> {
  for (const step of injectedSteps(name, dialect)) {
    const outcome = await ensureStep(writer, step, name);
    if ("error" in outcome) return `auto_schema could not create the ${step.what}: ${outcome.error}`;
  }
  return null;
}
