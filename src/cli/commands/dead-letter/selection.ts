// What `dead-letter replay` and `dead-letter discard` share for a selection of letters: the flags
// that make it, the letters it finds (never replayed or discarded yet), the action carried out by
// the library's actOnSelection (dry run, groups, the --expect guard), and the report it prints.
import { OutboxError, UsageError } from "../../../errors.ts";
import { type DeadLetterFilter, type DeadLetterRef, findDeadLetterRefs } from "../../../outbox/dead-letters.ts";
import {
  actOnSelection,
  type DeadAction,
  type RefusedLetter,
  type SelectionReport,
} from "../../../outbox/dead-selection.ts";
import { appDirs, locationExists, resolveLocations } from "../../locations.ts";
import { oneLine, print, renderTable, shellWord } from "../../text-output.ts";
import { appArg, jsonArg, locationArgs, logArgs } from "../../args.ts";
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
  tenantArg,
} from "./letters.ts";

/** The flags of a selection: what was given, so a command can check and echo them. */
export interface SelectionArgs {
  config?: string;
  "db-dir"?: string;
  "db-file"?: string;
  app?: string;
  namespace?: string;
  seq?: string;
  reason?: string;
  since?: string;
  key?: string;
  tenant?: string;
  all?: boolean;
  expect?: string;
  "dry-run"?: boolean;
  json?: boolean;
  /** A replay of letters in doubt too (see replay's --force). */
  force?: boolean;
}

/**
 * The flags of `dead-letter replay` and `discard`: one letter (`--namespace N --seq S`) or a selection, and
 * how to act on it.
 */
export function selectionArgs(verb: DeadAction) {
  return {
    ...locationArgs,
    namespace: {
      type: "string",
      valueHint: "N",
      description: "With --seq: that namespace's dead letter; alone: all of its dead letters",
    },
    seq: { type: "string", valueHint: "S", description: `The one dead letter to ${verb} (with --namespace)` },
    ...reasonArg,
    ...sinceArg,
    ...keyArg,
    ...tenantArg,
    all: { type: "boolean", description: "Every dead letter (a selection is required: never everything by accident)" },
    expect: {
      type: "string",
      valueHint: "N",
      description: "Act only if the selection still holds exactly N letters (the count its --dry-run printed)",
    },
    ...dryRunArg,
    ...appArg,
    ...jsonArg,
    ...logArgs,
  } as const;
}

/** The filter of a selection's flags; a usage error when none (or --all with another) is given. */
export function selectionFilter(command: string, args: SelectionArgs): DeadLetterFilter {
  const all = args.all === true;
  const given = (["namespace", "reason", "since", "key", "tenant"] as const)
    .filter((k) => args[k] !== undefined)
    .map((k) => `--${k}`);
  if (all && given.length > 0)
    throw new UsageError(`--all selects every dead letter: give either --all or ${given.join(", ")}`);
  if (!all && given.length === 0)
    throw new UsageError(
      `dead-letter ${command} needs a selection: --namespace N [--seq S], --reason R, --since DUR|TIME, --key K, --tenant T, or --all`,
    );
  return filterOf(args);
}

/** `--seq S` names one letter (`verb`: what is done to it): with `--namespace N`, and none of a selection's flags. */
export function checkOneLetter<A extends SelectionArgs>(
  verb: string,
  args: A,
): asserts args is A & { namespace: string } {
  if (args.namespace === undefined) throw new UsageError("--seq needs --namespace N");
  const given = (["reason", "since", "key", "tenant"] as const).some((k) => args[k] !== undefined);
  if (given || args.all === true)
    throw new UsageError(
      `--seq ${verb} one dead letter; it does not combine with --reason, --since, --key, --tenant or --all`,
    );
  if (args.expect !== undefined) throw new UsageError("--expect goes with a selection: --seq names its letter");
}

