import { defineCommand } from "citty";
import path from "node:path";
import { InvalidArgumentError, NotFoundError, StorageError, UsageError } from "../../errors.ts";
import {
  findDeadLetterRefs,
  findDeadLetters,
  planPurge,
  type DeadLetterFilter,
  type DeadLetterRef,
  type FiledDeadLetter,
  type PurgeOutcome,
  type PurgeRule,
} from "../../outbox/dead-letters.ts";
import { withOutbox, type DeadLetter } from "../../outbox/outbox.ts";
import { isoTimestamp } from "../../outbox/timestamp.ts";
import { appArg, jsonArg, locationArgs, logArgs, namespaceFilterArg, parseSeq, rowArgs } from "../args.ts";
import { log } from "../cli-logger.ts";
import { parseDurationMs, parsePointInTime } from "../durations.ts";
import { oneLine, print, renderFields, renderTable, redact } from "../text-output.ts";
import {
  appDirs,
  describeLocation,
  filesOf,
  locationExists,
  namespaceFile,
  requireOutboxNamespace,
  resolveLocations,
  withAccessHint,
  type Location,
  type Locations,
} from "../locations.ts";

/** One dead letter in `dead-letter list/show --json`: where it lives plus the record (errors masked). */
interface DeadLetterEntry extends FiledDeadLetter {
  app: string | null;
  dbDir: string;
  /** The db_file holding it (null: a file of the db_dir). */
  dbFile: string | null;
}

/** A file that could not be read or written; the others are still processed, and the command exits 1. */
interface FileFailure {
  file: string;
  error: string;
}

/** `dead-letter replay --json` with a selection: what was (with `dryRun`, would be) re-enqueued and what was skipped as already replayed. */
interface ReplayReport {
  action: "replay";
  dryRun: boolean;
  /** `newSeq` is null in a dry run. */
  replayed: Array<{ namespace: string; seq: number; newSeq: number | null; file: string }>;
  skipped: Array<{ namespace: string; seq: number; file: string; replayedAsSeq: number | null }>;
  failed: FileFailure[];
}

/** One dead letter a purge deleted or kept. */
interface PurgeEntry {
  namespace: string;
  seq: number;
  file: string;
  reason: string;
  deadAt: string;
  replayedAt: string | null;
}

/** `dead-letter purge --json`: what was (with `dryRun`, would be) deleted, and what the chain still needs. */
interface PurgeReport {
  action: "purge";
  dryRun: boolean;
  olderThan: string;
  /** Letters dead before this time were selected. */
  before: string;
  unreplayed: boolean;
  purged: PurgeEntry[];
  kept: Array<PurgeEntry & { keptBecause: "linked" | "newest" }>;
  failed: FileFailure[];
}

/**
 * Reads the dead letters of every location that match `filter`, read-only. A file that cannot be
 * read is logged and listed in `failed`; the command then exits 1 after printing the rest.
 */
function collectDeadLetters(
  locations: Locations,
  filter: DeadLetterFilter = {},
): { entries: DeadLetterEntry[]; failed: FileFailure[] } {
  const out: DeadLetterEntry[] = [];
  const failed: FileFailure[] = [];
  for (const loc of locations.dirs) {
    if (!locationExists(loc)) continue;
    for (const d of findDeadLetters(loc, filter, { onError: recorder(failed) })) {
      const error = d.error === null ? null : redact(d.error, locations.secrets);
      out.push({ app: loc.app, dbDir: loc.dbDir, dbFile: loc.dbFile, ...d, error });
    }
  }
  return { entries: out, failed };
}

/** A failure callback that logs the file's error (with a permission hint) and records it. */
function recorder(failed: FileFailure[]): (file: string, err: Error) => void {
  return (file, err) => {
    const error = withAccessHint(err.message, file);
    failed.push({ file, error });
    log().error(error);
  };
}

function failIf(failed: readonly FileFailure[], what: string): void {
  if (failed.length > 0) throw new StorageError(`dead-letter ${what} ${failed.length} file(s)`, failed[0]!.file);
}

