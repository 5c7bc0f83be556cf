// What `status` reports, as data: every namespace's health, each running drain's targets (from
// its state file, with their pace and lag), the fleet view, and the problems `--check` fails on.
// Read-only: files are opened read-only, nothing is created, no network call.
import { drainHome } from "../drain/home.ts";
import { heldLaneCount } from "../drain/held-lanes.ts";
import { lockHolder } from "../drain/lock.ts";
import {
  DEFAULT_STATE_INTERVAL_MS,
  readDrainState,
  type DrainState,
  type PersistedTarget,
} from "../drain/state-file.ts";
import type { FleetRow, HeldLaneView, TableView } from "../drain/views.ts";
import { healthAll, type NamespaceHealth } from "../outbox/health.ts";
import { formatAge, oneLine, redact } from "./text-output.ts";
import { locationExists, withAccessHint, type Location, type Locations } from "./locations.ts";
import { type StatusTenants, type TenantStatus, tenantEntries, tenantSources, tenantsEntry } from "./tenant-report.ts";

/**
 * One namespace in `status --json`: where it lives plus its health (errors masked) and its hold, if the drain
 * holds it.
 */
export interface StatusEntry extends NamespaceHealth {
  app: string | null;
  dbDir: string;
  /** The db_file holding the namespace (null: its own file in the db_dir). */
  dbFile: string | null;
  held: TableView["held"];
  /**
   * With lanes (a drain running, the table's `lanes` above 1): how many, and the lanes held by a
   * head backing off, oldest row first, each with the target whose drain holds it. Null otherwise.
   */
  lanes: StatusLanes | null;
}

/** A table's lanes in `status --json`: how many, and the held ones (errors masked), oldest (lowest seq) first. */
export interface StatusLanes {
  count: number;
  held: Array<HeldLaneView & { target: string }>;
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
  /**
   * A running drain whose state file has not been rewritten for a while: its loop may be hung. Never set
   * without a state file.
   */
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
  /** With lanes: how many of its ledger rows the ledger holds, and the one that moved longest ago (see FleetRow). */
  lanes?: FleetRow["lanes"];
}

/**
 * One target in `status --json`: the running drain's view of it (credential-free, errors masked), where it
 * drains from, its pace and lag.
 */
export interface StatusTarget extends PersistedTarget {
  dbDir: string;
  dbFile: string | null;
  /** Rows delivered per second over the drain's last state interval (about 2 s); null before it has two samples. */
  rowsPerSecond: number | null;
  /** The oldest pending row's age (ms) among its tables; null when nothing is pending. */
  lagMs: number | null;
}

/** The stable `status --json` document. */
export interface StatusReport {
  generatedAt: string;
  /** Each location read: a db_dir, or a db_file (`dbFile`; `dbDir` is then its directory). */
  dbDirs: Array<{ app: string | null; dbDir: string; dbFile: string | null; exists: boolean; drain: DrainSummary }>;
  namespaces: StatusEntry[];
  /** Every target as the running drain last reported it. */
  targets: StatusTarget[];
  fleet: FleetEntry[];
  /**
   * Each tenant template target (SPEC §4c): its tenants with backlog, the held ones, its tenant databases
   * (see StatusTenants).
   */
  tenants: StatusTenants[];
  /** Files that could not be read (not a database, not an outbox file); they make the exit code 1. */
  unreadable: Array<{ file: string; error: string }>;
  totals: {
    namespaces: number;
    depth: number;
    stuck: number;
    held: number;
    /** Lanes held by a head backing off, over every table with lanes (a held table counts in `held`). */
    heldLanes: number;
    deadLetters: number;
    targetsDown: number;
  };
}

/**
 * runService rewrites the state every DEFAULT_STATE_INTERVAL_MS: five of those intervals without a
 * write means its loop is not running. A drain that writes no state file at all (the
 * library's OutboxSyncService on its own) is never called stale: there is nothing to go by.
 */
const STALE_AFTER_MS = 5 * DEFAULT_STATE_INTERVAL_MS;

/**
 * Reads the health of every namespace of every location and each drain's persisted state; opens
 * files read-only, creates nothing, no network. `tenantBacklog: false` leaves the tenants' backlog
 * unread (every pending row of a tenant template read by tenant: not for a document the console polls).
 */