/** `--expect` as a count (an integer ≥ 0), or undefined. */
export function expectOf(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  if (!/^[0-9]+$/.test(value) || !Number.isSafeInteger(Number(value)))
    throw new UsageError(`--expect must be the count of letters the dry run selected (an integer ≥ 0), got "${value}"`);
  return Number(value);
}

/**
 * Finds the letters a filter selects in every location — those neither replayed nor discarded
 * yet — and acts on them (actOnSelection): a dry run only reads; with `expect`, nothing is done
 * unless exactly that many are selected, and each table's transaction first checks its letters
 * are still those. A file that cannot be read or written is reported and the others go on.
 */
export async function actOnFiltered(
  action: DeadAction,
  args: SelectionArgs,
  filter: DeadLetterFilter,
  expect: number | undefined,
  force = false,
): Promise<{ report: SelectionReport; failed: FileFailure[] }> {
  const failed: FileFailure[] = [];
  const fail = recorder(failed);
  const letters: DeadLetterRef[] = [];
  for (const loc of appDirs(await resolveLocations(args), args.app)) {
    if (locationExists(loc))
      letters.push(...findDeadLetterRefs(loc, { ...filter, replayed: false }, { onError: fail }));
  }
  const report = actOnSelection(action, letters, {
    dryRun: args["dry-run"] === true,
    expect,
    force,
    ...(expect === undefined ? {} : { guard: filter }),
  });
  for (const f of report.failed) fail(f.file, f.error);
  return { report, failed };
}

/** Prints the report (JSON or a table and a summary); a refused action, or a file that failed, exits 1. */
export function printSelection(report: SelectionReport, failed: readonly FileFailure[], args: SelectionArgs): void {
  const expect = expectOf(args.expect);
  const done = report.done.map(({ file, namespace, seq, newSeq }) =>
    report.action === "replay" ? { namespace, seq, newSeq: newSeq ?? null, file } : { namespace, seq, file },
  );
  const unchanged = report.unchanged.map(({ file, namespace, seq, replayedAsSeq }) => ({
    namespace,
    seq,
    file,
    replayedAsSeq,
  }));
  if (args.json)
    print(
      JSON.stringify(
        {
          action: report.action,
          dryRun: report.dryRun,
          selected: report.selected,
          ...(expect === undefined ? {} : { expect }),
          [report.action === "replay" ? "replayed" : "discarded"]: done,
          unchanged,
          // Deprecated: the name of earlier versions for `unchanged`, kept so scripts go on working.
          ...(report.action === "replay" ? { skipped: unchanged } : {}),
          ...(report.action === "replay"
            ? {
                refusedLetters: report.refusedLetters.map(({ file, namespace, seq, remote }) => ({
                  namespace,
                  seq,
                  file,
                  remote,
                })),
              }
            : {}),
          failed,
          ...(report.refused ? { refused: report.refused } : {}),
        },
        null,
        2,
      ),
    );
  else print(renderSelection(report, failed, args));
  if (report.refused) throw new OutboxError("E_CONFLICT", `dead-letter ${report.action}: ${report.refused.message}`);
  failIf(failed, `${report.action} failed in`);
  if (report.refusedLetters.length > 0) throw refusedError(report.refusedLetters, report.dryRun);
}

/**
 * Letters a replay refused (or would): exit 1, saying which and what to do — one letter's whole
 * message, or for many the count of each kind and the way forward.
 */
function refusedError(letters: readonly RefusedLetter[], dryRun: boolean): OutboxError {
  const verb = dryRun ? "would refuse" : "refused";
  if (letters.length === 1)
    return new OutboxError("E_REPLAY_REFUSED", `dead-letter replay ${verb}: ${letters[0]!.message}`);
  const doubt = letters.filter((l) => l.remote === "in doubt").length;
  const applied = letters.length - doubt;
  const parts = [
    ...(doubt > 0
      ? [
          `${doubt} in doubt (a batch that carried them got no answer: the drain settles them on its next delivery of their tables' rows; look again later, or replay them with --force once you have checked the remote does not hold them)`,
        ]
      : []),
    ...(applied > 0
      ? [`${applied} applied by the remote after they were dead-lettered (never replayed: discard them)`]
      : []),
  ];
  return new OutboxError(
    "E_REPLAY_REFUSED",
    `dead-letter replay ${verb} ${letters.length} letter(s): ${parts.join("; ")}`,
  );
}

