import { defineCommand } from "citty";
import { heldLaneCount } from "../../drain/held-lanes.ts";
import { OutboxError, StorageError, UsageError } from "../../errors.ts";
import { jsonArg, locationArgs, logArgs } from "../args.ts";
import { parseDurationMs } from "../durations.ts";
import {
  CHECKS,
  checkStatus,
  collectStatus,
  collectTenantStatus,
  heldLaneHead,
  type Check,
  type FleetEntry,
  type StatusEntry,
  type StatusReport,
} from "../status-report.ts";
import {
  fitLastColumn,
  formatAge,
  oneLine,
  paint,
  PLAIN,
  print,
  renderTable,
  stdoutStyle,
  withoutFile,
  type Column,
  type OutputStyle,
} from "../text-output.ts";
import { resolveLocations, type Locations } from "../locations.ts";
import { renderTenants, renderTenantStatus } from "../tenant-status.ts";
import { tenantNameProblem } from "../../tenant.ts";

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
    if (d.drain.pid === null)
      lines.push(
        `${label}no drain is running on ${d.dbFile ?? d.dbDir}${d.drain.stoppedAt ? ` (stopped ${formatAge(now - Date.parse(d.drain.stoppedAt))} ago)` : ""}`,
      );
    else
      lines.push(
        `${label}drain running (pid ${d.drain.pid}) on ${d.dbFile ?? d.dbDir}${d.drain.updatedAt ? `, reported ${formatAge(now - Date.parse(d.drain.updatedAt))} ago` : ", without a state file"}${d.drain.stale ? red(" — STALE: its loop is not reporting") : ""}`,
      );
  }
  if (report.targets.length > 0) {
    const columns: Column[] = [
      { header: "target" },
      { header: "state" },
      { header: "since" },
      { header: "failures", right: true },
      { header: "delivered", right: true },
      { header: "rows/s", right: true },
      { header: "lag", right: true },
      { header: "wal", right: true },
      { header: "last batch", right: true },
      { header: "problem" },
    ];
    const rows = report.targets.map((t) => [
      t.target,
      t.state === "outage" ? red("DOWN") : t.state === "misconfigured" ? red("MISCONFIGURED") : t.state,
      t.downSince ? t.downSince.slice(11, 19) : "-",
      String(t.failures),
      String(t.totals.delivered),
      t.rowsPerSecond === null ? "-" : formatRate(t.rowsPerSecond),
      formatAge(t.lagMs),
      formatWal(t.files ?? []),
      t.lastSuccessAt ? `${formatAge(now - Date.parse(t.lastSuccessAt))} ago` : "-",
      oneLine(t.lastError ?? t.setupProblem),
    ]);
    lines.push(
      ...withMessages(
        columns,
        rows,
        report.targets.map((t) => `problem of ${t.target}`),
        style,
      ),
      "",
    );
  }
  for (const d of report.dbDirs.filter((d) => !d.exists)) {
    lines.push(
      `${d.app ? `app ${d.app}: ` : ""}${d.dbFile === null ? `db_dir ${d.dbDir}` : `db_file ${d.dbFile}`} does not exist yet (nothing enqueued)`,
    );
  }
  for (const u of report.unreadable) lines.push(`UNREADABLE ${u.file}: ${withoutFile(u.error, u.file)}`);
  if (report.namespaces.length === 0)
    lines.push(report.unreadable.length > 0 ? "no readable outbox files" : "no outbox files found");
  else {
    lines.push(...namespaceTable(report, style));
    const t = report.totals;
    lines.push(
      "",
      `${t.namespaces} namespace(s), ${t.depth} pending, ${t.stuck} stuck, ${t.held} held${t.heldLanes ? `, ${t.heldLanes} lane(s) held` : ""}, ${t.deadLetters} dead letter(s)${t.targetsDown ? `, ${t.targetsDown} target(s) down` : ""}`,
    );
  }
  lines.push(...renderTenants(report.tenants, report.generatedAt, style));
  if (report.fleet.length > 0) {
    const withLanes = report.fleet.some((f) => f.lanes !== undefined);
    lines.push("", "fleet (every origin's delivery ledger rows, as this host's drain last read them):");
    lines.push(
      renderTable(
        [
          { header: "target" },
          { header: "namespace" },
          { header: "origin" },
          { header: "label" },
          { header: "through", right: true },
          { header: "updated", right: true },
          ...(withLanes ? [{ header: "lanes (slowest)" }] : []),
        ],
        report.fleet.map((f) => [
          f.target,
          f.namespace,
          f.self ? `${f.origin} (this host)` : f.origin,
          f.label || "-",
          String(f.through),
          `${formatAge(now - Date.parse(f.updatedAt))} ago`,
          ...(withLanes ? [f.lanes ? fleetLanes(f.lanes, now) : "-"] : []),
        ]),
      ),
    );
  }
  return lines.join("\n");
}

