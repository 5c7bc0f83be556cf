// What kind of world a seed builds: how many hosts and tables, their lanes and layouts, how the
// writer keeps batches in flight, and how often each fault, crash and operator action strikes.
// A run without --profile mixes them, seed by seed.
import type { FaultRates } from "./writer.ts";

export interface Profile {
  name: string;
  /** Hosts (each its own queue folder and drain), tables per host: [min, max]. */
  hosts: [number, number];
  tables: [number, number];
  /** The lane counts a table draws from. */
  lanes: readonly number[];
  /**
   * Tenants (each its own remote database, the target a tenant template): [min, max]; [0, 0]: one
   * remote, no template. The max_open_tenants a host draws from.
   */
  tenants: [number, number];
  maxOpenTenants: readonly number[];
  /** How likely a host keeps every table in one db_file (transactions across tables) rather than a db_dir. */
  dbFile: number;
  connections: readonly number[];
  /** How likely the writer takes concurrent calls, and pipelines two per connection. */
  concurrent: number;
  pipelined: number;
  /** Per call. */
  faults: FaultRates;
  /**
   * Per step: an outage window, a tenant's database down for a while or dropped and made anew, a row
   * poisoned, a crash of a drain, an operator action.
   */
  outage: number;
  tenantFault: number;
  poison: number;
  crash: number;
  operator: number;
  /** How likely a commit's file change is never reported to a drain's watcher (its sweep finds it). */
  watchDrop: number;
  /** Steps of workload by default. */
  steps: number;
  /** How the producers' actions are weighed (see Workload.produce). */
  workload: Readonly<Record<"push" | "pushMany" | "transaction" | "barrier", number>>;
  /** The max_attempts a host draws from (0: forever). */
  maxAttempts: readonly number[];
  /** Virtual time between two steps (ms): [min, max]. */
  gapMs: [number, number];
}

const CALM: FaultRates = { refused: 0, slow: 0, dropped: 0, ambiguous: 0, latencyMs: [1, 12], slowMs: [1500, 5000] };

const base: Profile = {
  name: "default",
  hosts: [1, 1],
  tables: [1, 3],
  lanes: [1, 1, 2, 4],
  tenants: [0, 0],
  maxOpenTenants: [],
  dbFile: 0.5,
  connections: [1, 2, 3],
  concurrent: 0.6,
  pipelined: 0.4,
  faults: { ...CALM, refused: 0.02, slow: 0.02, dropped: 0.02, ambiguous: 0.03 },
  outage: 0.02,
  tenantFault: 0,
  poison: 0.06,
  crash: 0.03,
  operator: 0.04,
  watchDrop: 0.1,
  steps: 40,
  workload: { push: 5, pushMany: 2, transaction: 2, barrier: 1 },
  maxAttempts: [0, 2, 3, 5],
  gapMs: [1, 120],
};

export const PROFILES: Readonly<Record<string, Profile>> = {
  default: base,
  calm: {
    ...base,
    name: "calm",
    faults: CALM,
    outage: 0,
    poison: 0.03,
    crash: 0,
    operator: 0.02,
  },
  "heavy-faults": {
    ...base,
    name: "heavy-faults",
    faults: { ...CALM, refused: 0.06, slow: 0.06, dropped: 0.06, ambiguous: 0.08 },
    outage: 0.05,
    poison: 0.1,
    crash: 0.08,
    operator: 0.06,
  },
  "many-lanes": {
    ...base,
    name: "many-lanes",
    tables: [2, 3],
    lanes: [4, 8, 16],
    dbFile: 0.8,
    poison: 0.1,
  },
  // Rows that fail for long while transactions across tables with lanes keep coming: what a held
  // group holds, and what it must not.
  "held-lanes": {
    ...base,
    name: "held-lanes",
    tables: [2, 3],
    lanes: [1, 4, 8],
    dbFile: 1,
    poison: 0.12,
    crash: 0.01,
    operator: 0.01,
    workload: { push: 4, pushMany: 1, transaction: 4, barrier: 0 },
    maxAttempts: [0, 0, 5],
    gapMs: [1, 200],
  },
  fleet: {
    ...base,
    name: "fleet",
    hosts: [2, 3],
    tables: [1, 2],
    crash: 0.05,
  },
  // A tenant template: each row to its tenant's own database, fewer open at once than there are
  // tenants; a tenant's database goes down, or is dropped and made anew, while the others must land.
  tenants: {
    ...base,
    name: "tenants",
    hosts: [1, 2],
    tables: [1, 2],
    tenants: [2, 5],
    maxOpenTenants: [1, 2, 3, 64],
    tenantFault: 0.08,
  },
};

/** The profiles a mixed run goes through, one seed each in turn. */
export const MIX = ["default", "heavy-faults", "many-lanes", "fleet", "calm", "held-lanes", "tenants"] as const;

/** The profile of `seed` in a run given `name` (or none: the mix). */
export function profileOf(seed: number, name: string | null): Profile {
  const chosen = name ?? MIX[seed % MIX.length]!;
  const profile = PROFILES[chosen];
  if (!profile) throw new Error(`unknown profile "${chosen}" (known: ${Object.keys(PROFILES).join(", ")})`);
  return profile;
}
