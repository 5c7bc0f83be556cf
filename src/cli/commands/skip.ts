import { defineCommand } from "citty";
import { UsageError } from "../../errors.ts";
import { withOutbox } from "../../outbox/outbox.ts";
import { jsonArg, locationArgs, logArgs, parseSeq, rowArgs } from "../args.ts";
import { print, shellWord } from "../text-output.ts";
import { namespaceFile, requireOutboxNamespace, resolveLocations } from "../locations.ts";
import { dryRunArg } from "./dead-letter/letters.ts";
import { skipTenant } from "./skip-tenant.ts";

/**
 * `sqloutbox skip`: move a stuck head to the dead-letter log (reason "skipped"), so its namespace
 * advances; or, with `--tenant T`, every queued row of a tenant whose database is gone for good
 * (reason "tenant_gone", see skip-tenant.ts).
 */
export const skip = defineCommand({
  meta: {
    name: "skip",
    description:
      "Move rows aside into the dead-letter log (replayable): a stuck head (--namespace N --seq S), or a gone tenant's whole backlog (--tenant T, --dry-run first); safe while the drain runs",
  },
  args: {
    ...locationArgs,
    namespace: { ...rowArgs.namespace, required: false },
    seq: { ...rowArgs.seq, required: false, description: "The head's seq (with --namespace)" },
    app: rowArgs.app,
    tenant: {
      type: "string",
      valueHint: "T",
      description: "Every queued row of this tenant, in every table (its database no longer exists)",
    },
    expect: {
      type: "string",
      valueHint: "N",
      description: "With --tenant: move them only if the tenant still has exactly N rows queued (its --dry-run count)",
    },
    ...dryRunArg,
    ...jsonArg,
    ...logArgs,
  },
  async run({ args }) {
    if (args.tenant !== undefined) {
      if (args.namespace !== undefined || args.seq !== undefined)
        throw new UsageError("--tenant moves a tenant's rows in every table: not with --namespace or --seq");
      return skipTenant({ ...args, tenant: args.tenant });
    }
    if (args["dry-run"] !== undefined || args.expect !== undefined)
      throw new UsageError("--dry-run and --expect go with --tenant: a head is skipped by its --namespace and --seq");
    if (args.namespace === undefined)
      throw new UsageError("missing required option --namespace (or --tenant T for a tenant's whole backlog)");
    if (args.seq === undefined) throw new UsageError("missing required option --seq");
    const seq = parseSeq(args.seq);
    const { file } = namespaceFile(await resolveLocations(args), args.namespace, args.app);
    requireOutboxNamespace(file, args.namespace);
    // The Outbox methods run in one IMMEDIATE transaction with busy_timeout, so a running drain
    // either sees the row before or after the move, never half of it.
    // A head that starts a group moves with its whole group (every table's part of it).
    const moved = withOutbox(file, args.namespace, (outbox) => outbox.skipHead(seq));
    if (args.json)
      print(
        JSON.stringify(
          { action: "skip", namespace: args.namespace, seq, file, moved: moved.seqs, alsoIn: moved.others },
          null,
          2,
        ),
      );
    else {
      const group =
        moved.seqs.length > 1
          ? ` with its group: ${moved.seqs.length} rows (seqs ${moved.seqs.join(", ")})${moved.others.length > 0 ? `, also in ${moved.others.join(", ")}` : ""}`
          : "";
      print(`skipped ${args.namespace} seq ${seq}${group}: moved to the dead-letter log (reason "skipped"), ${file}`);
      const undo = [
        "sqloutbox",
        "dead-letter",
        "replay",
        ...locationFlags(args),
        "--namespace",
        shellWord(args.namespace),
        "--seq",
        String(seq),
      ];
      print(`undo with: ${undo.join(" ")}`);
    }
  },
});

/** The location flags of this command line, so the printed undo command can be pasted as is. */
function locationFlags(args: { config?: string; "db-dir"?: string; "db-file"?: string; app?: string }): string[] {
  const flags: string[] = [];
  if (args.config !== undefined) flags.push("--config", shellWord(args.config));
  if (args["db-dir"] !== undefined) flags.push("--db-dir", shellWord(args["db-dir"]));
  if (args["db-file"] !== undefined) flags.push("--db-file", shellWord(args["db-file"]));
  if (args.app !== undefined) flags.push("--app", shellWord(args.app));
  return flags;
}
