import { defineCommand } from "citty";
import { lockHolder } from "../../drain/lock.ts";
import { readDrainState, type DrainState, type PersistedTarget } from "../../drain/state-file.ts";
import type { TableView } from "../../drain/views.ts";
import { OutboxError, StorageError, UsageError } from "../../errors.ts";
import { healthAll, type NamespaceHealth } from "../../outbox/health.ts";
import { jsonArg, locationArgs, logArgs } from "../args.ts";
import { parseDurationMs } from "../durations.ts";
import { fitLastColumn, formatAge, oneLine, paint, PLAIN, print, renderTable, redact, stdoutStyle, withoutFile, type Column, type OutputStyle } from "../text-output.ts";
import { isDir, resolveLocations, withAccessHint, type Locations } from "../locations.ts";

/** One namespace in `status --json`: where it lives plus its health (errors masked) and its hold, if the drain holds it. */
export interface StatusEntry extends NamespaceHealth {
  app: string | null;
  dbDir: string;
  held: TableView["held"];
}

/** The drain of one db_dir as its state file and lock say: running or not, and when it last wrote. */
export interface DrainSummary {
  /** The PID holding the db_dir's lock, or null when no drain runs there. */
  pid: number | null;
  /**
   * When the drain last wrote its state. Null: there is no state file — no drain ever ran here, or
   * the running one writes none (an app running OutboxSyncService itself, or runService with
   * stateIntervalMs 0, or runservice still starting up).
   */
  updatedAt: string | null;
  stoppedAt: string | null;
  /** A running drain whose state file has not been rewritten for a while: its loop may be hung. Never set without a state file. */
  stale: boolean;
}

/** One line of the fleet view: an origin's ledger row for a served table, as this host's drain last read it. */
export interface FleetEntry {
  target: string;
  namespace: string;
  origin: string;
  label: string;
  through: number;
  updatedAt: string;
  /** The origin is one of this host's queue files. */
  self: boolean;
}

/** One target in `status --json`: the running drain's view of it (credential-free, errors masked), where it drains from, its pace and lag. */
export interface StatusTarget extends PersistedTarget {
  dbDir: string;
  /** Rows delivered per second over the drain's last state interval (about 2 s); null before it has two samples. */
  rowsPerSecond: number | null;
  /** The oldest pending row's age (ms) among its tables; null when nothing is pending. */
  lagMs: number | null;
}

/** The stable `status --json` document. */
export interface StatusReport {
  generatedAt: string;
  dbDirs: Array<{ app: string | null; dbDir: string; exists: boolean; drain: DrainSummary }>;
  namespaces: StatusEntry[];
  /** Every target as the running drain last reported it. */
  targets: StatusTarget[];
  fleet: FleetEntry[];
  /** Files that could not be read (not a database, not an outbox file); they make the exit code 1. */
  unreadable: Array<{ file: string; error: string }>;
  totals: { namespaces: number; depth: number; stuck: number; held: number; deadLetters: number; targetsDown: number };
}

/**
 * runService rewrites the state every 2 s (its default stateIntervalMs): five of those intervals
 * without a write means its loop is not running. A drain that writes no state file at all (the
 * library's OutboxSyncService on its own) is never called stale: there is nothing to go by.
 */
const STALE_AFTER_MS = 10_000;

/** Reads the health of every namespace of every location and each drain's persisted state; opens files read-only, creates nothing, no network. */
export function collectStatus(locations: Locations, now = new Date()): StatusReport {
  const dbDirs: StatusReport["dbDirs"] = [];
  const namespaces: StatusEntry[] = [];
  const targets: StatusReport["targets"] = [];
  const fleet: FleetEntry[] = [];
  const unreadable: StatusReport["unreadable"] = [];
  const mask = (text: string | null) => (text === null ? null : redact(text, locations.secrets));
  for (const loc of locations.dirs) {
    const exists = isDir(loc.dbDir);
    const state = exists ? readDrainState(loc.dbDir) : null;
    const pid = exists ? lockHolder(loc.dbDir) : null;
    const drain: DrainSummary = {
      pid,
      updatedAt: state?.updatedAt ?? null,
      stoppedAt: state?.stoppedAt ?? null,
      stale: pid !== null && state !== null && now.getTime() - Date.parse(state.updatedAt) > STALE_AFTER_MS,
    };
    dbDirs.push({ app: loc.app, dbDir: loc.dbDir, exists, drain });
    if (!exists) continue;
    // A stopped drain's view of its targets is history, not state: only a running drain's is shown.
    const live = pid !== null && state !== null && state.stoppedAt === null ? state : null;
    fleet.push(...fleetOf(live));
    const holds = new Map((live?.targets ?? []).flatMap((t) => t.tables.map((tb) => [tb.namespace, tb.held && { ...tb.held, message: mask(tb.held.message)! }] as const)));
    const onError = (file: string, err: Error) => unreadable.push({ file, error: withAccessHint(err.message, file) });
    const health = healthAll(loc.dbDir, { maxPending: loc.maxPending, now, onError });
    for (const h of health) namespaces.push({ app: loc.app, dbDir: loc.dbDir, ...h, lastError: mask(h.lastError), held: holds.get(h.namespace) ?? null });
    const ages = new Map(health.map((h) => [h.namespace, h.oldestPendingAgeMs]));
    targets.push(...(live?.targets ?? []).map((t) => statusTarget(t, loc.dbDir, ages, mask)));
  }
  return {
    generatedAt: now.toISOString(),
    dbDirs,
    namespaces,
    targets,
    fleet,
    unreadable,
    totals: {
      namespaces: namespaces.length,
      depth: namespaces.reduce((n, h) => n + h.depth, 0),
      stuck: namespaces.filter((h) => h.isStuck).length,
      held: namespaces.filter((h) => h.held !== null).length,
      deadLetters: namespaces.reduce((n, h) => n + h.deadLetterCount, 0),
      targetsDown: targets.filter((t) => t.state === "outage" || t.state === "misconfigured").length,
    },
  };
}

