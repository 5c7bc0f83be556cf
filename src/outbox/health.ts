import type { Database } from "bun:sqlite";
import { basename } from "node:path";
import { type OutboxError, StorageError } from "../errors.ts";
import { deliveredSqlOf, type DeliveredSql } from "./delivered.ts";
import { queueFilesOf, type QueueLocation } from "./files.ts";
import type { PendingCount } from "./layout.ts";
import { checkOwnFile, pendingCountIn, pendingCountSql, tableColumns } from "./schema.ts";
import { readSnapshot, storageError } from "./sqlite-open.ts";
import { parseTimestamp } from "./timestamp.ts";

/**
 * The health of one namespace, pull only. `isStuck` means the head has failed at least once and
 * still blocks the rows behind it: a recorded error (`lastError`), or two or more attempts charged
 * (the second attempt only happens after the first failed or the drain died delivering it).
 * `capacityPct` is `depth / maxPending × 100` (null when unbounded); `deadLetterCount` counts dead
 * letters not yet replayed, `deadLettersInDoubt` those of them the remote may have applied (a
 * replay waits until the drain settles them: see LetterRemote).
 */
export interface NamespaceHealth {
  namespace: string;
  file: string;
  depth: number;
  headSeq: number | null;
  headAttempts: number;
  isStuck: boolean;
  lastError: string | null;
  lastErrorClass: string | null;
  lastAttemptAt: string | null;
  nextAttemptAt: string | null;
  capacityPct: number | null;
  oldestPendingAgeMs: number | null;
  lastDeliveredAt: string | null;
  deadLetterCount: number;
  deadLettersInDoubt: number;
}

/** Options of health reads: `maxPending` for `capacityPct`, `now` for ages. */
export interface HealthOptions {
  maxPending?: number | null;
  now?: Date;
}

/**
 * What a file has: reference files lack our columns, pending count and dead log; ours log delivered ranges,
 * the reference's delivered rows.
 */
export interface FileFeatures {
  pendingCount: PendingCount;
  delivery: boolean;
  /** How the file logs what it delivered (null: no log at all). */
  deliveredLog: DeliveredSql | null;
  deadLog: boolean;
  deadReplay: boolean;
  /**
   * The dead log says what the remote may have done with each letter (see LetterRemote); earlier versions'
   * files do not.
   */
  deadRemote: boolean;
}

interface HeadRow {
  seq: number;
  createdAt: string;
  attempts: number;
  lastError: string | null;
  lastErrorClass: string | null;
  lastAttemptAt: string | null;
  nextAttemptAt: string | null;
}

/** Detects which of our migrations a file has, without changing it. */
export function fileFeatures(db: Database): FileFeatures {
  const queue = new Set(tableColumns(db, "outbox_queue"));
  const dead = new Set(tableColumns(db, "outbox_dead_log"));
  return {
    pendingCount: pendingCountIn(db),
    delivery: queue.has("attempts") && queue.has("last_error") && queue.has("next_attempt_at"),
    deliveredLog: deliveredSqlOf(db),
    deadLog: dead.has("namespace"),
    deadReplay: dead.has("replayed_at"),
    deadRemote: dead.has("remote"),
  };
}

/**
 * Computes one namespace's health with index lookups only (a reference file without our pending
 * count costs one COUNT over the namespace's index range). Never writes.
 */
export function namespaceHealth(
  db: Database,
  file: string,
  namespace: string,
  features: FileFeatures,
  options: HealthOptions = {},
): NamespaceHealth {
  const depth = db.query<{ pending: number }, [string]>(pendingCountSql(features.pendingCount)).get(namespace)!.pending;
  const delivery = features.delivery
    ? "attempts, last_error AS lastError, last_error_class AS lastErrorClass, last_attempt_at AS lastAttemptAt, next_attempt_at AS nextAttemptAt"
    : "0 AS attempts, NULL AS lastError, NULL AS lastErrorClass, NULL AS lastAttemptAt, NULL AS nextAttemptAt";
  const head = db
    .query<HeadRow, [string]>(
      `SELECT seq, created_at AS createdAt, ${delivery} FROM outbox_queue WHERE namespace = ? AND synced = 0 ORDER BY seq LIMIT 1`,
    )
    .get(namespace);
  const lastDeliveredAt = features.deliveredLog
    ? (db.query<{ t: string }, [string]>(features.deliveredLog.lastAt).get(namespace)?.t ?? null)
    : null;
  const dead = features.deadLog
    ? db
        .query<{ n: number; doubt: number }, [string]>(
          `SELECT count(*) AS n, ${features.deadRemote ? "count(CASE WHEN remote = 'in doubt' THEN 1 END)" : "0"} AS doubt FROM outbox_dead_log WHERE namespace = ?${features.deadReplay ? " AND replayed_at IS NULL" : ""}`,
        )
        .get(namespace)!
    : { n: 0, doubt: 0 };
  const now = (options.now ?? new Date()).getTime();
  const created = head ? parseTimestamp(head.createdAt) : null;
  const attempts = head?.attempts ?? 0;
  const lastError = head?.lastError ?? null;
  const maxPending = options.maxPending ?? null;
  return {
    namespace,
    file,
    depth,
    headSeq: head?.seq ?? null,
    headAttempts: attempts,
    isStuck: head !== null && (lastError !== null || attempts >= 2),
    lastError,
    lastErrorClass: head?.lastErrorClass ?? null,
    lastAttemptAt: head?.lastAttemptAt ?? null,
    nextAttemptAt: head?.nextAttemptAt ?? null,
    capacityPct: maxPending ? (depth * 100) / maxPending : null,
    oldestPendingAgeMs: created === null ? null : Math.max(0, now - created),
    lastDeliveredAt,
    deadLetterCount: dead.n,
    deadLettersInDoubt: dead.doubt,
  };
}