/** The human list: one aligned row per dead letter. */
function renderDeadLetters(entries: readonly DeadLetterEntry[]): string {
  if (entries.length === 0) return "no dead letters";
  const withApp = entries.some((e) => e.app !== null);
  // Only when a letter has a key, so lists of tables without keys print as they always did.
  const withKey = entries.some((e) => e.laneKey !== null);
  return renderTable(
    [
      ...(withApp ? [{ header: "app" }] : []),
      { header: "namespace" },
      { header: "seq", right: true },
      { header: "group", right: true },
      ...(withKey ? [{ header: "key" }] : []),
      { header: "reason" },
      { header: "attempts", right: true },
      { header: "dead at" },
      { header: "replayed as", right: true },
      { header: "error" },
    ],
    entries.map((e) => [
      ...(withApp ? [e.app ?? "-"] : []),
      e.namespace,
      String(e.seq),
      e.grp === null ? "-" : String(e.grp),
      ...(withKey ? [e.laneKey ?? "-"] : []),
      e.reason,
      String(e.attempts),
      e.deadAt,
      e.replayedAsSeq === null ? "-" : String(e.replayedAsSeq),
      oneLine(e.error, 50),
    ]),
  );
}

/**
 * The human view of one dead letter: every field, the SQL and its arguments in full, and the
 * letters of its group (`group`: every letter dead-lettered with it, this one included).
 */
