// What `status` reports of tenant templates (SPEC §4c), as data: per template target, its tenants
// with backlog (read from its tables' queue files through their index by tenant: every pending
// row's index entry), the tenants the running drain holds and its tenant databases (from its state file);
// and, for `status --tenant T`, one tenant's rows table by table beside its hold. Read-only.
import type { DrainState, PersistedTarget } from "../drain/state-file.ts";
import type { TenantHoldView } from "../drain/views.ts";
import type { NamespaceHealth } from "../outbox/health.ts";
import {
  mayHoldTenantRows,
  readTenantBacklog,
  readTenantRows,
  type TenantTableRows,
} from "../outbox/tenant-backlog.ts";
import { filesOf, type Location } from "./locations.ts";

/**
 * A held tenant in `status --json`: why (its database down, refusing, or lacking a table or the ledger),
 * since and until when (ISO-8601).
 */
export interface TenantHoldEntry {
  tenant: string;
  reason: TenantHoldView["reason"];
  message: string;
  since: string;
  until: string;
}

/** One tenant template target in `status --json` (see docs/cli.md). */
export interface StatusTenants {
  app: string | null;
  dbDir: string;
  dbFile: string | null;
  /**
   * The target, as the running drain names it; null without a running drain (its tables are then the files
   * that hold tenants' rows).
   */
  target: string | null;
  tables: string[];
  /**
   * Its tables' pending rows by tenant, from the queue files: how many tenants have rows waiting,
   * how many rows, how many rows name no tenant (each a fault the drain holds), and the tenant whose
   * first row waited longest. Null when not read (the admin API's status: it would read every
   * pending row's index entry in the drain's own process every time the console looks).
   */
  backlog: {
    tenants: number;
    rows: number;
    rowsWithoutTenant: number;
    oldest: { tenant: string; namespace: string; seq: number; createdAt: string; ageMs: number } | null;
  } | null;
  /**
   * Its tenant databases open now, at most, and opened and closed since the drain started; null without a
   * running drain.
   */
  databases: { open: number; maxOpen: number; opened: number; closed: number } | null;
  /** Every tenant the drain holds now, the oldest hold first; null without a running drain. */
  held: { count: number; tenants: TenantHoldEntry[] } | null;
}

/** One table's rows of a tenant in `status --tenant T --json`, where it lives, and its oldest row's age. */
export interface TenantTableEntry extends TenantTableRows {
  app: string | null;
  dbDir: string;
  dbFile: string | null;
  oldestPendingAgeMs: number | null;
}

/** A template target that may deliver the tenant, and the tenant's hold there as the running drain last reported it. */
export interface TenantTargetEntry {
  app: string | null;
  dbDir: string;
  dbFile: string | null;
  /** Null: no drain runs on this location (its hold is then unknown). */
  target: string | null;
  held: TenantHoldEntry | null;
}

/** The `status --tenant T --json` document. */
export interface TenantStatus {
  generatedAt: string;
  tenant: string;
  targets: TenantTargetEntry[];
  tables: TenantTableEntry[];
  unreadable: Array<{ file: string; error: string }>;
}

/**
 * A template target's tables in one location: those of each template target of the running drain, else each
 * file that says it holds tenants' rows.
 */
export interface TenantSource {
  target: PersistedTarget | null;
  tables: NamespaceHealth[];
}

/** Masks credentials in a text (a stored error, a hold's message). */
type Mask = (text: string) => string;

/**
 * Where a location's tenants' rows are: per template target of `live` (the running drain's state), else the
 * files that say they hold them.
 */
export function tenantSources(live: DrainState | null, health: readonly NamespaceHealth[]): TenantSource[] {
  if (live !== null)
    return live.targets
      .filter((t) => t.tenants !== undefined)
      .map((t) => {
        const served = new Set(t.tables.map((tb) => tb.namespace));
        return { target: t, tables: health.filter((h) => served.has(h.namespace)) };
      });
  const marked = new Map<string, boolean>(); // a db_file holds every table: asked once
  const tables = health.filter((h) => {
    if (!marked.has(h.file)) marked.set(h.file, mayHoldTenantRows(h.file));
    return marked.get(h.file)!;
  });
  return tables.length === 0 ? [] : [{ target: null, tables }];
}

/**
 * A template target's entry of `status --json`; with `backlog`, its tables' rows are counted by tenant (every
 * pending row's index entry).
 */
