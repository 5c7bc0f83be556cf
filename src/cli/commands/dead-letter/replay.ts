import { defineCommand } from "citty";
import path from "node:path";
import { InvalidArgumentError, NotFoundError, UsageError } from "../../../errors.ts";
import { type DeadLetterFilter, type DeadLetterRef, findDeadLetterRefs } from "../../../outbox/dead-letters.ts";
import { type DeadLetter, withOutbox } from "../../../outbox/outbox.ts";
import { appArg, jsonArg, locationArgs, logArgs, parseSeq } from "../../args.ts";
import {
  appDirs,
  type Location,
  locationExists,
  namespaceFile,
  requireOutboxNamespace,
  resolveLocations,
} from "../../locations.ts";
import { oneLine, print, renderTable } from "../../text-output.ts";
import {
  dryRunArg,
  type FileFailure,
  failIf,
  filterOf,
  groupRows,
  keyArg,
  reasonArg,
  recorder,
  sinceArg,
} from "./letters.ts";

/** `dead-letter replay --json` with a selection: what was (with `dryRun`, would be) re-enqueued and what was skipped as already replayed. */
interface ReplayReport {
  action: "replay";
  dryRun: boolean;
  /** `newSeq` is null in a dry run. */
  replayed: Array<{ namespace: string; seq: number; newSeq: number | null; file: string }>;
  skipped: Array<{ namespace: string; seq: number; file: string; replayedAsSeq: number | null }>;
  failed: FileFailure[];
}

/** The human replay report: a row per namespace and file with counts and the seqs replayed, then a summary. */
function renderReplay(r: ReplayReport): string {
  if (r.replayed.length + r.skipped.length === 0)
    return r.failed.length > 0 ? "no dead letters match in the readable files" : "no dead letters match";
  const groups = groupRows([
    ...r.replayed.map((e) => ({ ...e, done: true })),
    ...r.skipped.map((e) => ({ ...e, done: false })),
  ]);
  const table = renderTable(
    [
      { header: "namespace" },
      { header: r.dryRun ? "to replay" : "replayed", right: true },
      { header: "skipped", right: true },
      { header: "seqs" },
      { header: "file" },
    ],
    groups.map((g) => {
      const done = g.rows.filter((e) => e.done).map((e) => e.seq);
      return [
        g.namespace,
        String(done.length),
        String(g.rows.length - done.length),
        oneLine(seqRanges(done), 40),
        g.file,
      ];
    }),
  );
  const skipped = r.skipped.length > 0 ? `; ${r.skipped.length} skipped (already replayed)` : "";
  const summary = r.dryRun
    ? `dry run: would replay ${r.replayed.length} dead letter(s) at the tail of their namespace${skipped}; nothing changed`
    : `replayed ${r.replayed.length} dead letter(s) at the tail of their namespace${skipped}`;
  return `${table}\n\n${summary}`;
}

/** Ascending seqs as ranges: `1-3, 7, 9-10`; `-` for none. */
function seqRanges(seqs: readonly number[]): string {
  const sorted = [...seqs].sort((a, b) => a - b);
  const parts: string[] = [];
  for (let i = 0; i < sorted.length; i++) {
    const start = sorted[i]!;
    while (i + 1 < sorted.length && sorted[i + 1] === sorted[i]! + 1) i++;
    parts.push(start === sorted[i] ? String(start) : `${start}-${sorted[i]}`);
  }
  return parts.join(", ") || "-";
}

