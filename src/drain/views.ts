import type { NamespaceHealth } from "../outbox/health.ts";

/*
 * What the drain shows of itself — to `status` (through the state file), to the metrics and to
 * the fleet view: plain data, no behaviour, so every part of the drain can name it.
 */

/**
 * Why a table is not delivering right now. The last two are waits, not faults: the compatibility
 * mode's setup not done yet, a timed-out batch without a ledger that may still commit.
 */
export type HoldReason =
  | "file"
  | "local"
  | "remote schema"
  | "origin"
  | "writer contract"
  | "chain gap"
  | "compat setup"
  | "late answer"
  | "lanes changed";

/** How a target is doing: reachable, down (retried with backoff) or misconfigured (retried, but a person must act). */
export type TargetState = "starting" | "ok" | "outage" | "misconfigured";

/** One origin's ledger row (a table's, or one lane's: `table#lane`), as every drain of the fleet sees it. */
export interface LedgerRow {
  origin: string;
  namespace: string;
  through: number;
  label: string;
  /** ISO-8601, the target's clock. */
  updatedAt: string;
}

/**
 * One origin's delivery of a served table, as every drain of the fleet sees it: its ledger rows
 * taken together (a table without lanes has one; with lanes, its own row for rows without a key and
 * one per lane). `through`: the highest local seq applied in any of them; `updatedAt`: when one last
 * moved — a host whose rows stopped moving in every lane is behind.
 */
export interface FleetRow extends LedgerRow {
  /** With lanes: how many of its ledger rows the ledger holds, and the one that moved longest ago (its lag). */
  lanes?: { rows: number; slowest: { ledgerRow: string; through: number; updatedAt: string } };
}

/**
 * A tenant held: why (its database down, refusing us, or lacking a table or the ledger), since and until when
 * (epoch ms).
 */
export interface TenantHoldView {
  tenant: string;
  reason: "outage" | "misconfigured" | "remote schema";
  message: string;
  since: number;
  until: number;
}

/**
 * A tenant template's tenants as the drain sees them (status's detail; the metrics carry counts only, no
 * tenant label).
 */
export interface TenantsView {
  /** Tenant databases open now, and at most (`max_open_tenants`). */
  open: number;
  maxOpen: number;
  /** Opens and closes since the drain started. */
  opened: number;
  closed: number;
  /** Tenants held now, the oldest hold first. */
  held: TenantHoldView[];
}

/** One served table as the drain sees it. Times are ISO-8601. */
export interface TableView {
  namespace: string;
  /** The queue file's origin id (null while the file cannot be opened). */
  origin: string | null;
  /** The ledger's `through` this drain last saw (null: not settled yet, or no ledger). */
  through: number | null;
  held: { reason: HoldReason; message: string; since: string; until: string | null } | null;
  /** Rows delivered (settled from the ledger included), failed and dead-lettered since the drain started. */
  counts: { delivered: number; failed: number; deadLettered: number };
  /**
   * The queue's health as `status` reads it from the file, when asked for (the metrics ask; the
   * state file leaves it out: status reads the files itself). Null while the file is not open or
   * cannot be read now — a held table, whose hold says why.
   */
  health?: NamespaceHealth | null;
  /** With lanes (more than one): how many, and the lanes a head backing off holds. */
  lanes?: { count: number; held: HeldLaneView[] };
}

/**
 * A lane held by its head backing off: the lane (null: every lane, held by a row without a key), its head's
 * seq, key, attempts, last error, and when it is tried again.
 */
export interface HeldLaneView {
  lane: number | null;
  seq: number;
  key: string | null;
  attempts: number;
  lastError: string | null;
  nextAttemptAt: string;
}

/** One target as the drain sees it: reachable or not, since when, why; its tables and the fleet view. */
export interface TargetView {
  target: string;
  app: string;
  state: TargetState;
  /** Consecutive failed attempts to reach it. */
  failures: number;
  downSince: string | null;
  lastError: string | null;
  lastSuccessAt: string | null;
  /** How long its last answered batch took, sent to answered (ms): the round trip the drain meets; null before one. */
  /** Batches sent and not answered yet: at most the target's `connections`. */
  batchesInFlight: number;
  lastRoundTripMs: number | null;
  /** When its loop last finished a cycle. */
  lastCycleAt: string | null;
  /** When its loop last ran at all (a cycle, or a poll while idle): the liveness signal. */
  lastBeatAt: string | null;
  /** Why the ledger table is not set up, while it is not. */
  setupProblem: string | null;
  ledger: boolean;
  totals: { delivered: number; failed: number; deadLettered: number };
  tables: TableView[];
  /** Every origin's delivery of the served tables, as last read (empty until the first read; when, `fleetReadAt`). */
  fleet: FleetRow[];
  fleetReadAt: string | null;
  /** The queue files of its tables as last looked after: WAL size and free pages (see FileCare). */
  files: Array<{ file: string; walBytes: number; freePages: number; embedded: boolean }>;
  /** A tenant template's: its tenants' databases open and held (see TenantsView). */
  tenants?: TenantsView;
}
