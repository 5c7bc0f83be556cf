// What the console reads from the admin API (docs/admin.md), and the one way it asks: the bearer
// token in a header (never a cookie), no cache, no credentials the browser would add by itself.
import type { LetterView } from "../letter-view.ts";

/** The parts of the `status --json` document the page shows (docs/cli.md). */
export interface Status {
  generatedAt: string;
  namespaces: Array<{
    app: string | null;
    namespace: string;
    depth: number;
    oldestPendingAgeMs: number | null;
    headSeq: number | null;
    headAttempts: number;
    isStuck: boolean;
    lastError: string | null;
    lastErrorClass: string | null;
    nextAttemptAt: string | null;
    deadLetterCount: number;
    /**
     * Of them, those the remote may have applied (a replay waits until the drain settles them); absent from
     * an older server.
     */
    deadLettersInDoubt?: number;
    held: { reason: string; message: string; since?: string | null; until?: string | null } | null;
    /** With lanes: how many, and the lanes held by a head backing off, oldest first. */
    lanes?: {
      count: number;
      held: Array<{ lane: number | null; seq: number; key: string | null; attempts: number; nextAttemptAt: string }>;
    } | null;
  }>;
  targets: Array<{
    target: string;
    state: string;
    downSince: string | null;
    lastSuccessAt: string | null;
    lastRoundTripMs?: number | null;
    rowsPerSecond: number | null;
    lagMs: number | null;
    totals: { delivered: number };
    lastError: string | null;
    setupProblem: string | null;
    tables: Array<{ namespace: string; held: unknown }>;
  }>;
  /** Every origin's ledger row of the served tables, as the drain last read it. */
  fleet: Array<{
    target: string;
    namespace: string;
    label: string;
    through: number;
    updatedAt: string;
    self: boolean;
    lanes?: { rows: number; slowest: { ledgerRow: string; through: number; updatedAt: string } };
  }>;
  dbDirs: Array<{ app: string | null }>;
  /** Each tenant template: its databases and held tenants as the running drain reports them (null: no drain). */
  tenants: Array<{
    app: string | null;
    target: string | null;
    tables: string[];
    databases: { open: number; maxOpen: number } | null;
    held: { count: number; tenants: TenantHold[] } | null;
  }>;
  totals: { deadLetters: number };
}

/** A held tenant: why, since and until when (ISO-8601). */
export interface TenantHold {
  tenant: string;
  reason: string;
  message: string;
  since: string;
  until: string;
}

/** One tenant (GET /api/v1/tenants/{tenant}): its hold at each template, its rows per table. */
export interface TenantStatus {
  generatedAt: string;
  tenant: string;
  targets: Array<{ app: string | null; target: string | null; held: TenantHold | null }>;
  tables: Array<{
    app: string | null;
    namespace: string;
    pending: number;
    oldestPendingAgeMs: number | null;
    head: TenantRow | null;
    failing: TenantRow | null;
    deadLetters: number;
  }>;
}

/** A tenant's row in a table: its seq, attempts, last error, next attempt. */
export interface TenantRow {
  seq: number;
  attempts: number;
  lastError: string | null;
  lastErrorClass: string | null;
  nextAttemptAt: string | null;
}

/** One dead letter (GET /api/v1/dead-letters). */
export type Letter = LetterView;

/** What the caller may do (GET /api/v1/access). */
export interface Access {
  who: string;
  access: "read" | "write";
  can_act: boolean;
  write_configured: boolean;
  version: string;
}

/** An answer other than 2xx: its status and the API's message. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/**
 * Calls `/api/v1{path}` with `token` (null: none) and returns the JSON answer; throws ApiError for anything
 * but 2xx.
 */
export async function api<T>(
  path: string,
  token: string | null,
  init: { method?: string; body?: unknown } = {},
): Promise<T> {
  const headers: Record<string, string> = {};
  if (token) headers.authorization = `Bearer ${token}`;
  if (init.body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(`/api/v1${path}`, {
    method: init.method ?? "GET",
    headers,
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
    cache: "no-store",
    credentials: "omit",
  });
  const body = (await res.json().catch(() => ({}))) as { error?: { message?: string } };
  if (!res.ok) throw new ApiError(res.status, body.error?.message ?? `HTTP ${res.status}`);
  return body as T;
}
