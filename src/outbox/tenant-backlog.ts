// A tenant template's queue as operators see it per tenant (SPEC §4c): which tenants have rows
// waiting, how many and since when, and one tenant's rows table by table. Read-only, one snapshot
// of a file per call. No index holds the tenant (an index would cost every push), so each read
// but the sample is a scan of the file's pending rows — for `status` and a console search, never
// for a scrape: the metrics read a bounded sample (sampleTenants).
import type { Database } from "bun:sqlite";
import { fileFeatures, fileNamespaces, hasOutboxSchema } from "./health.ts";
import { mayHoldTenantRowsIn, tableColumns } from "./schema.ts";
import { readSnapshot, storageError } from "./sqlite-open.ts";

/** One namespace's pending rows of one tenant (null: the rows without a tenant): how many, and its first row's seq and time. */
export interface TenantBacklogRow {
  namespace: string;
  tenant: string | null;
  rows: number;
  firstSeq: number;
  /** created_at of its first row (ISO-8601, as stored). */
  firstCreatedAt: string;
}

/** A row of one tenant as `status --tenant` shows it: where it stands, how often it was tried, why it failed, when it goes next. */
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
 * before a scan. A file that cannot be read is left to the caller's other reads to report.
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
 * without a tenant under null, in one read. A scan of the pending rows; throws StorageError when
 * the file cannot be read.
 */
export function readTenantBacklog(file: string, namespaces?: readonly string[]): TenantBacklogRow[] {
  try {
    return readSnapshot(file, (db) => {
      if (!hasOutboxSchema(db, file) || !hasTenantColumn(db)) return [];
      const names = namespaces ?? fileNamespaces(db, fileFeatures(db));
      // A bare column beside the one min() comes from the row with that minimum (SQLite): the first row's time.
      const byTenant = db.query<TenantBacklogRow, [string]>(
        `SELECT namespace, tenant, count(*) AS rows, min(seq) AS firstSeq, created_at AS firstCreatedAt
         FROM outbox_queue WHERE namespace = ?1 AND synced = 0 GROUP BY tenant`,
      );
      return names.flatMap((ns) => byTenant.all(ns));
    });
  } catch (e) {
    throw storageError(e, "cannot read the tenants' backlog", file);
  }
}

/**
 * The tenants among the first `sampleRows` pending rows of `namespace` (by seq): one walk of the
 * worker index that stops at the limit, so it costs the same over a million rows as over ten
 * thousand. Throws StorageError when the file cannot be read.
 */
export function sampleTenants(file: string, namespace: string, sampleRows: number): string[] {
  try {
    return readSnapshot(file, (db) => {
      if (!hasOutboxSchema(db, file) || !hasTenantColumn(db)) return [];
      // `synced = 0` lets SQLite walk idx_outbox_worker in seq order and stop (see KEY_SAMPLE_SQL).
      return db
        .query<{ tenant: string }, [string, number]>(
          `SELECT DISTINCT tenant FROM (SELECT tenant FROM outbox_queue WHERE namespace = ?1 AND synced = 0 ORDER BY seq LIMIT ?2)
           WHERE tenant IS NOT NULL`,
        )
        .all(namespace, sampleRows)
        .map((r) => r.tenant);
    });
  } catch (e) {
    throw storageError(e, "cannot sample the tenants' backlog", file);
  }
}

/**
 * `tenant`'s rows in each namespace of `file` that holds any, pending or dead, in one read: one
 * scan of the pending rows, one of the dead log. Throws StorageError when the file cannot be read.
 */
export function readTenantRows(file: string, tenant: string): TenantTableRows[] {
  try {
    return readSnapshot(file, (db) => {
      if (!hasOutboxSchema(db, file) || !hasTenantColumn(db)) return [];
      const pending = db
        .query<{ namespace: string; pending: number; headSeq: number; failingSeq: number | null }, [string]>(
          `SELECT namespace, count(*) AS pending, min(seq) AS headSeq,
             min(CASE WHEN last_error IS NOT NULL THEN seq END) AS failingSeq
           FROM outbox_queue WHERE tenant = ?1 AND synced = 0 GROUP BY namespace`,
        )
        .all(tenant);
      const dead = tableColumns(db, "outbox_dead_log").includes("tenant")
        ? db
            .query<{ namespace: string; n: number }, [string]>(
              "SELECT namespace, count(*) AS n FROM outbox_dead_log WHERE tenant = ?1 AND replayed_at IS NULL GROUP BY namespace",
            )
            .all(tenant)
        : [];
      const row = db.query<TenantRowView & { createdAt: string }, [number]>(
        `SELECT seq, attempts, last_error AS lastError, last_error_class AS lastErrorClass,
           next_attempt_at AS nextAttemptAt, created_at AS createdAt FROM outbox_queue WHERE seq = ?`,
      );
      const deadOf = new Map(dead.map((d) => [d.namespace, d.n]));
      const names = [...new Set([...pending.map((p) => p.namespace), ...deadOf.keys()])].sort();
      return names.map((namespace): TenantTableRows => {
        const p = pending.find((x) => x.namespace === namespace);
        const head = p ? row.get(p.headSeq) : null;
        const failing = p?.failingSeq ? row.get(p.failingSeq) : null;
        return {
          namespace,
          file,
          pending: p?.pending ?? 0,
          oldestCreatedAt: head?.createdAt ?? null,
          head: head ? rowView(head) : null,
          failing: failing ? rowView(failing) : null,
          deadLetters: deadOf.get(namespace) ?? 0,
        };
      });
    });
  } catch (e) {
    throw storageError(e, "cannot read the tenant's rows", file);
  }
}

function rowView({ createdAt: _, ...view }: TenantRowView & { createdAt: string }): TenantRowView {
  return view;
}

/** Files the reference wrote, read without migrating them, have no tenant column: no row there has a tenant. */
function hasTenantColumn(db: Database): boolean {
  return tableColumns(db, "outbox_queue").includes("tenant");
}