/** `dead-letter replay`. */
export const replay = defineCommand({
  meta: {
    name: "replay",
    description:
      "Re-enqueue quarantined rows at the tail of their namespace, once each: one (--namespace N --seq S) or a selection (safe while the drain runs)",
  },
  args: {
    ...locationArgs,
    namespace: {
      type: "string",
      valueHint: "N",
      description: "With --seq: that namespace's dead letter; alone: all of its dead letters",
    },
    seq: { type: "string", valueHint: "S", description: "The one dead letter to replay (with --namespace)" },
    ...reasonArg,
    ...sinceArg,
    ...keyArg,
    all: { type: "boolean", description: "Every dead letter (a selection is required: never everything by accident)" },
    ...dryRunArg,
    ...appArg,
    ...jsonArg,
    ...logArgs,
  },
  async run({ args }) {
    const dryRun = args["dry-run"] === true;
    const all = args.all === true;
    if (args.seq !== undefined) {
      if (args.namespace === undefined) throw new UsageError("--seq needs --namespace N");
      if (args.reason !== undefined || args.since !== undefined || args.key !== undefined || all) {
        throw new UsageError(
          "--seq replays one dead letter; it does not combine with --reason, --since, --key or --all",
        );
      }
      return (dryRun ? replayOneDryRun : replayOne)(args.namespace, parseSeq(args.seq), args);
    }
    const given = (["namespace", "reason", "since", "key"] as const)
      .filter((k) => args[k] !== undefined)
      .map((k) => `--${k}`);
    if (all && given.length > 0)
      throw new UsageError(`--all selects every dead letter: give either --all or ${given.join(", ")}`);
    if (!all && given.length === 0)
      throw new UsageError(
        "dead-letter replay needs a selection: --namespace N [--seq S], --reason R, --since DUR|TIME, --key K, or --all",
      );
    const filter = filterOf(args);
    const report = replaySelection(appDirs(await resolveLocations(args), args.app), filter, dryRun);
    print(args.json ? JSON.stringify(report, null, 2) : renderReplay(report));
    failIf(report.failed, "replay failed in");
  },
});

type OneLetterArgs = { config?: string; "db-dir"?: string; "db-file"?: string; app?: string; json?: boolean };

/** The original one-letter replay: its output is unchanged. */
async function replayOne(namespace: string, seq: number, args: OneLetterArgs): Promise<void> {
  const { file } = namespaceFile(await resolveLocations(args), namespace, args.app);
  requireOutboxNamespace(file, namespace);
  // A letter of a group brings its whole group back, as one group again.
  const { newSeq, replayed } = withOutbox(file, namespace, (outbox) => {
    const newSeq = outbox.replayDead(seq); // refuses a letter replayed before, saying as what
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
      `dead letter ${seq} was already replayed as seq ${letter.replayedAsSeq} at ${letter.replayedAt} (namespace "${namespace}" in ${file})`,
      { namespace, file },
    );
  // What Outbox.replayDead brings back with it: the letters of its group not replayed yet.
  const group = letter.grp === null ? [] : letters.filter((l) => l.grp === letter.grp && l.replayedAt === null);
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

/**
 * Replays the selected letters of every location: per file and namespace ONE transaction
 * (Outbox.replayDeadMany), which re-checks each letter under the write lock, so a letter replayed
 * meanwhile is skipped. A dry run only reads. A file that fails is reported; the others go on.
 */
function replaySelection(dirs: readonly Location[], filter: DeadLetterFilter, dryRun: boolean): ReplayReport {
  const report: ReplayReport = { action: "replay", dryRun, replayed: [], skipped: [], failed: [] };
  const fail = recorder(report.failed);
  for (const loc of dirs) {
    if (!locationExists(loc)) continue;
    for (const { file, namespace, rows } of groupRows<DeadLetterRef>(
      findDeadLetterRefs(loc, filter, { onError: fail }),
    )) {
      if (dryRun) {
        for (const l of rows) {
          if (l.replayedAt === null) report.replayed.push({ namespace, seq: l.seq, newSeq: null, file });
          else report.skipped.push({ namespace, seq: l.seq, file, replayedAsSeq: l.replayedAsSeq });
        }
        continue;
      }
      try {
        const done = withOutbox(file, namespace, (outbox) => outbox.replayDeadMany(rows.map((l) => l.seq)));
        // Letters of a group come back with their group, whichever namespace the selection met first.
        const seen = new Set(report.replayed.map((r) => `${r.file}\0${r.namespace}\0${r.seq}`));
        for (const r of done.replayed)
          report.replayed.push({ namespace: r.namespace, seq: r.seq, newSeq: r.newSeq, file });
        for (const s of done.skipped)
          if (!seen.has(`${file}\0${s.namespace}\0${s.seq}`))
            report.skipped.push({ namespace: s.namespace, seq: s.seq, file, replayedAsSeq: s.replayedAsSeq });
      } catch (e) {
        fail(file, e as Error);
      }
    }
  }
  return report;
}
