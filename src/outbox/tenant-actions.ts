// The operator's writes on one tenant's queued rows (SPEC §4c), file by file: ending their backoff
// (`kick --tenant`), and moving them aside into the dead letters when the tenant's database is
// gone for good (`skip --tenant`), so the tenant's backlog neither waits forever nor is lost — a
// replay brings it back if the tenant returns. Each write is one IMMEDIATE transaction over the
// whole file, safe while the drain runs: it sees the rows before or after, never half of them.
// A read-only look comes first, so a file with nothing of the tenant is never opened for writing.
import type { Database } from "bun:sqlite";
import { SelectionChangedError } from "../errors.ts";
import { hasOutboxSchema } from "./health.ts";
import type { RetriedHead } from "./outbox.ts";
import { QueueView } from "./queue-view.ts";
import type { DeadReason } from "./rows.ts";
import { LAYOUTS, layoutPendingCount, pendingCountSql, tableColumns } from "./schema.ts";
import { readSnapshot, storageError } from "./sqlite-open.ts";
import { isoTimestamp } from "./timestamp.ts";

/** The reason of the letters `skip --tenant` moves aside: the tenant's database no longer exists. */
export const TENANT_GONE: DeadReason = "tenant_gone";

/** One namespace's rows of a tenant moved aside (or, in a look before, that would be): how many, in how many groups, from which seq to which. */
export interface TenantRowsAside {
  namespace: string;
  rows: number;
  /** Groups among them (a row alone counts as none): each moves whole. */
  groups: number;
  first: number;
  last: number;
}

/** A tenant's row whose backoff was ended, and its namespace. */
export type RetriedTenantRow = RetriedHead & { namespace: string };

/**
 * The rows `skip --tenant` takes: every pending row of the tenant, and every other row of a group
 * one of them is in (a transaction takes its tenant from its first push: a row pushed without one
 * inside it is still the tenant's), so a group moves whole. `?1` is the tenant.
 */
const TENANT_ROWS = `synced = 0 AND (tenant = ?1 OR grp IN (SELECT grp FROM outbox_queue WHERE tenant = ?1 AND synced = 0 AND grp IS NOT NULL))`;

const COUNT_SQL = `SELECT namespace, count(*) AS rows, count(DISTINCT grp) AS groups, min(seq) AS first, max(seq) AS last
  FROM outbox_queue WHERE ${TENANT_ROWS} GROUP BY namespace ORDER BY namespace`;

/** What `skip --tenant` would move in `file`, read-only (its dry run, and the count its guard checks). Throws StorageError when the file cannot be read. */
export function planTenantSkip(file: string, tenant: string): TenantRowsAside[] {
  return readTenant(file, (db) => db.query<TenantRowsAside, [string]>(COUNT_SQL).all(tenant));
}

/** `tenant`'s rows in `file` whose backoff `kick --tenant` would end, read-only. Throws StorageError when the file cannot be read. */
export function backedOffTenantRows(file: string, tenant: string): RetriedTenantRow[] {
  return readTenant(file, (db) =>
    db
      .query<RetriedTenantRow, [string]>(
        `SELECT namespace, seq, attempts, next_attempt_at AS nextAttemptAt FROM outbox_queue
         WHERE tenant = ?1 AND synced = 0 AND next_attempt_at IS NOT NULL ORDER BY seq`,
      )
      .all(tenant),
  );
}

function readTenant<T>(file: string, read: (db: Database) => T[]): T[] {
  try {
    return readSnapshot(file, (db) =>
      hasOutboxSchema(db, file) && tableColumns(db, "outbox_queue").includes("tenant") ? read(db) : [],
    );
  } catch (e) {
    throw storageError(e, "cannot read the tenant's rows", file);
  }
}

/**
 * One queue file's rows of a tenant, opened for writing (it must exist; `namespace` is any
 * namespace of it: the actions span the file).
 */
export class TenantQueue extends QueueView {
  constructor(path: string, namespace: string) {
    super(path, namespace, { create: false });
  }

