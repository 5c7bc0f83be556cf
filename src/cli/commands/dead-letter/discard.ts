import { defineCommand } from "citty";
import path from "node:path";
import { InvalidArgumentError, NotFoundError, UsageError } from "../../../errors.ts";
import { findDeadLetterRefs } from "../../../outbox/dead-letters.ts";
import { actOnSelection } from "../../../outbox/dead-selection.ts";
import { parseSeq } from "../../args.ts";
import { namespaceFile, requireOutboxNamespace, resolveLocations } from "../../locations.ts";
import {
  actOnFiltered,
  expectOf,
  printSelection,
  selectionArgs,
  selectionFilter,
  checkOneLetter,
} from "./selection.ts";

/**
 * `dead-letter discard`: gives dead letters up for good — never delivered, never replayed — each
 * with its group. They stay in the log with their own error (the chain may still need them) until
 * the drain prunes them after `retain_replayed_days`, as replayed ones. A selection by filter is
 * counted first: `--dry-run` says how many, and the real run needs `--expect` that count (the
 * admin API's guard); one letter named by `--namespace N --seq S` needs no count.
 */
export const discard = defineCommand({
  meta: {
    name: "discard",
    description:
      "Give dead letters up for good (never delivered, never replayed): one (--namespace N --seq S) or a selection, --dry-run first, then --expect the count it printed",
  },
  args: selectionArgs("discard"),
  async run({ args }) {
    const dryRun = args["dry-run"] === true;
    if (args.seq !== undefined) {
      checkOneLetter("discards", args);
      return discardOne(args.namespace, parseSeq(args.seq), args);
    }
    const filter = selectionFilter("discard", args);
    const expect = expectOf(args.expect);
    if (!dryRun && expect === undefined)
      throw new UsageError(
        "dead-letter discard gives letters up for good: run it with --dry-run first, then again with --expect N, N the count it selected",
      );
    const { report, failed } = await actOnFiltered("discard", args, filter, expect);
    printSelection(report, failed, args);
  },
});

type OneLetterArgs = Parameters<typeof printSelection>[2];

/**
 * One letter (with its group): refused, as replay refuses it, when it is no dead letter or was replayed or
 * discarded before.
 */
async function discardOne(namespace: string, seq: number, args: OneLetterArgs): Promise<void> {
  const { file } = namespaceFile(await resolveLocations(args), namespace, args.app);
  requireOutboxNamespace(file, namespace);
  // Only this file: a group spans the namespaces of one file, never another file of the db_dir.
  const letter = findDeadLetterRefs({ dbDir: path.dirname(file), dbFile: file }, { namespace }).find(
    (l) => l.seq === seq,
  );
  if (!letter) throw new NotFoundError(`no dead letter with seq ${seq} in namespace "${namespace}" (${file})`);
  if (letter.replayedAt !== null)
    throw new InvalidArgumentError(
      `${
        letter.replayedAsSeq === null
          ? `dead letter ${seq} was discarded before, at ${letter.replayedAt}`
          : `dead letter ${seq} was already replayed as seq ${letter.replayedAsSeq} at ${letter.replayedAt}`
      } (namespace "${namespace}" in ${file})`,
      { namespace, file },
    );
  const report = actOnSelection("discard", [letter], { dryRun: args["dry-run"] === true });
  printSelection(report, [], args);
}