function statusTarget(t: PersistedTarget, dbDir: string, ages: ReadonlyMap<string, number | null>, mask: (text: string | null) => string | null): StatusTarget {
  const pending = t.tables.map((tb) => ages.get(tb.namespace) ?? null).filter((age): age is number => age !== null);
  return {
    ...t,
    dbDir,
    lastError: mask(t.lastError),
    setupProblem: mask(t.setupProblem),
    tables: t.tables.map((tb) => ({ ...tb, held: tb.held && { ...tb.held, message: mask(tb.held.message)! } })),
    rowsPerSecond: t.recent && t.recent.ms > 0 ? (t.recent.delivered * 1000) / t.recent.ms : null,
    lagMs: pending.length > 0 ? Math.max(...pending) : null,
  };
}

function fleetOf(state: DrainState | null): FleetEntry[] {
  const out: FleetEntry[] = [];
  for (const t of state?.targets ?? []) {
    const mine = new Set(t.tables.map((tb) => tb.origin).filter((o): o is string => o !== null));
    for (const r of t.fleet) out.push({ target: t.target, namespace: r.namespace, origin: r.origin, label: r.label, through: r.through, updatedAt: r.updatedAt, self: mine.has(r.origin) });
  }
  return out;
}

/** What `status --check` can fail on. */
export const CHECKS = ["stuck", "held", "dead", "age", "down"] as const;
export type Check = (typeof CHECKS)[number];

/**
 * The problems `status --check` reports, one line each: stuck heads, held tables, dead letters,
 * an oldest pending row older than `maxAgeMs`, targets down or misconfigured, a running drain
 * whose state went stale. Empty when all is well. Messages are never cut: the cause is the part that matters.
 */
export function checkStatus(report: StatusReport, checks: ReadonlySet<Check>, maxAgeMs: number): string[] {
  const problems: string[] = [];
  const where = (h: StatusEntry) => `${h.app ? `${h.app}/` : ""}${h.namespace}`;
  for (const h of report.namespaces) {
    if (checks.has("stuck") && h.isStuck) problems.push(`stuck: ${where(h)} head seq ${h.headSeq} failed ${h.headAttempts} time(s): ${oneLine(h.lastError)}`);
    if (checks.has("held") && h.held) problems.push(`held: ${where(h)} (${h.held.reason}): ${oneLine(h.held.message)}`);
    if (checks.has("dead") && h.deadLetterCount > 0) problems.push(`dead letters: ${where(h)} has ${h.deadLetterCount}`);
    if (checks.has("age") && h.oldestPendingAgeMs !== null && h.oldestPendingAgeMs > maxAgeMs) {
      problems.push(`too old: ${where(h)} oldest pending row waited ${formatAge(h.oldestPendingAgeMs)} (limit ${formatAge(maxAgeMs)})`);
    }
  }
  if (checks.has("down")) {
    for (const t of report.targets) {
      if (t.state === "outage" || t.state === "misconfigured") problems.push(`${t.state === "outage" ? "down" : "misconfigured"}: target ${t.target} since ${t.downSince}, ${t.failures} failed attempt(s): ${oneLine(t.lastError)}`);
    }
    for (const d of report.dbDirs) if (d.drain.stale) problems.push(`stale: the drain (pid ${d.drain.pid}) on ${d.dbDir} has not reported since ${d.drain.updatedAt}`);
  }
  return problems;
}