function renderDeadLetter(e: DeadLetterEntry, group: readonly DeadLetterEntry[] = []): string {
  const members =
    group.length > 1
      ? ` — ${group.length} statements: ${group.map((g) => (g.namespace === e.namespace ? `seq ${g.seq}` : `${g.namespace} seq ${g.seq}`)).join(", ")}; replayed and skipped together`
      : "";
  return renderFields([
    ["namespace", e.namespace],
    ["seq", String(e.seq)],
    ["group", e.grp === null ? "-" : `${e.grp}${members}`],
    ...(e.laneKey === null ? [] : [["key", e.laneKey] as const]),
    ["file", e.file],
    ["source", e.source || "-"],
    ["created at", e.createdAt],
    ["dead at", e.deadAt],
    ["reason", e.reason],
    ["attempts", String(e.attempts)],
    ["error class", e.errorClass ?? "-"],
    ["error", e.error ?? "-"],
    ["prev seq", e.prevSeq === null ? "-" : String(e.prevSeq)],
    ["replayed at", e.replayedAt ?? "-"],
    ["replayed as", e.replayedAsSeq === null ? "-" : String(e.replayedAsSeq)],
    ["sql", e.tag],
    ["args", e.payload],
  ]);
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

/** The human purge report: a row per namespace and file with counts, then what was lost and what was kept. */
function renderPurge(r: PurgeReport): string {
  const lines: string[] = [];
  if (r.purged.length + r.kept.length > 0) {
    const groups = groupRows([
      ...r.purged.map((e) => ({ ...e, kept: false })),
      ...r.kept.map((e) => ({ ...e, kept: true })),
    ]);
    lines.push(
      renderTable(
        [
          { header: "namespace" },
          { header: r.dryRun ? "to purge" : "purged", right: true },
          { header: "never replayed", right: true },
          { header: "kept", right: true },
          { header: "file" },
        ],
        groups.map((g) => {
          const gone = g.rows.filter((e) => !e.kept);
          return [
            g.namespace,
            String(gone.length),
            String(gone.filter((e) => e.replayedAt === null).length),
            String(g.rows.length - gone.length),
            g.file,
          ];
        }),
      ),
      "",
    );
  }
  const lost = r.purged.filter((e) => e.replayedAt === null).length;
  const what = r.unreplayed ? "dead letter(s)" : "replayed dead letter(s)";
  lines.push(
    `${r.dryRun ? "dry run: would purge" : "purged"} ${r.purged.length} ${what} dead before ${r.before}${r.dryRun ? "; nothing changed" : ""}`,
  );
  if (lost > 0)
    lines.push(
      `${lost} of them never replayed: their events ${r.dryRun ? "would be" : "are"} gone for good (--unreplayed)`,
    );
  if (r.kept.length > 0)
    lines.push(
      `kept ${r.kept.length} that the chain still needs (a queued row links to it, or it is its namespace's newest dead letter)`,
    );
  return lines.join("\n");
}

/** Rows grouped by file and namespace, in order of first appearance. */
function groupRows<T extends { file: string; namespace: string }>(
  rows: readonly T[],
): Array<{ file: string; namespace: string; rows: T[] }> {
  const groups = new Map<string, { file: string; namespace: string; rows: T[] }>();
  for (const row of rows) {
    const key = `${row.file}\u0000${row.namespace}`;
    let group = groups.get(key);
    if (!group) groups.set(key, (group = { file: row.file, namespace: row.namespace, rows: [] }));
    group.rows.push(row);
  }
  return [...groups.values()];
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

const reasonArg = {
  reason: {
    type: "string",
    valueHint: "R",
    description: "Only this reason (max_attempts, undecodable, unsupported_statement, skipped, …)",
  },
} as const;
const sinceArg = {
  since: {
    type: "string",
    valueHint: "DUR|TIME",
    description:
      "Only letters dead within DUR (90s, 30m, 12h, 7d, 2w, 1h30m) or at/after an ISO-8601 TIME (UTC unless it has an offset)",
  },
} as const;
const keyArg = {
  key: {
    type: "string",
    valueHint: "K",
    description: "Only letters pushed with this key (a lane's key, as status shows it)",
  },
} as const;
const dryRunArg = {
  "dry-run": { type: "boolean", description: "Print what would be done and change nothing (files are only read)" },
} as const;

function filterOf(args: { namespace?: string; reason?: string; since?: string; key?: string }): DeadLetterFilter {
  const filter: DeadLetterFilter = {};
  if (args.namespace !== undefined) filter.namespace = args.namespace;
  if (args.reason !== undefined) filter.reason = args.reason;
  if (args.key !== undefined) {
    if (args.key === "") throw new UsageError("--key needs a key (the text status shows)");
    filter.key = args.key;
  }
  if (args.since !== undefined) filter.since = parsePointInTime("--since", args.since);
  return filter;
}

const list = defineCommand({
  meta: { name: "list", description: "List quarantined rows, optionally filtered (read-only)" },
  args: {
    ...locationArgs,
    ...namespaceFilterArg,
    ...reasonArg,
    ...sinceArg,
    ...keyArg,
    replayed: { type: "boolean", description: "Only letters already replayed" },
    unreplayed: { type: "boolean", description: "Only letters never replayed" },
    ...jsonArg,
    ...logArgs,
  },
  async run({ args }) {
    if (args.replayed === true && args.unreplayed === true)
      throw new UsageError("give --replayed or --unreplayed, not both");
    const filter = filterOf(args);
    if (args.replayed === true) filter.replayed = true;
    if (args.unreplayed === true) filter.replayed = false;
    const { entries, failed } = collectDeadLetters(await resolveLocations(args), filter);
    const filtered = Object.keys(filter).length > 0;
    const none = `no dead letters${filtered ? " match" : ""}${failed.length > 0 ? " in the readable files" : ""}`;
    print(
      args.json
        ? JSON.stringify({ deadLetters: entries }, null, 2)
        : entries.length === 0
          ? none
          : renderDeadLetters(entries),
    );
    failIf(failed, "could not read");
  },
});

const show = defineCommand({
  meta: { name: "show", description: "Show one quarantined row in full (read-only)" },
  args: { ...locationArgs, ...rowArgs, ...jsonArg, ...logArgs },
  async run({ args }) {
    const seq = parseSeq(args.seq);
    const locations = await resolveLocations(args);
    const { location, file } = namespaceFile(locations, args.namespace, args.app);
    const { entries, failed } = collectDeadLetters({ ...locations, dirs: [location] });
    failIf(failed, "could not read");
    const entry = entries.find((e) => e.seq === seq && e.namespace === args.namespace && e.file === file);
    if (!entry)
      throw new NotFoundError(
        `no dead letter with seq ${seq} in namespace "${args.namespace}" (${describeLocation(location)})`,
      );
    const group =
      entry.grp === null
        ? [entry]
        : entries.filter((e) => e.file === entry.file && e.grp === entry.grp && e.replayedAt === entry.replayedAt);
    print(
      args.json
        ? JSON.stringify({ ...entry, group: group.map(({ namespace, seq }) => ({ namespace, seq })) }, null, 2)
        : renderDeadLetter(entry, group),
    );
  },
});

const replay = defineCommand({
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

const purge = defineCommand({
  meta: {
    name: "purge",
    description:
      "Delete dead letters older than DUR: replayed ones only, unless --unreplayed (safe while the drain runs)",
  },
  args: {
    ...locationArgs,
    "older-than": {
      type: "string",
      valueHint: "DUR",
      required: true,
      description: "Letters dead longer than this (90s, 30m, 12h, 7d, 2w, 1h30m)",
    },
    ...namespaceFilterArg,
    unreplayed: { type: "boolean", description: "Also delete letters never replayed: their events are lost for good" },
    ...dryRunArg,
    ...appArg,
    ...jsonArg,
    ...logArgs,
  },
  async run({ args }) {
    const olderThan = args["older-than"];
    const before = new Date(Date.now() - parseDurationMs("--older-than", olderThan));
    const rule: PurgeRule = { before, unreplayed: args.unreplayed === true };
    const dirs = appDirs(await resolveLocations(args), args.app);
    const report: PurgeReport = {
      action: "purge",
      dryRun: args["dry-run"] === true,
      olderThan,
      before: isoTimestamp(before),
      unreplayed: rule.unreplayed === true,
      purged: [],
      kept: [],
      failed: [],
    };
    for (const loc of dirs) if (locationExists(loc)) purgeFiles(filesOf(loc), rule, args.namespace, report);
    print(args.json ? JSON.stringify(report, null, 2) : renderPurge(report));
    failIf(report.failed, "purge failed in");
  },
});

/**
 * Purges the files of one location file by file: a read-only plan first (it is the whole of a dry
 * run, and it keeps foreign files from being opened for writing), then per namespace with something
 * to delete ONE transaction (Outbox.purgeDead), which decides again under the write lock.
 */
function purgeFiles(
  files: readonly string[],
  rule: PurgeRule,
  namespace: string | undefined,
  report: PurgeReport,
): void {
  const fail = recorder(report.failed);
  for (const file of files) {
    try {
      for (const plan of planPurge(file, rule, namespace)) {
        const outcome: PurgeOutcome =
          !report.dryRun && plan.purged.length > 0
            ? withOutbox(file, plan.namespace, (outbox) => outbox.purgeDead(rule))
            : plan;
        for (const p of outcome.purged)
          report.purged.push({
            namespace: p.namespace,
            seq: p.seq,
            file,
            reason: p.reason,
            deadAt: p.deadAt,
            replayedAt: p.replayedAt,
          });
        for (const k of outcome.kept)
          report.kept.push({
            namespace: k.namespace,
            seq: k.seq,
            file,
            reason: k.reason,
            deadAt: k.deadAt,
            replayedAt: k.replayedAt,
            keptBecause: k.keptBecause,
          });
      }
    } catch (e) {
      fail(file, e as Error);
    }
  }
}

/** `sqloutbox dead-letter list|show|replay|purge`: inspect, replay and purge quarantined rows. */
export const deadLetter = defineCommand({
  meta: { name: "dead-letter", description: "Inspect, replay and purge quarantined rows: list, show, replay, purge" },
  subCommands: { list, show, replay, purge },
});