const PAST: Record<DeadAction, string> = { replay: "replayed", discard: "discarded" };

/** The human report: a row per namespace and file with counts and the seqs acted on, then a summary. */
function renderSelection(r: SelectionReport, failed: readonly FileFailure[], args: SelectionArgs): string {
  if (r.refused) return `refused: ${r.refused.message}`;
  if (r.done.length + r.unchanged.length + r.refusedLetters.length === 0)
    return failed.length > 0 ? "no dead letters match in the readable files" : "no dead letters match";
  const groups = groupRows([
    ...r.done.map((e) => ({ ...e, kind: "done" as const })),
    ...r.unchanged.map((e) => ({ ...e, kind: "unchanged" as const })),
    ...r.refusedLetters.map((e) => ({ ...e, kind: "refused" as const })),
  ]);
  // Only when a letter was refused (the remote may have applied it), so other reports print as they always did.
  const withRefused = r.refusedLetters.length > 0;
  const count = (rows: ReadonlyArray<{ kind: string }>, kind: string) =>
    String(rows.filter((e) => e.kind === kind).length);
  const table = renderTable(
    [
      { header: "namespace" },
      { header: r.dryRun ? `to ${r.action}` : PAST[r.action], right: true },
      { header: "unchanged", right: true },
      ...(withRefused ? [{ header: "refused", right: true }] : []),
      { header: "seqs" },
      { header: "file" },
    ],
    groups.map((g) => {
      const done = g.rows.filter((e) => e.kind === "done").map((e) => e.seq);
      return [
        g.namespace,
        String(done.length),
        count(g.rows, "unchanged"),
        ...(withRefused ? [count(g.rows, "refused")] : []),
        oneLine(seqRanges(done), 40),
        g.file,
      ];
    }),
  );
  const withGroups =
    r.done.length > r.selected - r.unchanged.length
      ? ` (${r.selected - r.unchanged.length} selected, the rest with their groups)`
      : "";
  const unchanged = r.unchanged.length > 0 ? `; ${r.unchanged.length} unchanged (replayed or discarded before)` : "";
  const refused =
    r.refusedLetters.length > 0
      ? `; ${r.refusedLetters.length} ${r.dryRun ? "would be " : ""}refused (the remote applied them or may have: ${seqRanges(r.refusedLetters.map((l) => l.seq))})`
      : "";
  const what = r.action === "replay" ? "at the tail of their namespace" : "for good: never delivered, never replayed";
  if (!r.dryRun)
    return `${table}\n\n${PAST[r.action]} ${r.done.length} dead letter(s)${withGroups} ${what}${unchanged}${refused}`;
  const summary = `dry run: would ${r.action} ${r.done.length} dead letter(s)${withGroups} ${what}${unchanged}${refused}; nothing changed`;
  // The count to give back is what was selected: the guard counts the selection, as the admin API's `expect`.
  const next =
    r.action === "discard"
      ? `\nto ${r.action} them: ${commandLine(args)}${args.seq === undefined ? ` --expect ${r.selected}` : ""}`
      : "";
  return `${table}\n\n${summary}${next}`;
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

/** This command line without --dry-run, to be pasted as is. */
function commandLine(args: SelectionArgs): string {
  const flags: string[] = ["sqloutbox", "dead-letter", "discard"];
  for (const name of [
    "config",
    "db-dir",
    "db-file",
    "app",
    "namespace",
    "seq",
    "reason",
    "since",
    "key",
    "tenant",
  ] as const) {
    const value = args[name];
    if (value !== undefined) flags.push(`--${name}`, shellWord(value));
  }
  if (args.all === true) flags.push("--all");
  return flags.join(" ");
}