/**
 * The human view of a status report: the drains, their targets (state, delivered, rows/s, lag),
 * one aligned row per namespace, then totals and the fleet. With a terminal's `width` a message
 * that does not fit is cut in its table and given in full under it; without one (a pipe, a file)
 * nothing is cut. Colour marks what needs a person: down, misconfigured, stuck, held, dead letters.
 */
export function renderStatus(report: StatusReport, style: OutputStyle = PLAIN): string {
  const red = (text: string) => paint(text, "red", style);
  const lines: string[] = [];
  const now = Date.parse(report.generatedAt);
  for (const d of report.dbDirs.filter((d) => d.exists)) {
    const label = `${d.app ? `app ${d.app}: ` : ""}`;
    if (d.drain.pid === null) lines.push(`${label}no drain is running on ${d.dbDir}${d.drain.stoppedAt ? ` (stopped ${formatAge(now - Date.parse(d.drain.stoppedAt))} ago)` : ""}`);
    else lines.push(`${label}drain running (pid ${d.drain.pid}) on ${d.dbDir}${d.drain.updatedAt ? `, reported ${formatAge(now - Date.parse(d.drain.updatedAt))} ago` : ", without a state file"}${d.drain.stale ? red(" — STALE: its loop is not reporting") : ""}`);
  }
  if (report.targets.length > 0) {
    const columns: Column[] = [
      { header: "target" }, { header: "state" }, { header: "since" }, { header: "failures", right: true }, { header: "delivered", right: true },
      { header: "rows/s", right: true }, { header: "lag", right: true }, { header: "last batch", right: true }, { header: "problem" },
    ];
    const rows = report.targets.map((t) => [
      t.target,
      t.state === "outage" ? red("DOWN") : t.state === "misconfigured" ? red("MISCONFIGURED") : t.state,
      t.downSince ? t.downSince.slice(11, 19) : "-",
      String(t.failures),
      String(t.totals.delivered),
      t.rowsPerSecond === null ? "-" : formatRate(t.rowsPerSecond),
      formatAge(t.lagMs),
      t.lastSuccessAt ? `${formatAge(now - Date.parse(t.lastSuccessAt))} ago` : "-",
      oneLine(t.lastError ?? t.setupProblem),
    ]);
    lines.push(...withMessages(columns, rows, report.targets.map((t) => `problem of ${t.target}`), style), "");
  }
  for (const d of report.dbDirs.filter((d) => !d.exists)) {
    lines.push(`${d.app ? `app ${d.app}: ` : ""}db_dir ${d.dbDir} does not exist yet (nothing enqueued)`);
  }
  for (const u of report.unreadable) lines.push(`UNREADABLE ${u.file}: ${withoutFile(u.error, u.file)}`);
  if (report.namespaces.length === 0) lines.push(report.unreadable.length > 0 ? "no readable outbox files" : "no outbox files found");
  else {
    lines.push(...namespaceTable(report, style));
    const t = report.totals;
    lines.push("", `${t.namespaces} namespace(s), ${t.depth} pending, ${t.stuck} stuck, ${t.held} held, ${t.deadLetters} dead letter(s)${t.targetsDown ? `, ${t.targetsDown} target(s) down` : ""}`);
  }
  if (report.fleet.length > 0) {
    lines.push("", "fleet (every origin's delivery ledger row, as this host's drain last read it):");
    lines.push(renderTable(
      [{ header: "target" }, { header: "namespace" }, { header: "origin" }, { header: "label" }, { header: "through", right: true }, { header: "updated", right: true }],
      report.fleet.map((f) => [f.target, f.namespace, f.self ? `${f.origin} (this host)` : f.origin, f.label || "-", String(f.through), `${formatAge(now - Date.parse(f.updatedAt))} ago`]),
    ));
  }
  return lines.join("\n");
}

function namespaceTable(report: StatusReport, style: OutputStyle): string[] {
  const withApp = report.dbDirs.some((d) => d.app !== null);
  const withCapacity = report.namespaces.some((h) => h.capacityPct !== null);
  const withHeld = report.namespaces.some((h) => h.held !== null);
  const columns: Column[] = [
    ...(withApp ? [{ header: "app" }] : []),
    { header: "namespace" },
    { header: "depth", right: true },
    { header: "oldest", right: true },
    { header: "head", right: true },
    { header: "attempts", right: true },
    { header: "stuck" },
    { header: "dead", right: true },
    ...(withCapacity ? [{ header: "capacity", right: true }] : []),
    ...(withHeld ? [{ header: "held" }] : []),
    { header: "last error" },
  ];
  const rows = report.namespaces.map((h) => [
    ...(withApp ? [h.app ?? "-"] : []),
    h.namespace,
    String(h.depth),
    formatAge(h.oldestPendingAgeMs),
    h.headSeq === null ? "-" : String(h.headSeq),
    String(h.headAttempts),
    h.isStuck ? paint("STUCK", "red", style) : "no",
    h.deadLetterCount > 0 ? paint(String(h.deadLetterCount), "red", style) : "0",
    ...(withCapacity ? [h.capacityPct === null ? "-" : `${formatPct(h.capacityPct)}%`] : []),
    ...(withHeld ? [h.held ? paint(h.held.reason, "yellow", style) : "-"] : []),
    h.held ? oneLine(h.held.message) : h.lastError === null ? "-" : oneLine(withClass(h.lastError, h.lastErrorClass)),
  ]);
  const keys = report.namespaces.map((h) => `last error of ${withApp && h.app ? `${h.app}/` : ""}${h.namespace}`);
  return withMessages(columns, rows, keys, style);
}