/**
 * A laned table's ledger rows of one origin: how many, and the one that moved longest ago: `8 (#3 through
 * 120, 2m ago)`.
 */
function fleetLanes(lanes: NonNullable<FleetEntry["lanes"]>, now: number): string {
  const { ledgerRow, through, updatedAt } = lanes.slowest;
  const lane = ledgerRow.includes("#") ? `#${ledgerRow.slice(ledgerRow.lastIndexOf("#") + 1)}` : "no key";
  return `${lanes.rows} (${lane} through ${through}, ${formatAge(now - Date.parse(updatedAt))} ago)`;
}

function namespaceTable(report: StatusReport, style: OutputStyle): string[] {
  const withApp = report.dbDirs.some((d) => d.app !== null);
  const withCapacity = report.namespaces.some((h) => h.capacityPct !== null);
  const withHeld = report.namespaces.some((h) => h.held !== null);
  const withLanes = report.namespaces.some((h) => h.lanes !== null);
  const columns: Column[] = [
    ...(withApp ? [{ header: "app" }] : []),
    { header: "namespace" },
    { header: "depth", right: true },
    { header: "oldest", right: true },
    { header: "head", right: true },
    { header: "attempts", right: true },
    { header: "next", right: true },
    { header: "stuck" },
    { header: "dead", right: true },
    ...(withCapacity ? [{ header: "capacity", right: true }] : []),
    ...(withHeld ? [{ header: "held" }] : []),
    ...(withLanes ? [{ header: "lanes held", right: true }] : []),
    { header: "last error" },
  ];
  const rows = report.namespaces.map((h) => [
    ...(withApp ? [h.app ?? "-"] : []),
    h.namespace,
    String(h.depth),
    formatAge(h.oldestPendingAgeMs),
    h.headSeq === null ? "-" : String(h.headSeq),
    String(h.headAttempts),
    nextAttempt(h.nextAttemptAt, Date.parse(report.generatedAt)),
    h.isStuck ? paint("STUCK", "red", style) : "no",
    h.deadLetterCount > 0 ? paint(deadCount(h), "red", style) : "0",
    ...(withCapacity ? [h.capacityPct === null ? "-" : `${formatPct(h.capacityPct)}%`] : []),
    ...(withHeld ? [h.held ? paint(h.held.reason, "yellow", style) : "-"] : []),
    ...(withLanes ? [lanesHeld(h, style)] : []),
    h.held ? oneLine(h.held.message) : h.lastError === null ? "-" : oneLine(withClass(h.lastError, h.lastErrorClass)),
  ]);
  const keys = report.namespaces.map((h) => `last error of ${withApp && h.app ? `${h.app}/` : ""}${h.namespace}`);
  const now = Date.parse(report.generatedAt);
  const oldest = report.namespaces.flatMap((h) => {
    const head = h.lanes?.held[0];
    return head ? [`${withApp && h.app ? `${h.app}/` : ""}${h.namespace}: ${heldHead(head, now)}`] : [];
  });
  return [
    ...withMessages(columns, rows, keys, style),
    ...(oldest.length > 0 ? ["", "oldest held key per table with lanes held:", ...oldest.map((l) => `  ${l}`)] : []),
  ];
}

/** Dead letters not replayed, and how many of them the remote may have applied: `3`, `3 (1 in doubt)`. */
function deadCount(h: StatusEntry): string {
  return h.deadLettersInDoubt > 0
    ? `${h.deadLetterCount} (${h.deadLettersInDoubt} in doubt)`
    : String(h.deadLetterCount);
}

