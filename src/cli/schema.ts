import { defineCommand } from "citty";
import fs from "node:fs";
import path from "node:path";
import { loadConfigToml } from "../config/load.ts";
import { maskSecrets } from "../config/mask.ts";
import { isAlreadyApplied } from "../drain/answers.ts";
import { targetDialect } from "../drain/context.ts";
import { OutboxError, NotFoundError } from "../errors.ts";
import { dropSchemaSql, schemaSql } from "../sql/index.ts";
import type { Dialect, OutboxWriter } from "../writers/writer.ts";
import { jsonArg, logArgs } from "./_args.ts";
import { print } from "./_output.ts";
import { DEFAULT_CONFIG } from "./_targets.ts";

/** One target in `schema --json`: its dialect and the DDL for its injected tables, in order. */
export interface TargetSchema {
  target: string;
  dialect: Dialect;
  statements: string[];
  /** With --apply: per statement, "applied", "already" (nothing to do) or the remote's error. */
  outcomes?: string[];
}

/**
 * `sqloutbox schema`: prints the remote DDL for every injected table — the `outbox_seq` column and
 * its unique index, or with `--drop` their removal — per target, in its writer's dialect; with
 * `--apply` runs it on the targets. The drain itself only ever adds (auto_schema): dropping is
 * this explicit command.
 */
export const schema = defineCommand({
  meta: { name: "schema", description: "Print (or --apply) the remote DDL for outbox_seq on every injected table; --drop removes it" },
  args: {
    config: { type: "string", valueHint: "FILE", description: `The config file (default ./${DEFAULT_CONFIG})` },
    drop: { type: "boolean", description: "The DDL that removes outbox_seq and its index instead" },
    apply: { type: "boolean", description: "Run the DDL on the targets (one statement at a time) instead of only printing it" },
    ...jsonArg,
    ...logArgs,
  },
  async run({ args }) {
    const file = path.resolve(args.config ?? DEFAULT_CONFIG);
    if (!fs.existsSync(file)) throw new NotFoundError(`config file ${file} does not exist (give --config FILE)`);
    const { config, writers, secrets } = await loadConfigToml(file);
    const targets: TargetSchema[] = [];
    try {
      for (const target of config.apps.flatMap((a) => a.targets)) {
        const writer = writers[target.name]!;
        const dialect = targetDialect(target, writer);
        const tables = target.tables.filter((t) => t.injectOutboxSeq).map((t) => t.name);
        const statements = args.drop ? dropSchemaSql(tables, dialect) : schemaSql(tables, dialect);
        const entry: TargetSchema = { target: target.name, dialect, statements };
        if (args.apply) entry.outcomes = await apply(writer, statements, Boolean(args.drop), secrets);
        targets.push(entry);
      }
    } finally {
      await Promise.all(Object.values(writers).map((w) => Promise.resolve(w.close?.()).catch(() => {})));
    }
    print(args.json ? JSON.stringify({ targets }, null, 2) : render(targets));
    const failed = targets.flatMap((t) => t.outcomes ?? []).filter((o) => o !== "applied" && o !== "already").length;
    if (failed > 0) throw new OutboxError("E_WRITE", `${failed} DDL statement(s) failed`);
  },
});

/** Runs each statement on its own (a refusal must not stop the next), tolerating "already done". */
async function apply(writer: OutboxWriter, statements: string[], drop: boolean, secrets: readonly string[]): Promise<string[]> {
  const outcomes: string[] = [];
  for (const sql of statements) {
    const [result] = await writer.writeBatch([{ sql, args: [], namespace: "__schema__", seq: 0 }]);
    if (result?.ok) outcomes.push("applied");
    else if (result && (drop ? isAlreadyGone(result.error) : isAlreadyApplied(result))) outcomes.push("already");
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
      return [`-- target ${t.target} (${t.dialect})`, ...(lines.length ? lines : ["-- no injected tables"])].join("\n");
    })
    .join("\n\n");
}
