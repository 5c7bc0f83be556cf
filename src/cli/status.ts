import { defineCommand } from "citty";
import { StorageError, UsageError } from "../errors.ts";
import { healthAll, type NamespaceHealth } from "../outbox/health.ts";
import { jsonArg, locationArgs, logArgs } from "./_args.ts";
import { withoutFile } from "./verify.ts";
import { formatAge, oneLine, print, renderTable, redact } from "./_output.ts";
import { isDir, resolveLocations, withAccessHint, type Locations } from "./_targets.ts";

/** One namespace in `status --json`: where it lives plus its health (errors masked). */
export interface StatusEntry extends NamespaceHealth {
  app: string | null;
  dbDir: string;
}

/** The stable `status --json` document. */
export interface StatusReport {
  generatedAt: string;
  dbDirs: Array<{ app: string | null; dbDir: string; exists: boolean }>;
  namespaces: StatusEntry[];
  /** Files that could not be read (not a database, not an outbox file); they make the exit code 1. */
  unreadable: Array<{ file: string; error: string }>;
  totals: { namespaces: number; depth: number; stuck: number; deadLetters: number };
}

/** Reads the health of every namespace of every location; opens files read-only, creates nothing. */
export function collectStatus(locations: Locations, now = new Date()): StatusReport {
  const dbDirs: StatusReport["dbDirs"] = [];
  const namespaces: StatusEntry[] = [];
  const unreadable: StatusReport["unreadable"] = [];
  for (const loc of locations.dirs) {
    const exists = isDir(loc.dbDir);
    dbDirs.push({ app: loc.app, dbDir: loc.dbDir, exists });
    if (!exists) continue;
    const onError = (file: string, err: Error) => unreadable.push({ file, error: withAccessHint(err.message, file) });
    for (const h of healthAll(loc.dbDir, { maxPending: loc.maxPending, now, onError })) {
      const lastError = h.lastError === null ? null : redact(h.lastError, locations.secrets);
      namespaces.push({ app: loc.app, dbDir: loc.dbDir, ...h, lastError });
    }
  }
  return {
    generatedAt: now.toISOString(),
    dbDirs,
    namespaces,
    unreadable,
    totals: {
      namespaces: namespaces.length,
      depth: namespaces.reduce((n, h) => n + h.depth, 0),
      stuck: namespaces.filter((h) => h.isStuck).length,
      deadLetters: namespaces.reduce((n, h) => n + h.deadLetterCount, 0),
    },
  };
}

/** The human view of a status report: one aligned row per namespace, then totals. */
export function renderStatus(report: StatusReport): string {
  const withApp = report.dbDirs.some((d) => d.app !== null);
  const withCapacity = report.namespaces.some((h) => h.capacityPct !== null);
  const columns = [
    ...(withApp ? [{ header: "app" }] : []),
    { header: "namespace" },
    { header: "depth", right: true },
    { header: "oldest", right: true },
    { header: "head", right: true },
    { header: "attempts", right: true },
    { header: "stuck" },
    { header: "dead", right: true },
    ...(withCapacity ? [{ header: "capacity", right: true }] : []),
    { header: "last error" },
  ];
  const rows = report.namespaces.map((h) => [
    ...(withApp ? [h.app ?? "-"] : []),
    h.namespace,
    String(h.depth),
    formatAge(h.oldestPendingAgeMs),
    h.headSeq === null ? "-" : String(h.headSeq),
    String(h.headAttempts),
    h.isStuck ? "STUCK" : "no",
    String(h.deadLetterCount),
    ...(withCapacity ? [h.capacityPct === null ? "-" : `${formatPct(h.capacityPct)}%`] : []),
    h.lastError === null ? "-" : oneLine(withClass(h.lastError, h.lastErrorClass), 60),
  ]);
  const lines: string[] = [];
  for (const d of report.dbDirs.filter((d) => !d.exists)) {
    lines.push(`${d.app ? `app ${d.app}: ` : ""}db_dir ${d.dbDir} does not exist yet (nothing enqueued)`);
  }
  for (const u of report.unreadable) lines.push(`UNREADABLE ${u.file}: ${withoutFile(u.error, u.file)}`);
  if (report.namespaces.length === 0) lines.push(report.unreadable.length > 0 ? "no readable outbox files" : "no outbox files found");
  else {
    lines.push(renderTable(columns, rows));
    const t = report.totals;
    lines.push("", `${t.namespaces} namespace(s), ${t.depth} pending, ${t.stuck} stuck, ${t.deadLetters} dead letter(s)`);
  }
  return lines.join("\n");
}

// Class first, so the column scans by kind; the built-in writers' messages already start with it.
function withClass(error: string, errorClass: string | null): string {
  return errorClass && !error.startsWith(`${errorClass}:`) ? `${errorClass}: ${error}` : error;
}

// health.ts reports capacity as a percentage (0–100).
function formatPct(pct: number): string {
  return pct >= 10 ? String(Math.round(pct)) : pct.toFixed(1);
}

/** `sqloutbox status`: per-namespace depth, oldest age, head attempts/last error, stuck, dead letters. */
export const status = defineCommand({
  meta: { name: "status", description: "Per-namespace depth, oldest pending age, stuck heads and dead letters (read-only)" },
  args: {
    ...locationArgs,
    ...jsonArg,
    watch: { type: "boolean", description: "Refresh until interrupted (with --json: one JSON document per line)" },
    interval: { type: "string", valueHint: "SECONDS", description: "Refresh interval for --watch (default 2)" },
    ...logArgs,
  },
  async run({ args }) {
    const locations = await resolveLocations(args);
    if (!args.watch) {
      if (args.interval !== undefined) throw new UsageError("--interval only applies with --watch");
      const report = collectStatus(locations);
      if (args.json) print(JSON.stringify(report, null, 2));
      else print(renderStatus(report));
      if (report.unreadable.length > 0) {
        throw new StorageError(`status could not read ${report.unreadable.length} file(s)`, report.unreadable[0]!.file);
      }
      return;
    }
    const seconds = args.interval === undefined ? 2 : Number(args.interval);
    if (!Number.isFinite(seconds) || seconds <= 0) throw new UsageError(`--interval must be a positive number of seconds, got "${args.interval}"`);
    await watch(locations, seconds * 1000, Boolean(args.json));
  },
});

async function watch(locations: Locations, intervalMs: number, json: boolean): Promise<void> {
  let stopped = false;
  let wake: () => void = () => {};
  const stop = () => { stopped = true; wake(); };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
  const tty = Boolean(process.stdout.isTTY) && !json;
  try {
    while (!stopped) {
      const report = collectStatus(locations);
      if (json) print(JSON.stringify(report));
      else if (tty) process.stdout.write(`\u001B[H\u001B[2J${report.generatedAt}  (every ${intervalMs / 1000}s, Ctrl-C to stop)\n\n${renderStatus(report)}\n`);
      else print(`${report.generatedAt}\n${renderStatus(report)}\n`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, intervalMs);
        wake = () => { clearTimeout(timer); resolve(); };
      });
    }
  } finally {
    process.off("SIGINT", stop);
    process.off("SIGTERM", stop);
  }
}
