import { defineCommand } from "citty";
import { loadConfigToml } from "../../config/load.ts";
import { maskSecrets } from "../../masking.ts";
import { BoundedWriter } from "../../drain/bounded-writer.ts";
import { ensureStep } from "../../drain/remote-schema.ts";
import { targetDialect } from "../../drain/target.ts";
import { OutboxError } from "../../errors.ts";
import { injectedSteps, ledgerStep, type SchemaStep } from "../../sql/probe.ts";
import { dropSchemaSql } from "../../sql/schema.ts";
import { isTenantWriters, type OutboxWriter, type TenantWriters } from "../../writers/writer.ts";
import type { Dialect } from "../../vocabulary.ts";
import { configArg, configFile, jsonArg, logArgs } from "../args.ts";
import { print } from "../text-output.ts";

/** One target in `schema --json`: its dialect and the DDL it needs, in order. */
export interface TargetSchema {
  target: string;
  dialect: Dialect;
  statements: string[];
  /** With --apply: per statement, "applied", "already" (nothing to do) or the remote's error. */
  outcomes?: string[];
}

/** How long one DDL statement may take with --apply. */
const APPLY_TIMEOUT_MS = 60_000;

/**
 * `sqloutbox schema`: prints the remote DDL the drain needs, per target in its writer's dialect —
 * the delivery ledger table (unless `ledger = false`) and, for tables in the compatibility mode,
 * the `outbox_seq` column and its unique index — or with `--drop` the removal of the latter; with
 * `--apply` runs it on the targets, each statement only when a read-only probe finds it missing
 * ("already" otherwise). For DBAs when the drain's role may not create tables. The drain itself
 * never drops anything, and never drops the ledger.
 */
export const schema = defineCommand({
  meta: {
    name: "schema",
    description:
      "Print (or --apply) the remote DDL the drain needs: the ledger table, outbox_seq for injected tables; --drop removes outbox_seq",
  },
  args: {
    ...configArg,
    drop: {
      type: "boolean",
      description: "The DDL that removes outbox_seq and its index from injected tables instead",
    },
    apply: {
      type: "boolean",
      description:
        "Run the DDL on the targets (one statement at a time, skipping what is already there) instead of only printing it",
    },
    ...jsonArg,
    ...logArgs,
  },
  async run({ args }) {
    const file = configFile(args.config, { hint: "give --config FILE" });
    const { config, writers, secrets } = await loadConfigToml(file);
    const targets: TargetSchema[] = [];
    try {
      for (const target of config.apps.flatMap((a) => a.targets)) {
        const writer = writers[target.name]!;
        const dialect = targetDialect(target, writer);
        const injected = target.tables.filter((t) => t.injectOutboxSeq).map((t) => t.name);
        if (args.drop) {
          const statements = dropSchemaSql(injected, dialect);
          const entry: TargetSchema = { target: target.name, dialect, statements };
          if (args.apply) entry.outcomes = await drop(oneDatabase(target.name, writer), statements, secrets);
          targets.push(entry);
          continue;
        }
        const steps: Array<[string, SchemaStep]> = [
          ...(target.ledger
            ? [[target.ledgerTable, ledgerStep(target.ledgerTable, dialect)] as [string, SchemaStep]]
            : []),
          ...injected.flatMap((t) => injectedSteps(t, dialect).map((s) => [t, s] as [string, SchemaStep])),
        ];
        const entry: TargetSchema = { target: target.name, dialect, statements: steps.map(([, s]) => s.ddl) };
        if (args.apply)
          entry.outcomes = await apply(
            new BoundedWriter(target.name, oneDatabase(target.name, writer), APPLY_TIMEOUT_MS),
            steps,
            secrets,
          );
        targets.push(entry);
      }
    } finally {
      await Promise.all(
        Object.values(writers).map((w) =>
          isTenantWriters(w) ? undefined : Promise.resolve(w.close?.()).catch(() => {}),
        ),
      );
    }
    print(args.json ? JSON.stringify({ targets }, null, 2) : render(targets));
    const failed = targets.flatMap((t) => t.outcomes ?? []).filter((o) => o !== "applied" && o !== "already").length;
    if (failed > 0) throw new OutboxError("E_WRITE", `${failed} DDL statement(s) failed`);
  },
});

/** The writer --apply runs on: a tenant template has a database per tenant, which --apply does not reach (yet). */
function oneDatabase(target: string, writer: OutboxWriter | TenantWriters): OutboxWriter {
  if (!isTenantWriters(writer)) return writer;
  throw new OutboxError(
    "E_USAGE",
    `target "${target}" is a tenant template (a database per tenant, ${writer.describe()}): --apply runs on one database; print the DDL without --apply and run it in each tenant's database`,
  );
}

/** Ensures each step on its own (a refusal must not stop the next); "already" when its probe finds it there. */
async function apply(
  writer: BoundedWriter,
  steps: Array<[string, SchemaStep]>,
  secrets: readonly string[],
): Promise<string[]> {
  const outcomes: string[] = [];
  for (const [namespace, step] of steps) {
    const outcome = await ensureStep(writer, step, namespace);
    outcomes.push("done" in outcome ? outcome.done : maskSecrets(`error: ${outcome.error}`, secrets));
  }
  return outcomes;
}

/** Runs each DROP on its own, tolerating "already gone". */
async function drop(writer: OutboxWriter, statements: string[], secrets: readonly string[]): Promise<string[]> {
  const outcomes: string[] = [];
  for (const sql of statements) {
    const [result] = await writer.writeBatch([{ sql, args: [], namespace: "__schema__", seq: 0 }]);
    if (result?.ok) outcomes.push("applied");
    else if (result && isAlreadyGone(result.error)) outcomes.push("already");
    else outcomes.push(maskSecrets(`error: ${result?.error ?? "no result"}`, secrets));
  }
  return outcomes;
}

// "no such column/index", "does not exist", MySQL 1091 "Can't DROP …; check that it exists".
function isAlreadyGone(error: string | undefined): boolean {
  return /no such (column|index)|does not exist|check that (column\/key|it) exists/i.test(error ?? "");
}

function render(targets: TargetSchema[]): string {
  if (targets.length === 0) return "-- no targets";
  return targets
    .map((t) => {
      const lines = t.statements.map((s, i) => `${s};${t.outcomes ? `  -- ${t.outcomes[i]}` : ""}`);
      return [
        `-- target ${t.target} (${t.dialect})`,
        ...(lines.length ? lines : ["-- nothing to do: no ledger and no injected tables"]),
      ].join("\n");
    })
    .join("\n\n");
}
