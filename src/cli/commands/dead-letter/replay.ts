import { defineCommand } from "citty";
import path from "node:path";
import { InvalidArgumentError, NotFoundError } from "../../../errors.ts";
import { findDeadLetterRefs, replayRefusal } from "../../../outbox/dead-letters.ts";
import { type DeadLetter, withOutbox } from "../../../outbox/outbox.ts";
import { parseSeq } from "../../args.ts";
import { namespaceFile, requireOutboxNamespace, resolveLocations } from "../../locations.ts";
import { print } from "../../text-output.ts";
import {
  actOnFiltered,
  expectOf,
  printSelection,
  selectionArgs,
  selectionFilter,
  checkOneLetter,
} from "./selection.ts";

/** `dead-letter replay`. */
export const replay = defineCommand({
  meta: {
    name: "replay",
    description:
      "Re-enqueue quarantined rows at the tail of their namespace, once each: one (--namespace N --seq S) or a selection (safe while the drain runs)",
  },
  args: {
    ...selectionArgs("replay"),
    force: {
      type: "boolean",
      description:
        "Replay letters in doubt too (the remote may have applied them: check it first); letters the remote applied are never replayed",
    },
  },
  async run({ args }) {
    const dryRun = args["dry-run"] === true;
    const _all = args.all === true;
    if (args.seq !== undefined) {
      checkOneLetter("replays", args);
      return (dryRun ? replayOneDryRun : replayOne)(args.namespace, parseSeq(args.seq), args);
    }
    const filter = selectionFilter("replay", args);
    const { report, failed } = await actOnFiltered("replay", args, filter, expectOf(args.expect), args.force === true);
    printSelection(report, failed, args);
  },
});

type OneLetterArgs = {
  config?: string;
  "db-dir"?: string;
  "db-file"?: string;
  app?: string;
  json?: boolean;
  force?: boolean;
};

/** The original one-letter replay: its output is unchanged. */
async function replayOne(namespace: string, seq: number, args: OneLetterArgs): Promise<void> {
  const { file } = namespaceFile(await resolveLocations(args), namespace, args.app);
  requireOutboxNamespace(file, namespace);
  // A letter of a group brings its whole group back, as one group again.
  const { newSeq, replayed } = withOutbox(file, namespace, (outbox) => {
    // Refuses a letter replayed before, saying as what, and one the remote may have applied (ReplayRefusedError).
    const newSeq = outbox.replayDead(seq, undefined, { force: args.force === true });
    return { newSeq, replayed: outbox.getDead(seq)!.grp === null ? [] : replayedWith(outbox.listDeadGroup(seq)) };
  });
  const group =
    replayed.length > 1
      ? ` with its group (${replayed.map((r) => `${r.namespace} ${r.seq} → ${r.newSeq}`).join(", ")})`
      : "";
  if (args.json)
    print(
      JSON.stringify(
        { action: "replay", namespace, seq, newSeq, file, ...(replayed.length > 1 ? { group: replayed } : {}) },
        null,
        2,
      ),
    );
  else
    print(`replayed dead letter ${namespace} seq ${seq} as seq ${newSeq}${group} (re-enqueued at the tail, ${file})`);
}

/**
 * The dry run of the one-letter replay, read-only: the letter and the group it would bring back,
 * or the refusal the real replay would meet (no such letter: exit 1; replayed before: exit 1).
 */
async function replayOneDryRun(namespace: string, seq: number, args: OneLetterArgs): Promise<void> {
  const { file } = namespaceFile(await resolveLocations(args), namespace, args.app);
  requireOutboxNamespace(file, namespace);
  // Only this file: a group spans the namespaces of one file, never another file of the db_dir.
  const letters = findDeadLetterRefs({ dbDir: path.dirname(file), dbFile: file });
  const letter = letters.find((l) => l.namespace === namespace && l.seq === seq);
  if (!letter) throw new NotFoundError(`no dead letter with seq ${seq} in namespace "${namespace}" (${file})`);
  if (letter.replayedAt !== null)
    throw new InvalidArgumentError(
      `${
        letter.replayedAsSeq === null
          ? `dead letter ${seq} was discarded at ${letter.replayedAt}: it is never replayed`
          : `dead letter ${seq} was already replayed as seq ${letter.replayedAsSeq} at ${letter.replayedAt}`
      } (namespace "${namespace}" in ${file})`,
      { namespace, file },
    );
  // What Outbox.replayDead brings back with it: the letters of its group not replayed yet.
  const group = letter.grp === null ? [] : letters.filter((l) => l.grp === letter.grp && l.replayedAt === null);
  // The refusal the real replay would meet: the remote applied the group, or may have (not forced).
  const remote = [letter, ...group].some((l) => l.remote === "applied")
    ? "applied"
    : [letter, ...group].some((l) => l.remote === "in doubt") && args.force !== true
      ? "in doubt"
      : null;
  if (remote !== null) throw replayRefusal({ file, namespace, seq, remote });
  if (args.json)
    print(
      JSON.stringify(
        {
          action: "replay",
          dryRun: true,
          namespace,
          seq,
          newSeq: null,
          file,
          ...(group.length > 1
            ? { group: group.map((l) => ({ namespace: l.namespace, seq: l.seq, newSeq: null })) }
            : {}),
        },
        null,
        2,
      ),
    );
  else {
    const members =
      group.length > 1 ? ` with its group (${group.map((l) => `${l.namespace} ${l.seq}`).join(", ")})` : "";
    print(
      `dry run: would replay dead letter ${namespace} seq ${seq}${members} at the tail of its namespace; nothing changed (${file})`,
    );
  }
}

/** The letters of a group as replayed: each with the seq it came back as. */
function replayedWith(group: readonly DeadLetter[]): Array<{ namespace: string; seq: number; newSeq: number }> {
  return group.map((l) => ({ namespace: l.namespace, seq: l.seq, newSeq: l.replayedAsSeq! }));
}