export function collectStatus(
  locations: Locations,
  now = new Date(),
  options: { tenantBacklog?: boolean } = {},
): StatusReport {
  const dbDirs: StatusReport["dbDirs"] = [];
  const namespaces: StatusEntry[] = [];
  const targets: StatusReport["targets"] = [];
  const fleet: FleetEntry[] = [];
  const tenants: StatusTenants[] = [];
  const unreadable: StatusReport["unreadable"] = [];
  const mask = (text: string | null) => (text === null ? null : redact(text, locations.secrets));
  for (const loc of locations.dirs) {
    const exists = locationExists(loc);
    const { drain, live } = drainOf(loc, exists, now);
    dbDirs.push({ app: loc.app, dbDir: loc.dbDir, dbFile: loc.dbFile, exists, drain });
    if (!exists) continue;
    fleet.push(...fleetOf(live));
    const shown = (live?.targets ?? []).map((t) => maskTarget(t, mask));
    const holds = new Map(shown.flatMap((t) => t.tables.map((tb) => [tb.namespace, tb.held] as const)));
    const lanes = lanesOf(shown);
    const onError = (file: string, err: Error) => unreadable.push({ file, error: withAccessHint(err.message, file) });
    const health = healthAll(loc, { maxPending: loc.maxPending, now, onError });
    for (const h of health)
      namespaces.push({
        app: loc.app,
        dbDir: loc.dbDir,
        dbFile: loc.dbFile,
        ...h,
        lastError: mask(h.lastError),
        held: holds.get(h.namespace) ?? null,
        lanes: lanes.get(h.namespace) ?? null,
      });
    const ages = new Map(health.map((h) => [h.namespace, h.oldestPendingAgeMs]));
    targets.push(...shown.map((t) => ({ ...t, dbDir: loc.dbDir, dbFile: loc.dbFile, ...paceOf(t, ages) })));
    const backlog = options.tenantBacklog ?? true;
    const failed = (file: string, err: Error) => {
      if (!unreadable.some((u) => u.file === file)) onError(file, err);
    };
    for (const source of tenantSources(live, health))
      tenants.push(tenantsEntry(loc, source, { backlog, now, mask: (t) => mask(t)!, onError: failed }));
  }
  return {
    generatedAt: now.toISOString(),
    dbDirs,
    namespaces,
    targets,
    fleet,
    tenants,
    unreadable,
    totals: {
      namespaces: namespaces.length,
      depth: namespaces.reduce((n, h) => n + h.depth, 0),
      stuck: namespaces.filter((h) => h.isStuck).length,
      held: namespaces.filter((h) => h.held !== null).length,
      heldLanes: namespaces.reduce((n, h) => n + (h.lanes ? heldLaneCount(h.lanes) : 0), 0),
      deadLetters: namespaces.reduce((n, h) => n + h.deadLetterCount, 0),
      targetsDown: targets.filter((t) => t.state === "outage" || t.state === "misconfigured").length,
    },
  };
}

/**
 * The drain of a location as its lock and state file say, and its state while it runs (a stopped drain's view
 * is history, not state).
 */
function drainOf(loc: Location, exists: boolean, now: Date): { drain: DrainSummary; live: DrainState | null } {
  const state = exists ? readDrainState(drainHome(loc).stateFile) : null;
  const pid = exists ? lockHolder(drainHome(loc).lockFile) : null;
  const drain: DrainSummary = {
    pid,
    updatedAt: state?.updatedAt ?? null,
    stoppedAt: state?.stoppedAt ?? null,
    stale: pid !== null && state !== null && now.getTime() - Date.parse(state.updatedAt) > STALE_AFTER_MS,
  };
  return { drain, live: pid !== null && state !== null && state.stoppedAt === null ? state : null };
}

/**
 * `status --tenant T`: the tenant's rows in the tables of every tenant template (a seek in each of
 * their queue files) and its hold at each, as the running drain last reported it. Read-only.
 */
export function collectTenantStatus(locations: Locations, tenant: string, now = new Date()): TenantStatus {
  const out: TenantStatus = { generatedAt: now.toISOString(), tenant, targets: [], tables: [], unreadable: [] };
  const mask = (text: string) => redact(text, locations.secrets);
  for (const loc of locations.dirs) {
    if (!locationExists(loc)) continue;
    const { live } = drainOf(loc, true, now);
    const onError = (file: string, err: Error) =>
      out.unreadable.push({ file, error: withAccessHint(err.message, file) });
    const health = healthAll(loc, { maxPending: loc.maxPending, now, onError });
    const { targets, tables } = tenantEntries(loc, tenantSources(live, health), tenant, { now, mask, onError });
    out.targets.push(...targets);
    out.tables.push(...tables);
  }
  return out;
}

function maskTarget(t: PersistedTarget, mask: (text: string | null) => string | null): PersistedTarget {
  return {
    ...t,
    lastError: mask(t.lastError),
    setupProblem: mask(t.setupProblem),
    tables: t.tables.map((tb) => ({
      ...tb,
      held: tb.held && { ...tb.held, message: mask(tb.held.message)! },
      ...(tb.lanes && {
        lanes: { ...tb.lanes, held: tb.lanes.held.map((l) => ({ ...l, lastError: mask(l.lastError) })) },
      }),
    })),
  };
}

/**
 * Each namespace's lanes across the targets serving it (a table of one lane has none): the count, the held
 * lanes oldest first.
 */
function lanesOf(targets: readonly PersistedTarget[]): Map<string, StatusLanes> {
  const out = new Map<string, StatusLanes>();
  for (const t of targets)
    for (const tb of t.tables) {
      if (!tb.lanes) continue;
      const entry = out.get(tb.namespace) ?? { count: tb.lanes.count, held: [] };
      entry.count = Math.max(entry.count, tb.lanes.count);
      entry.held.push(...tb.lanes.held.map((l) => ({ ...l, target: t.target })));
      out.set(tb.namespace, entry);
    }
  for (const entry of out.values()) entry.held.sort((a, b) => a.seq - b.seq);
  return out;
}

