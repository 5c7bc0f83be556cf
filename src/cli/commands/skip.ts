import { defineCommand } from "citty";
import { withOutbox } from "../../outbox/outbox.ts";
import { jsonArg, locationArgs, logArgs, parseSeq, rowArgs } from "../args.ts";
import { print, shellWord } from "../text-output.ts";
import { namespaceFile, requireOutboxNamespace, resolveLocations } from "../locations.ts";

/** `sqloutbox skip`: move a stuck head to the dead-letter log (reason "skipped"), so its namespace advances. */
export const skip = defineCommand({
  meta: {
    name: "skip",
    description: "Move a stuck head row to the dead-letter log so its namespace advances (safe while the drain runs)",
  },
  args: { ...locationArgs, ...rowArgs, ...jsonArg, ...logArgs },
  async run({ args }) {
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
