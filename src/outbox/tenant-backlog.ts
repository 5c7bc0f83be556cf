// A tenant template's queue as operators see it per tenant (SPEC §4c): which tenants have rows
// waiting, how many and since when, and one tenant's rows table by table. Read-only, one snapshot
// of a file per call. Through the index by tenant (TENANT_INDEX): counting every tenant's rows
// reads each row's index entry, not the row; one tenant's rows are a seek; the tenants are listed
// one seek each. A file written before it had the index is read by a scan.
import type { Database } from "bun:sqlite";
import { fileFeatures, fileNamespaces, hasOutboxSchema } from "./health.ts";
import { hasTenantIndex, mayHoldTenantRowsIn, tableColumns } from "./schema.ts";
import { readSnapshot, storageError } from "./sqlite-open.ts";

/**
 * One namespace's pending rows of one tenant (null: the rows without a tenant): how many, and its first row's
 * seq and time.
 */
export interface TenantBacklogRow {
  namespace: string;
  tenant: string | null;
  rows: number;
  firstSeq: number;
  /** created_at of its first row (ISO-8601, as stored). */
  firstCreatedAt: string;
}

/**
 * A row of one tenant as `status --tenant` shows it: where it stands, how often it was tried, why it failed,
 * when it goes next.
 */
export interface TenantRowView {
  seq: number;
  attempts: number;
  lastError: string | null;
  lastErrorClass: string | null;
  nextAttemptAt: string | null;
}

/** One tenant's rows in one namespace of a file (see readTenantRows). */
export interface TenantTableRows {
  namespace: string;
  file: string;
  pending: number;
  /** created_at of its first pending row (ISO-8601); null when none is pending. */
  oldestCreatedAt: string | null;
  /** Its first pending row: what goes next to the tenant's database. Null when none is pending. */
  head: TenantRowView | null;
  /** Its first pending row that failed (the head, or the head of a lane behind it), if any: why the tenant waits. */
  failing: TenantRowView | null;
  /** Its dead letters not replayed or discarded yet. */
  deadLetters: number;
}

/**
 * Whether `file` may hold rows for a tenant (see mayHoldTenantRowsIn): the one cheap question
 * before reading it by tenant. A file that cannot be read is left to the caller's other reads to report.
 */
export function mayHoldTenantRows(file: string): boolean {
  try {
    return readSnapshot(file, (db) => hasOutboxSchema(db, file) && mayHoldTenantRowsIn(db));
  } catch {
    return false;
  }
}

/**
 * The pending rows of each namespace of `file` (of `namespaces` only, when given) by tenant, rows
 * without a tenant under null, in one read. Throws StorageError when the file cannot be read.
 */
export function readTenantBacklog(file: string, namespaces?: readonly string[]): TenantBacklogRow[] {
  return readTenants(file, "cannot read the tenants' backlog", (db) => {
    const names = namespaces ?? fileNamespaces(db, fileFeatures(db));
    const byTenant = db.query<Omit<TenantBacklogRow, "firstCreatedAt">, [string]>(
      `SELECT namespace, tenant, count(*) AS rows, min(seq) AS firstSeq
       FROM outbox_queue WHERE namespace = ?1 AND synced = 0 GROUP BY tenant`,
    );
    // The first row's time, one seek each: asked of every row, it would read each row, not its index entry.
    const createdAt = db.query<{ at: string }, [number]>("SELECT created_at AS at FROM outbox_queue WHERE seq = ?");
    return names.flatMap((ns) =>
      byTenant.all(ns).map((r) => ({ ...r, firstCreatedAt: createdAt.get(r.firstSeq)!.at })),
    );
  });
}

/**
 * The first `limit` tenants (by name) with pending rows in `namespace`, one index seek each, so the
 * cost is the tenants', not the rows'; null when the file does not index its rows by tenant (a
 * listing would scan the queue once per tenant). Throws StorageError when the file cannot be read.
 */
export function listTenantsWithRows(file: string, namespace: string, limit: number): string[] | null {
  return readTenants(file, "cannot list the tenants with rows", (db) => {
    if (!hasTenantIndex(db)) return null;
    return db
      .query<{ tenant: string }, [string, number]>(
        `WITH RECURSIVE next(tenant) AS (
           SELECT min(tenant) FROM outbox_queue WHERE namespace = ?1 AND synced = 0 AND tenant IS NOT NULL
           UNION ALL
           SELECT (SELECT min(tenant) FROM outbox_queue WHERE namespace = ?1 AND synced = 0 AND tenant > next.tenant)
           FROM next WHERE next.tenant IS NOT NULL LIMIT ?2
         ) SELECT tenant FROM next WHERE tenant IS NOT NULL`,
      )
      .all(namespace, limit)
      .map((r) => r.tenant);
  });
}

/**
 * `tenant`'s rows in each namespace of `file` that holds any, pending or dead, in one read: one
 * seek per namespace for its pending rows, one read of the dead log. Throws StorageError when the
 * file cannot be read.
 */
export function readTenantRows(file: string, tenant: string): TenantTableRows[] {
  return readTenants(file, "cannot read the tenant's rows", (db) => {
    const pending = db.query<{ pending: number; headSeq: number | null; failingSeq: number | null }, [string, string]>(
      `SELECT count(*) AS pending, min(seq) AS headSeq, min(CASE WHEN last_error IS NOT NULL THEN seq END) AS failingSeq
       FROM outbox_queue WHERE namespace = ?1 AND synced = 0 AND tenant = ?2`,
    );
    const dead = tableColumns(db, "outbox_dead_log").includes("tenant")
      ? db
          .query<{ namespace: string; n: number }, [string]>(
            "SELECT namespace, count(*) AS n FROM outbox_dead_log WHERE tenant = ?1 AND replayed_at IS NULL GROUP BY namespace",
          )
          .all(tenant)
      : [];
    const deadOf = new Map(dead.map((d) => [d.namespace, d.n]));
    const row = db.query<TenantRowView & { createdAt: string }, [number]>(
      `SELECT seq, attempts, last_error AS lastError, last_error_class AS lastErrorClass,
         next_attempt_at AS nextAttemptAt, created_at AS createdAt FROM outbox_queue WHERE seq = ?`,
    );
    const out: TenantTableRows[] = [];
    for (const namespace of fileNamespaces(db, fileFeatures(db)).sort()) {
      const p = pending.get(namespace, tenant)!;
      const deadLetters = deadOf.get(namespace) ?? 0;
      if (p.pending === 0 && deadLetters === 0) continue;
      const head = p.headSeq === null ? null : row.get(p.headSeq);
      const failing = p.failingSeq === null ? null : row.get(p.failingSeq);
      out.push({
        namespace,
        file,
        pending: p.pending,
        oldestCreatedAt: head?.createdAt ?? null,
        head: head ? rowView(head) : null,
        failing: failing ? rowView(failing) : null,
        deadLetters,
      });
    }
    return out;
  });
}

function rowView({ createdAt: _, ...view }: TenantRowView & { createdAt: string }): TenantRowView {
  return view;
}

/**
 * Runs `read` on a snapshot of `file`; a file without an outbox schema or a tenant column (the reference's,
 * unmigrated) holds no tenant's row.
 */
function readTenants<T>(file: string, what: string, read: (db: Database) => T): T | [] {
  try {
    return readSnapshot(file, (db) =>
      hasOutboxSchema(db, file) && tableColumns(db, "outbox_queue").includes("tenant") ? read(db) : [],
    );
  } catch (e) {
    throw storageError(e, what, file);
  }
}