export function tenantsEntry(
  loc: Location,
  source: TenantSource,
  options: { backlog: boolean; now: Date; mask: Mask; onError: (file: string, error: Error) => void },
): StatusTenants {
  const view = source.target?.tenants;
  const held = view?.held.map((h) => holdEntry(h, options.mask));
  return {
    app: loc.app,
    dbDir: loc.dbDir,
    dbFile: loc.dbFile,
    target: source.target?.target ?? null,
    tables: source.tables.map((t) => t.namespace),
    backlog: options.backlog ? backlogOf(source.tables, options.now, options.onError) : null,
    databases: view ? { open: view.open, maxOpen: view.maxOpen, opened: view.opened, closed: view.closed } : null,
    held: held ? { count: held.length, tenants: held } : null,
  };
}

/** Every tenant's rows of `tables`, summed: tenants with backlog, rows, rows without a tenant, the oldest first row. */
function backlogOf(
  tables: readonly NamespaceHealth[],
  now: Date,
  onError: (file: string, error: Error) => void,
): NonNullable<StatusTenants["backlog"]> {
  const tenants = new Set<string>();
  let rows = 0;
  let rowsWithoutTenant = 0;
  let oldest: NonNullable<StatusTenants["backlog"]>["oldest"] = null;
  for (const table of tables) {
    let byTenant: ReturnType<typeof readTenantBacklog>;
    try {
      byTenant = readTenantBacklog(table.file, [table.namespace]);
    } catch (error) {
      onError(table.file, error as Error);
      continue;
    }
    for (const r of byTenant) {
      rows += r.rows;
      if (r.tenant === null) {
        rowsWithoutTenant += r.rows;
        continue;
      }
      tenants.add(r.tenant);
      const ageMs = Math.max(0, now.getTime() - Date.parse(r.firstCreatedAt));
      if (oldest === null || ageMs > oldest.ageMs)
        oldest = { tenant: r.tenant, namespace: r.namespace, seq: r.firstSeq, createdAt: r.firstCreatedAt, ageMs };
    }
  }
  return { tenants: tenants.size, rows, rowsWithoutTenant, oldest };
}

/**
 * One tenant's entries of `status --tenant T`: its hold at each template target of the location, and its rows
 * in their tables.
 */
export function tenantEntries(
  loc: Location,
  sources: readonly TenantSource[],
  tenant: string,
  options: { now: Date; mask: Mask; onError: (file: string, error: Error) => void },
): { targets: TenantTargetEntry[]; tables: TenantTableEntry[] } {
  const where = { app: loc.app, dbDir: loc.dbDir, dbFile: loc.dbFile };
  const targets = sources.map((s) => {
    const hold = s.target?.tenants?.held.find((h) => h.tenant === tenant);
    return { ...where, target: s.target?.target ?? null, held: hold ? holdEntry(hold, options.mask) : null };
  });
  const tables: TenantTableEntry[] = [];
  const read = new Set<string>();
  for (const table of sources.flatMap((s) => s.tables)) {
    if (read.has(table.file)) continue; // a db_file holds every table: read once
    read.add(table.file);
    let rows: TenantTableRows[];
    try {
      rows = readTenantRows(table.file, tenant);
    } catch (error) {
      options.onError(table.file, error as Error);
      continue;
    }
    for (const r of rows)
      tables.push({
        ...where,
        ...r,
        head: r.head && { ...r.head, lastError: maskOrNull(r.head.lastError, options.mask) },
        failing: r.failing && { ...r.failing, lastError: maskOrNull(r.failing.lastError, options.mask) },
        oldestPendingAgeMs:
          r.oldestCreatedAt === null ? null : Math.max(0, options.now.getTime() - Date.parse(r.oldestCreatedAt)),
      });
  }
  return { targets, tables };
}

/**
 * The queue files of a location (it must exist) that may hold tenants' rows: those `kick --tenant` and `skip
 * --tenant` look into.
 */
export function tenantFilesOf(loc: Location): string[] {
  return filesOf(loc).filter(mayHoldTenantRows);
}

function holdEntry(h: TenantHoldView, mask: Mask): TenantHoldEntry {
  return {
    tenant: h.tenant,
    reason: h.reason,
    message: mask(h.message),
    since: new Date(h.since).toISOString(),
    until: new Date(h.until).toISOString(),
  };
}

const maskOrNull = (text: string | null, mask: Mask) => (text === null ? null : mask(text));