  /**
   * Ends the backoff of every pending row of `tenant` in the file — the heads of its lanes that
   * failed, and their groups — in place, with their attempts: tried at the drain's next look.
   * Returns the rows whose backoff it ended.
   */
  retry(tenant: string): RetriedTenantRow[] {
    this.queueFile.ensureOpen();
    const file = this.queueFile;
    return file.write("cannot end the tenant's backoff", () => {
      const rows = file.db
        .query<RetriedTenantRow, [string]>(
          `SELECT namespace, seq, attempts, next_attempt_at AS nextAttemptAt FROM outbox_queue
           WHERE tenant = ?1 AND synced = 0 AND next_attempt_at IS NOT NULL ORDER BY seq`,
        )
        .all(tenant);
      if (rows.length > 0)
        file.db
          .query(
            "UPDATE outbox_queue SET next_attempt_at = NULL WHERE tenant = ?1 AND synced = 0 AND next_attempt_at IS NOT NULL",
          )
          .run(tenant);
      return rows;
    });
  }

  /**
   * Moves every pending row of `tenant` in the file aside into the dead letters, reason
   * `tenant_gone`, each keeping its own error and attempts — whole groups, in every namespace of the
   * file, in ONE transaction. With `expected` (what planTenantSkip counted), only if the file still
   * holds exactly those rows; otherwise throws SelectionChangedError and moves nothing. Returns what
   * moved, per namespace.
   */
  skip(tenant: string, expected?: readonly TenantRowsAside[]): TenantRowsAside[] {
    this.queueFile.ensureOpen();
    const file = this.queueFile;
    const db = file.db;
    return file.write("cannot move the tenant's rows aside", () => {
      const moving = db.query<TenantRowsAside, [string]>(COUNT_SQL).all(tenant);
      if (expected !== undefined && !sameRows(moving, expected))
        throw new SelectionChangedError(
          `the rows of tenant "${tenant}" changed since they were counted: ${total(expected)} then, ${total(moving)} now (${file.path}); nothing was moved — rows still arriving mean the application still writes for this tenant`,
          file.path,
          file.namespace,
        );
      if (moving.length === 0) return [];
      const count = db.query<{ pending: number }, [string]>(pendingCountSql(layoutPendingCount(file.layout)));
      const before = new Map(moving.map((m) => [m.namespace, count.get(m.namespace)!.pending]));
      const groups = db
        .query<{ grp: number }, [string]>(
          `SELECT DISTINCT grp FROM outbox_queue WHERE ${TENANT_ROWS} AND grp IS NOT NULL`,
        )
        .all(tenant);
      db.query(
        `INSERT INTO outbox_dead_log (seq, namespace, source, tag, payload, prev_seq, created_at, attempts, error, error_class, reason, dead_at, grp, traceparent, tracestate, lane_key, tenant)
         SELECT seq, namespace, source, tag, payload, prev_seq, created_at, attempts, last_error, last_error_class, ?2, ?3, grp, traceparent, tracestate, lane_key, tenant
         FROM outbox_queue WHERE ${TENANT_ROWS}`,
      ).run(tenant, TENANT_GONE, isoTimestamp());
      db.query(`DELETE FROM outbox_queue WHERE ${TENANT_ROWS}`).run(tenant);
      const dropSpan = db.query("DELETE FROM outbox_group WHERE grp = ?");
      for (const { grp } of groups) dropSpan.run(grp);
      // Rows that left from between others leave a hole in a layout that counts by position.
      for (const m of moving)
        if (count.get(m.namespace)!.pending !== before.get(m.namespace)! - m.rows)
          LAYOUTS[file.layout].closeHole(db, m.namespace);
      return moving;
    });
  }
}

const total = (rows: readonly TenantRowsAside[]) => rows.reduce((n, r) => n + r.rows, 0);

function sameRows(a: readonly TenantRowsAside[], b: readonly TenantRowsAside[]): boolean {
  return (
    a.length === b.length &&
    a.every((r, i) => r.namespace === b[i]!.namespace && r.rows === b[i]!.rows && r.last === b[i]!.last)
  );
}

/** Opens `file` (it must exist) for `tenant`'s rows, runs `fn` and closes it, whatever `fn` does. */
export function withTenantQueue<T>(file: string, namespace: string, fn: (queue: TenantQueue) => T): T {
  const queue = new TenantQueue(file, namespace);
  try {
    return fn(queue);
  } finally {
    queue.close();
  }
}
