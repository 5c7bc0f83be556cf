// The operator's writes on one tenant's queued rows (SPEC §4c), file by file: ending their backoff
// (`kick --tenant`), and moving them aside into the dead letters when the tenant's database is
// gone for good (`skip --tenant`), so the tenant's backlog neither waits forever nor is lost — a
// replay brings it back if the tenant returns. Each write is one IMMEDIATE transaction over the
// whole file, safe while the drain runs: it sees the rows before or after, never half of them.
// A read-only look comes first, so a file with nothing of the tenant is never opened for writing.
import type { Database } from "bun:sqlite";
import { SelectionChangedError } from "../errors.ts";
import { fileFeatures, fileNamespaces, hasOutboxSchema } from "./health.ts";
import type { RetriedHead } from "./outbox.ts";
import { QueueView } from "./queue-view.ts";
import type { DeadReason } from "./rows.ts";
import { LAYOUTS, layoutPendingCount, pendingCountSql, tableColumns } from "./schema.ts";
import { readSnapshot, storageError } from "./sqlite-open.ts";
import { isoTimestamp } from "./timestamp.ts";

/** The reason of the letters `skip --tenant` moves aside: the tenant's database no longer exists. */
export const TENANT_GONE: DeadReason = "tenant_gone";

/**
 * One namespace's rows of a tenant moved aside (or, in a look before, that would be): how many, in how many
 * groups, from which seq to which.
 */
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

/** A row `skip --tenant` moves: its seq, namespace and group. */
interface MovedRow {
  seq: number;
  namespace: string;
  grp: number | null;
}

/**
 * The rows `skip --tenant` takes in an open file, seq order: every pending row of the tenant (one
 * seek per namespace through the index by tenant), and every other row of a group one of them is
 * in — a transaction takes its tenant from the first push that names one, so a row pushed before
 * it is in the tenant's group without being the tenant's — so that a group moves whole. A group is
 * a run of seqs in the file (the producer holds the write lock from its first row to its commit):
 * its rows are read from its first seq up to the first row of another.
 */
function rowsOf(db: Database, tenant: string): MovedRow[] {
  const own = db.query<MovedRow, [string, string]>(
    "SELECT seq, namespace, grp FROM outbox_queue WHERE namespace = ?1 AND synced = 0 AND tenant = ?2",
  );
  const rows = new Map<number, MovedRow>();
  for (const ns of fileNamespaces(db, fileFeatures(db))) for (const r of own.all(ns, tenant)) rows.set(r.seq, r);
  const run = db.query<MovedRow, [number]>(
    `SELECT seq, namespace, grp FROM outbox_queue WHERE seq >= ?1 AND grp = ?1 AND synced = 0
       AND seq < coalesce((SELECT min(seq) FROM outbox_queue WHERE seq > ?1 AND grp IS NOT ?1), 9223372036854775807)`,
  );
  const groups = new Set([...rows.values()].flatMap((r) => (r.grp === null ? [] : [r.grp])));
  for (const grp of groups) for (const r of run.all(grp)) rows.set(r.seq, r);
  return [...rows.values()].sort((a, b) => a.seq - b.seq);
}

/** The rows moved, per namespace (by name): how many, in how many groups, the first and last seq. */
function perNamespace(rows: readonly MovedRow[]): TenantRowsAside[] {
  const out = new Map<string, TenantRowsAside & { grps: Set<number> }>();
  for (const r of rows) {
    const ns = out.get(r.namespace) ?? {
      namespace: r.namespace,
      rows: 0,
      groups: 0,
      first: r.seq,
      last: r.seq,
      grps: new Set(),
    };
    ns.rows += 1;
    ns.last = r.seq;
    if (r.grp !== null) ns.grps.add(r.grp);
    out.set(r.namespace, ns);
  }
  return [...out.values()]
    .map(({ grps, ...ns }) => ({ ...ns, groups: grps.size }))
    .sort((a, b) => a.namespace.localeCompare(b.namespace));
}

/**
 * What `skip --tenant` would move in `file`, read-only (its dry run, and the count its guard checks). Throws
 * StorageError when the file cannot be read.
 */
export function planTenantSkip(file: string, tenant: string): TenantRowsAside[] {
  return readTenant(file, (db) => perNamespace(rowsOf(db, tenant)));
}

/** The pending rows of `tenant` backing off, in every namespace of an open file, seq order. */
function backedOff(db: Database, tenant: string): RetriedTenantRow[] {
  const query = db.query<RetriedTenantRow, [string, string]>(
    `SELECT namespace, seq, attempts, next_attempt_at AS nextAttemptAt FROM outbox_queue
     WHERE namespace = ?1 AND synced = 0 AND tenant = ?2 AND next_attempt_at IS NOT NULL`,
  );
  return fileNamespaces(db, fileFeatures(db))
    .flatMap((ns) => query.all(ns, tenant))
    .sort((a, b) => a.seq - b.seq);
}

/**
 * `tenant`'s rows in `file` whose backoff `kick --tenant` would end, read-only. Throws StorageError when the
 * file cannot be read.
 */
export function backedOffTenantRows(file: string, tenant: string): RetriedTenantRow[] {
  return readTenant(file, (db) => backedOff(db, tenant));
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
      const rows = backedOff(file.db, tenant);
      const end = file.db.query("UPDATE outbox_queue SET next_attempt_at = NULL WHERE seq = ?");
      for (const r of rows) end.run(r.seq);
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
      const rows = rowsOf(db, tenant);
      const moving = perNamespace(rows);
      if (expected !== undefined && !sameRows(moving, expected))
        throw new SelectionChangedError(
          `the rows of tenant "${tenant}" changed since they were counted: ${total(expected)} then, ${total(moving)} now (${file.path}); nothing was moved — rows still arriving mean the application still writes for this tenant`,
          file.path,
          file.namespace,
        );
      if (rows.length === 0) return [];
      const count = db.query<{ pending: number }, [string]>(pendingCountSql(layoutPendingCount(file.layout)));
      const before = new Map(moving.map((m) => [m.namespace, count.get(m.namespace)!.pending]));
      const seqs = JSON.stringify(rows.map((r) => r.seq));
      db.query(
        `INSERT INTO outbox_dead_log (seq, namespace, source, tag, payload, prev_seq, created_at, attempts, error, error_class, reason, dead_at, grp, traceparent, tracestate, lane_key, tenant)
         SELECT seq, namespace, source, tag, payload, prev_seq, created_at, attempts, last_error, last_error_class, ?2, ?3, grp, traceparent, tracestate, lane_key, tenant
         FROM outbox_queue WHERE seq IN (SELECT value FROM json_each(?1))`,
      ).run(seqs, TENANT_GONE, isoTimestamp());
      db.query("DELETE FROM outbox_queue WHERE seq IN (SELECT value FROM json_each(?1))").run(seqs);
      const dropSpan = db.query("DELETE FROM outbox_group WHERE grp = ?");
      for (const grp of new Set(rows.flatMap((r) => (r.grp === null ? [] : [r.grp])))) dropSpan.run(grp);
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
