import { defineCommand } from "citty";
import path from "node:path";
import { OutboxError } from "../../errors.ts";
import { verifyFile } from "../../outbox/inspect.ts";
import type { ChainGap } from "../../outbox/outbox.ts";
import { jsonArg, locationArgs, logArgs } from "../args.ts";
import { log } from "../cli-logger.ts";
import { print, renderTable, withoutFile } from "../text-output.ts";
import {
  describeLocation,
  filesOf,
  locationExists,
  resolveLocations,
  withAccessHint,
  type Locations,
} from "../locations.ts";

/** One file in `verify --json`. */
interface VerifiedFile {
  app: string | null;
  dbDir: string;
  /** The db_file the file is (null: a file of the db_dir). */
  dbFile: string | null;
  file: string;
  ok: boolean;
  namespaces: Array<{ namespace: string; rows: number; gaps: ChainGap[]; problems: string[] }>;
  /** File-level problems: unreadable, not an outbox file, SQLite quick_check failures. */
  problems: string[];
}

/** The stable `verify --json` document. */
interface VerifyReport {
  ok: boolean;
  files: VerifiedFile[];
}

/** Scans every outbox file of every location read-only; a file that cannot be read is a problem, not a crash. */
function collectVerify(locations: Locations): VerifyReport {
  const files: VerifiedFile[] = [];
  for (const loc of locations.dirs) {
    if (!locationExists(loc)) continue;
    for (const file of filesOf(loc)) {
      const { ok, namespaces, problems } = verifyFile(file);
      const shown = namespaces.map(({ namespace, rows, gaps, problems }) => ({ namespace, rows, gaps, problems }));
      files.push({
        app: loc.app,
        dbDir: loc.dbDir,
        dbFile: loc.dbFile,
        file,
        ok,
        namespaces: shown,
        problems: problems.map((p) => withAccessHint(p, file)),
      });
    }
  }
  return { ok: files.every((f) => f.ok), files };
}

/** The human view: one row per namespace, then every problem spelled out. */
function renderVerify(report: VerifyReport): string {
  const rows: string[][] = [];
  const details: string[] = [];
  // As in status: with --config the APP column tells apart two apps' files of one name.
  const withApp = report.files.some((f) => f.app !== null);
  for (const f of report.files) {
    const name = path.basename(f.file);
    const app = withApp ? [f.app ?? "-"] : [];
    for (const problem of f.problems) details.push(`${f.file}: ${withoutFile(problem, f.file)}`);
    for (const ns of f.namespaces) {
      const bad = ns.gaps.length > 0 || ns.problems.length > 0;
      rows.push([...app, name, ns.namespace, String(ns.rows), String(ns.gaps.length), bad ? "PROBLEM" : "ok"]);
      for (const gap of ns.gaps) {
        details.push(
          `${f.file} [${ns.namespace}]: row ${gap.seq} links to prev_seq ${gap.prevSeq}, which is in no table`,
        );
      }
      for (const problem of ns.problems) details.push(`${f.file} [${ns.namespace}]: ${problem}`);
    }
    if (f.namespaces.length === 0) rows.push([...app, name, "-", "0", "0", f.ok ? "ok" : "PROBLEM"]);
    else if (f.problems.length > 0) rows.push([...app, name, "(file)", "-", "-", "PROBLEM"]);
  }
  if (report.files.length === 0) return "no outbox files found";
  const table = renderTable(
    [
      ...(withApp ? [{ header: "app" }] : []),
      { header: "file" },
      { header: "namespace" },
      { header: "rows", right: true },
      { header: "gaps", right: true },
      { header: "result" },
    ],
    rows,
  );
  const summary = report.ok
    ? `ok: ${report.files.length} file(s) verified, no problems`
    : `${details.length} problem(s):\n${details.map((d) => `  - ${d}`).join("\n")}`;
  return `${table}\n\n${summary}`;
}

/** `sqloutbox verify`: offline, read-only integrity scan; exit 1 when anything is wrong. */
export const verify = defineCommand({
  meta: { name: "verify", description: "Offline integrity scan of the outbox files (read-only; exit 1 on problems)" },
  args: { ...locationArgs, ...jsonArg, ...logArgs },
  async run({ args }) {
    const locations = await resolveLocations(args);
    for (const loc of locations.dirs) {
      if (!locationExists(loc)) log().info(`${describeLocation(loc)} does not exist yet: nothing to verify`);
    }
    const report = collectVerify(locations);
    print(args.json ? JSON.stringify(report, null, 2) : renderVerify(report));
    if (!report.ok) {
      const bad = report.files.filter((f) => !f.ok).length;
      throw new OutboxError("E_CHAIN", `verify found problems in ${bad} of ${report.files.length} file(s)`);
    }
  },
});
