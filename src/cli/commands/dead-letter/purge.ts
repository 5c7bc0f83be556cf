import { defineCommand } from "citty";
import { type PurgeOutcome, type PurgeRule, planPurge } from "../../../outbox/dead-letters.ts";
import { withOutbox } from "../../../outbox/outbox.ts";
import { isoTimestamp } from "../../../outbox/timestamp.ts";
import { appArg, jsonArg, locationArgs, logArgs, namespaceFilterArg } from "../../args.ts";
import { parseDurationMs } from "../../durations.ts";
import { appDirs, filesOf, locationExists, resolveLocations } from "../../locations.ts";
import { print, renderTable } from "../../text-output.ts";
import { dryRunArg, type FileFailure, failIf, groupRows, recorder, tenantArg, tenantOf } from "./letters.ts";

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
  /** With --tenant: only that tenant's letters. */
  tenant?: string;
  purged: PurgeEntry[];
  kept: Array<PurgeEntry & { keptBecause: "linked" | "newest" | "group" }>;
  failed: FileFailure[];
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
  const what = `${r.unreplayed ? "dead letter(s)" : "replayed dead letter(s)"}${r.tenant ? ` of tenant ${r.tenant}` : ""}`;
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

/** `dead-letter purge`. */
export const purge = defineCommand({
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
    ...tenantArg,
    unreplayed: { type: "boolean", description: "Also delete letters never replayed: their events are lost for good" },
    ...dryRunArg,
    ...appArg,
    ...jsonArg,
    ...logArgs,
  },
  async run({ args }) {
    const olderThan = args["older-than"];
    const before = new Date(Date.now() - parseDurationMs("--older-than", olderThan));
    const rule: PurgeRule = {
      before,
      unreplayed: args.unreplayed === true,
      ...(args.tenant === undefined ? {} : { tenant: tenantOf(args.tenant) }),
    };
    const dirs = appDirs(await resolveLocations(args), args.app);
    const report: PurgeReport = {
      action: "purge",
      dryRun: args["dry-run"] === true,
      olderThan,
      before: isoTimestamp(before),
      unreplayed: rule.unreplayed === true,
      ...(rule.tenant === undefined ? {} : { tenant: rule.tenant }),
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