/** A target's rows/s over the drain's last state interval, and its lag: the oldest pending row of its tables. */
function paceOf(
  t: PersistedTarget,
  ages: ReadonlyMap<string, number | null>,
): Pick<StatusTarget, "rowsPerSecond" | "lagMs"> {
  const pending = t.tables.map((tb) => ages.get(tb.namespace) ?? null).filter((age): age is number => age !== null);
  return {
    rowsPerSecond: t.recent && t.recent.ms > 0 ? (t.recent.delivered * 1000) / t.recent.ms : null,
    lagMs: pending.length > 0 ? Math.max(...pending) : null,
  };
}

function fleetOf(state: DrainState | null): FleetEntry[] {
  const out: FleetEntry[] = [];
  for (const t of state?.targets ?? []) {
    const mine = new Set(t.tables.map((tb) => tb.origin).filter((o): o is string => o !== null));
    for (const r of t.fleet)
      out.push({
        target: t.target,
        namespace: r.namespace,
        origin: r.origin,
        label: r.label,
        through: r.through,
        updatedAt: r.updatedAt,
        self: mine.has(r.origin),
        ...(r.lanes && { lanes: r.lanes }),
      });
  }
  return out;
}

/**
 * Who heads a held lane, whole (never cut: the key is what an operator searches for): `key "k" (lane 3, seq
 * 9)`, or the row without a key.
 */
export function heldLaneHead(l: StatusLanes["held"][number]): string {
  return l.key === null
    ? `a row without a key (seq ${l.seq})`
    : `key ${JSON.stringify(l.key)} (lane ${l.lane}, seq ${l.seq})`;
}

/** What `status --check` can fail on. */
export const CHECKS = ["stuck", "held", "dead", "age", "down"] as const;
export type Check = (typeof CHECKS)[number];

/**
 * The problems `status --check` reports, one line each: stuck heads (of a table, or of its lanes), held
 * tables, dead letters, an oldest pending row older than `maxAgeMs`, targets down or misconfigured, a running
 * drain whose state went stale. Empty when all is well. Messages are never cut: the cause is the part that
 * matters.
 */
export function checkStatus(report: StatusReport, checks: ReadonlySet<Check>, maxAgeMs: number): string[] {
  const problems: string[] = [];
  const where = (h: StatusEntry) => `${h.app ? `${h.app}/` : ""}${h.namespace}`;
  for (const h of report.namespaces) {
    if (checks.has("stuck") && h.isStuck)
      problems.push(
        `stuck: ${where(h)} head seq ${h.headSeq} failed ${h.headAttempts} time(s): ${oneLine(h.lastError)}`,
      );
    const lanesHeld = h.lanes ? heldLaneCount(h.lanes) : 0;
    if (checks.has("stuck") && h.lanes && lanesHeld > 0) {
      const l = h.lanes.held[0]!;
      problems.push(
        `stuck: ${where(h)} has ${lanesHeld} of ${h.lanes.count} lane(s) held, the oldest by ${heldLaneHead(l)} failed ${l.attempts} time(s) on ${l.target}: ${oneLine(l.lastError)}`,
      );
    }
    if (checks.has("held") && h.held) problems.push(`held: ${where(h)} (${h.held.reason}): ${oneLine(h.held.message)}`);
    if (checks.has("dead") && h.deadLetterCount > 0)
      problems.push(
        `dead letters: ${where(h)} has ${h.deadLetterCount}${h.deadLettersInDoubt > 0 ? ` (${h.deadLettersInDoubt} in doubt: the remote may have applied them; the drain settles them)` : ""}`,
      );
    if (checks.has("age") && h.oldestPendingAgeMs !== null && h.oldestPendingAgeMs > maxAgeMs) {
      problems.push(
        `too old: ${where(h)} oldest pending row waited ${formatAge(h.oldestPendingAgeMs)} (limit ${formatAge(maxAgeMs)})`,
      );
    }
  }
  if (checks.has("held"))
    for (const t of report.tenants) {
      const first = t.held?.tenants[0];
      if (first)
        problems.push(
          `held: ${t.held!.count} tenant(s) of ${t.app ? `${t.app}/` : ""}${t.target}, the oldest ${first.tenant} (${first.reason}) since ${first.since}: ${oneLine(first.message)}`,
        );
    }
  if (checks.has("down")) {
    for (const t of report.targets) {
      if (t.state === "outage" || t.state === "misconfigured")
        problems.push(
          `${t.state === "outage" ? "down" : "misconfigured"}: target ${t.target} since ${t.downSince}, ${t.failures} failed attempt(s): ${oneLine(t.lastError)}`,
        );
    }
    for (const d of report.dbDirs)
      if (d.drain.stale)
        problems.push(
          `stale: the drain (pid ${d.drain.pid}) on ${d.dbFile ?? d.dbDir} has not reported since ${d.drain.updatedAt}`,
        );
  }
  return problems;
}