/**
 * `2/64` (lanes held of the table's lanes; every lane, when a row without a key holds them), `-` for a table
 * without lanes.
 */
function lanesHeld(h: StatusEntry, style: OutputStyle): string {
  if (h.lanes === null) return "-";
  const n = heldLaneCount(h.lanes);
  return n > 0 ? paint(`${n}/${h.lanes.count}`, "yellow", style) : `0/${h.lanes.count}`;
}

/**
 * The oldest held lane's head: its key in full (never cut: the operator searches for it), attempts, next
 * attempt, last error.
 */
function heldHead(l: NonNullable<StatusEntry["lanes"]>["held"][number], now: number): string {
  const who = `${heldLaneHead(l)}${l.key === null ? " holds every lane" : ""}`;
  return `${who}, ${l.attempts} attempt(s), next ${nextAttempt(l.nextAttemptAt, now)} on ${l.target}: ${oneLine(l.lastError)}`;
}

/**
 * A table whose last column is a message: cut to the terminal's width, each cut message then given in full
 * under the table.
 */
function withMessages(
  columns: readonly Column[],
  rows: string[][],
  keys: readonly string[],
  style: OutputStyle,
): string[] {
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
/**
 * The error with its class in front, unless the error already says it (after the culprit's name, `seq 2 of
 * the group of seq 1: 23514: …`).
 */
function withClass(error: string, errorClass: string | null): string {
  if (!errorClass || error.startsWith(`${errorClass}:`) || error.includes(`: ${errorClass}:`)) return error;
  return `${errorClass}: ${error}`;
}

/**
 * When a backed-off head is tried next: `in 1m52s`, `now` once due (the drain's next look), `-` when it waits
 * for nothing.
 */
function nextAttempt(at: string | null, now: number): string {
  if (at === null) return "-";
  const due = Date.parse(at) - now;
  return Number.isFinite(due) && due > 0 ? `in ${formatAge(due)}` : "now";
}

// health.ts reports capacity as a percentage (0–100).
function formatPct(pct: number): string {
  return pct >= 10 ? String(Math.round(pct)) : pct.toFixed(1);
}

/** `sqloutbox status`: per-namespace depth, oldest age, head attempts/last error, stuck, dead letters. */
export const status = defineCommand({
  meta: {
    name: "status",
    description: "Per-namespace depth, oldest pending age, stuck heads and dead letters (read-only)",
  },
  args: {
    ...locationArgs,
    ...jsonArg,
    watch: { type: "boolean", description: "Refresh until interrupted (with --json: one JSON document per line)" },
    interval: { type: "string", valueHint: "SECONDS", description: "Refresh interval for --watch (default 2)" },
    check: {
      type: "boolean",
      description:
        "Exit 1 when something needs an operator: stuck, held, dead letters, too old, a target down (for cron, Nagios, probes)",
    },
    "fail-on": {
      type: "string",
      valueHint: "LIST",
      description: `With --check: which conditions fail it, comma-separated (default all: ${CHECKS.join(",")})`,
    },
    "max-age": {
      type: "string",
      valueHint: "DUR",
      description: "With --check: the oldest pending row may be this old (default 15m)",
    },
    tenant: {
      type: "string",
      valueHint: "T",
      description: "One tenant of a tenant template: its rows per table, its dead letters, held or not and why",
    },
    ...logArgs,
  },
  async run({ args }) {
    if (args.tenant !== undefined) return tenantStatus(args.tenant, args);
    const locations = await resolveLocations(args);
    const checking = checkOptions(args);
    if (!args.watch) {
      if (args.interval !== undefined) throw new UsageError("--interval only applies with --watch");
      const report = collectStatus(locations);
      const problems = checking ? checkStatus(report, checking.checks, checking.maxAgeMs) : [];
      if (args.json)
        print(
          JSON.stringify(checking ? { ...report, check: { ok: problems.length === 0, problems } } : report, null, 2),
        );
      else
        print(
          renderStatus(report, stdoutStyle()) +
            (checking
              ? `\n\n${problems.length === 0 ? "check: ok" : `check: ${problems.length} problem(s)\n${problems.map((p) => `  - ${p}`).join("\n")}`}`
              : ""),
        );
      if (report.unreadable.length > 0) {
        throw new StorageError(`status could not read ${report.unreadable.length} file(s)`, report.unreadable[0]!.file);
      }
      if (problems.length > 0) throw new OutboxError("E_OUTBOX", `status --check: ${problems.length} problem(s)`);
      return;
    }
    if (checking) throw new UsageError("--check does not combine with --watch");
    const seconds = args.interval === undefined ? 2 : Number(args.interval);
    if (!Number.isFinite(seconds) || seconds <= 0)
      throw new UsageError(`--interval must be a positive number of seconds, got "${args.interval}"`);
    await watch(locations, seconds * 1000, Boolean(args.json));
  },
});

/** `status --tenant T`: read-only; one tenant's rows and hold (a seek in each tenant template's queue files). */
async function tenantStatus(
  tenant: string,
  args: { config?: string; "db-dir"?: string; "db-file"?: string; json?: boolean; watch?: boolean; check?: boolean },
): Promise<void> {
  const problem = tenantNameProblem(tenant);
  if (problem !== null) throw new UsageError(`--tenant: ${problem}`);
  if (args.watch || args.check) throw new UsageError("--tenant does not combine with --watch or --check");
  const doc = collectTenantStatus(await resolveLocations(args), tenant);
  print(args.json ? JSON.stringify(doc, null, 2) : renderTenantStatus(doc, stdoutStyle()));
  if (doc.unreadable.length > 0)
    throw new StorageError(`status could not read ${doc.unreadable.length} file(s)`, doc.unreadable[0]!.file);
}

/** `--check`, `--fail-on` and `--max-age`, validated; null without --check. */
function checkOptions(args: {
  check?: boolean;
  "fail-on"?: string;
  "max-age"?: string;
}): { checks: Set<Check>; maxAgeMs: number } | null {
  if (!args.check) {
    if (args["fail-on"] !== undefined || args["max-age"] !== undefined)
      throw new UsageError("--fail-on and --max-age only apply with --check");
    return null;
  }
  const names =
    args["fail-on"] === undefined
      ? [...CHECKS]
      : args["fail-on"]
          .split(",")
          .map((n) => n.trim())
          .filter(Boolean);
  for (const n of names) {
    if (!(CHECKS as readonly string[]).includes(n))
      throw new UsageError(`--fail-on takes ${CHECKS.join(", ")}, got "${n}"`);
  }
  if (names.length === 0) throw new UsageError(`--fail-on needs at least one of ${CHECKS.join(", ")}`);
  return {
    checks: new Set(names as Check[]),
    maxAgeMs: args["max-age"] === undefined ? 15 * 60_000 : parseDurationMs("--max-age", args["max-age"]),
  };
}

async function watch(locations: Locations, intervalMs: number, json: boolean): Promise<void> {
  let stopped = false;
  let wake: () => void = () => {};
  const stop = () => {
    stopped = true;
    wake();
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
  const tty = Boolean(process.stdout.isTTY) && !json;
  try {
    while (!stopped) {
      const report = collectStatus(locations);
      if (json) print(JSON.stringify(report));
      else if (tty)
        process.stdout.write(
          `\u001B[H\u001B[2J${report.generatedAt}  (every ${intervalMs / 1000}s, Ctrl-C to stop)\n\n${renderStatus(report, stdoutStyle())}\n`,
        );
      else print(`${report.generatedAt}\n${renderStatus(report)}\n`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, intervalMs);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
  } finally {
    process.off("SIGINT", stop);
    process.off("SIGTERM", stop);
  }
}

/**
 * The WAL of a target's files, summed (`-` before the drain first looked at them): what a checkpoint has not
 * written back yet.
 */
function formatWal(files: ReadonlyArray<{ walBytes: number }>): string {
  if (files.length === 0) return "-";
  const bytes = files.reduce((n, f) => n + f.walBytes, 0);
  return bytes >= 1024 * 1024
    ? `${(bytes / 1024 / 1024).toFixed(1)} MiB`
    : bytes >= 1024
      ? `${Math.round(bytes / 1024)} KiB`
      : `${bytes} B`;
}