/** A table whose last column is a message: cut to the terminal's width, each cut message then given in full under the table. */
function withMessages(columns: readonly Column[], rows: string[][], keys: readonly string[], style: OutputStyle): string[] {
  const { rows: fitted, cut } = fitLastColumn(columns, rows, style.width);
  const lines = [renderTable(columns, fitted)];
  if (cut.length > 0) lines.push("", ...cut.map((i) => `${keys[i]}: ${rows[i]!.at(-1)}`));
  return lines;
}

/** `1234/s`, `12.5/s`, `0/s`. */
function formatRate(perSecond: number): string {
  return `${perSecond >= 100 || perSecond === 0 ? Math.round(perSecond) : perSecond.toFixed(1)}/s`;
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
    check: { type: "boolean", description: "Exit 1 when something needs an operator: stuck, held, dead letters, too old, a target down (for cron, Nagios, probes)" },
    "fail-on": { type: "string", valueHint: "LIST", description: `With --check: which conditions fail it, comma-separated (default all: ${CHECKS.join(",")})` },
    "max-age": { type: "string", valueHint: "DUR", description: "With --check: the oldest pending row may be this old (default 15m)" },
    ...logArgs,
  },
  async run({ args }) {
    const locations = await resolveLocations(args);
    const checking = checkOptions(args);
    if (!args.watch) {
      if (args.interval !== undefined) throw new UsageError("--interval only applies with --watch");
      const report = collectStatus(locations);
      const problems = checking ? checkStatus(report, checking.checks, checking.maxAgeMs) : [];
      if (args.json) print(JSON.stringify(checking ? { ...report, check: { ok: problems.length === 0, problems } } : report, null, 2));
      else print(renderStatus(report, stdoutStyle()) + (checking ? `\n\n${problems.length === 0 ? "check: ok" : `check: ${problems.length} problem(s)\n${problems.map((p) => `  - ${p}`).join("\n")}`}` : ""));
      if (report.unreadable.length > 0) {
        throw new StorageError(`status could not read ${report.unreadable.length} file(s)`, report.unreadable[0]!.file);
      }
      if (problems.length > 0) throw new OutboxError("E_OUTBOX", `status --check: ${problems.length} problem(s)`);
      return;
    }
    if (checking) throw new UsageError("--check does not combine with --watch");
    const seconds = args.interval === undefined ? 2 : Number(args.interval);
    if (!Number.isFinite(seconds) || seconds <= 0) throw new UsageError(`--interval must be a positive number of seconds, got "${args.interval}"`);
    await watch(locations, seconds * 1000, Boolean(args.json));
  },
});

/** `--check`, `--fail-on` and `--max-age`, validated; null without --check. */
function checkOptions(args: { check?: boolean; "fail-on"?: string; "max-age"?: string }): { checks: Set<Check>; maxAgeMs: number } | null {
  if (!args.check) {
    if (args["fail-on"] !== undefined || args["max-age"] !== undefined) throw new UsageError("--fail-on and --max-age only apply with --check");
    return null;
  }
  const names = args["fail-on"] === undefined ? [...CHECKS] : args["fail-on"].split(",").map((n) => n.trim()).filter(Boolean);
  for (const n of names) {
    if (!(CHECKS as readonly string[]).includes(n)) throw new UsageError(`--fail-on takes ${CHECKS.join(", ")}, got "${n}"`);
  }
  if (names.length === 0) throw new UsageError(`--fail-on needs at least one of ${CHECKS.join(", ")}`);
  return { checks: new Set(names as Check[]), maxAgeMs: args["max-age"] === undefined ? 15 * 60_000 : parseDurationMs("--max-age", args["max-age"]) };
}

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
      else if (tty) process.stdout.write(`\u001B[H\u001B[2J${report.generatedAt}  (every ${intervalMs / 1000}s, Ctrl-C to stop)\n\n${renderStatus(report, stdoutStyle())}\n`);
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