/** Every namespace that has rows anywhere in the file (a skip-scan over the namespace indexes). */
export function fileNamespaces(db: Database, features: FileFeatures): string[] {
  const tables = ["outbox_queue"];
  if (features.deliveredLog) tables.push(features.deliveredLog.table);
  if (features.deadLog) tables.push("outbox_dead_log");
  const names = new Set<string>();
  for (const t of tables) {
    const rows = db
      .query<{ n: string }, []>(
        `WITH RECURSIVE ns(n) AS (
          SELECT min(namespace) FROM ${t}
          UNION ALL SELECT (SELECT min(namespace) FROM ${t} WHERE namespace > ns.n) FROM ns WHERE ns.n IS NOT NULL
        ) SELECT n FROM ns WHERE n IS NOT NULL`,
      )
      .all();
    for (const r of rows) names.add(r.n);
  }
  return [...names].sort();
}

/** Health of every namespace of one file, opened read-only; an empty file reports its table name. */
export function fileHealth(file: string, options: HealthOptions = {}): NamespaceHealth[] {
  try {
    return readSnapshot(file, (db) => {
      if (!hasOutboxSchema(db, file)) return [emptyHealth(file, options)];
      const features = fileFeatures(db);
      const namespaces = fileNamespaces(db, features);
      if (namespaces.length === 0) namespaces.push(basename(file).replace(/\.db$/, ""));
      return namespaces.map((ns) => namespaceHealth(db, file, ns, features, options));
    });
  } catch (e) {
    throw storageError(e, "cannot read health", file);
  }
}

/**
 * True when `db` has the outbox tables; false for a file with no schema at all (an outbox whose
 * creator stopped before migrating it, e.g. zero bytes). Throws StorageError for any other database.
 */
export function hasOutboxSchema(db: Database, file: string): boolean {
  if (isBlank(db)) return false;
  checkOwnFile(db, file); // a newer format or another application's database: StorageError
  if (tableColumns(db, "outbox_queue").includes("seq")) return true;
  throw new StorageError(`not an outbox file (no outbox_queue table): ${file}`, file);
}

/** Whether a database has no schema objects at all (e.g. a zero-byte file). */
export function isBlank(db: Database): boolean {
  return db.query<{ n: number }, []>("SELECT count(*) AS n FROM sqlite_schema").get()!.n === 0;
}

function emptyHealth(file: string, options: HealthOptions): NamespaceHealth {
  return {
    namespace: basename(file).replace(/\.db$/, ""),
    file,
    depth: 0,
    headSeq: null,
    headAttempts: 0,
    isStuck: false,
    lastError: null,
    lastErrorClass: null,
    lastAttemptAt: null,
    nextAttemptAt: null,
    capacityPct: options.maxPending ? 0 : null,
    oldestPendingAgeMs: null,
    lastDeliveredAt: null,
    deadLetterCount: 0,
    deadLettersInDoubt: 0,
  };
}

/**
 * Health of every namespace of every `*.db` file in a db_dir — or of the one db_file
 * (`{ dbDir, dbFile }`) — read-only: files are opened read-only (immutable when no writer has them
 * open), nothing is created or migrated. A file that cannot be read throws StorageError naming it,
 * unless `onError` is given, which then receives the error and the file is skipped.
 */
export function healthAll(
  location: QueueLocation,
  options: HealthOptions & { onError?: (file: string, error: OutboxError) => void } = {},
): NamespaceHealth[] {
  const out: NamespaceHealth[] = [];
  for (const file of queueFilesOf(location)) {
    try {
      out.push(...fileHealth(file, options));
    } catch (e) {
      const err = storageError(e, "cannot read health", file);
      if (!options.onError) throw err;
      options.onError(file, err);
    }
  }
  return out;
}
