import type { Database, SQLQueryBindings, Statement } from "bun:sqlite";
import { InvalidArgumentError, OutboxClosedError, type OutboxError } from "../errors.ts";
import { DELIVERED } from "./delivered.ts";
import type { QueueDb } from "./queue-db.ts";
import { QUEUE_ROW_COLUMNS, type OutboxRow } from "./rows.ts";
import type { QueueLayout } from "./layout.ts";
import { markedKey } from "./layout-lean.ts";
import { LAYOUTS, layoutPendingCount, pendingCountSql } from "./schema.ts";
import { storageError } from "./sqlite-open.ts";
import { isoTimestamp } from "./timestamp.ts";

/** The `outbox_meta` key of a namespace's sent mark is this and the namespace. */
export const SENT_KEY_PREFIX = "sent:";

/**
 * One namespace of one open queue file: the namespace's view of the shared connection (QueueDb),
 * the transaction wrappers that turn every SQLite failure into a typed error naming the file and
 * namespace, and the few reads every part of the queue needs (the pending count, the pending rows,
 * whether a seq exists). The producer's appends (append.ts), the drain's bookkeeping
 * (drain-queue.ts, with delivery-read.ts, confirmation.ts and resequence.ts) and the operator's
 * dead-letter work (dead-log.ts) all run on it; `Outbox` and `DrainQueue` are their faces.
 */
export class QueueFile {
  readonly path: string;
  readonly namespace: string;
  readonly origin: string;
  readonly layout: QueueLayout;
  readonly db: Database;
  /** The open file this namespace is a view of (shared with the file's other namespaces in this process). */
  readonly queueDb: QueueDb;
  #closed = false;
  #pending: Statement<{ pending: number }, [string]>;
  #pendingRows: Statement<OutboxRow, [string, number]>;
  #exists: Statement<{ found: number }, [number, string]>;
  #tenantRows: Statement<OutboxRow, [string, string | null, number]> | null = null;
  #nextTenant: Statement<{ tenant: string | null }, [string, string]> | null = null;
  #withoutTenant: Statement<{ found: number }, [string]> | null = null;

  /** A view of `queueDb` (already acquired for it: close() releases it). */
  constructor(queueDb: QueueDb, namespace: string) {
    this.queueDb = queueDb;
    this.path = queueDb.path;
    this.namespace = namespace;
    this.origin = queueDb.origin;
    this.layout = queueDb.layout;
    this.db = queueDb.db;
    try {
      this.#finishReferenceConfirms();
      this.adoptForeignRows();
      this.#pending = this.prepare(pendingCountSql(layoutPendingCount(this.layout)));
      this.#pendingRows = this.prepare(
        `SELECT ${QUEUE_ROW_COLUMNS} FROM outbox_queue WHERE namespace = ? AND synced = 0 AND seq > ? ORDER BY seq`,
      );
      this.#exists = this.prepare(`SELECT
        EXISTS (SELECT 1 FROM outbox_queue WHERE seq = ?1 AND namespace = ?2)
        OR ${DELIVERED[this.layout].contains}
        OR EXISTS (SELECT 1 FROM outbox_dead_log WHERE seq = ?1 AND namespace = ?2) AS found`);
    } catch (e) {
      queueDb.release();
      throw storageError(e, "cannot prepare outbox", this.path, namespace);
    }
  }

  /** A statement kept for the life of the file (finalized when its connection closes). */
  prepare<Row = unknown, Params extends SQLQueryBindings[] = SQLQueryBindings[]>(sql: string): Statement<Row, Params> {
    return this.queueDb.prepare<Row, Params>(sql);
  }

  get closed(): boolean {
    return this.#closed || this.queueDb.closed;
  }

  /** Throws OutboxClosedError once closed. */
  ensureOpen(): void {
    if (this.#closed) throw new OutboxClosedError(this.path, this.namespace);
    this.queueDb.ensureOpen(this.namespace);
  }

  /**
   * Runs `fn` in one write transaction (or a savepoint of the producer's open one); any failure rolls it back
   * and throws a StorageError saying `what`.
   */
  write<T>(what: string, fn: () => T): T {
    return this.queueDb.write(what, fn, this.namespace);
  }

  /**
   * Runs `fn` (reads: run again while another connection's lock makes it SQLITE_BUSY), turning a failure into
   * a StorageError saying `what`.
   */
  read<T>(what: string, fn: () => T): T {
    return this.queueDb.read(what, fn, this.namespace);
  }

  /** This namespace's pending rows, without a scan (see PendingCount in schema.ts). */
  pendingCount(): number {
    return this.#pending.get(this.namespace)!.pending;
  }

  /**
   * This namespace's pending rows, head first (or from the first above `after`), streamed: a reader
   * that stops at its byte budget holds only the rows it took (rows may be megabytes each; a page
   * read at once would hold them all).
   */
  pendingRows(after: number | null = null): IterableIterator<OutboxRow> {
    // Every seq is at least 1 in both layouts (AUTOINCREMENT; the lean allocation and its
    // foreign-insert trigger start one above 0), so "after 0" is every pending row.
    return this.#pendingRows.iterate(this.namespace, after ?? 0);
  }

  /**
   * `tenant`'s pending rows of this namespace (null: those without a tenant), head first (or from
   * the first above `after`), streamed as pendingRows: one seek of the tenant index (see
   * TENANT_INDEX_DDL), made when the file took its first tenant row or by serveTenants.
   */
  pendingRowsOf(tenant: string | null, after: number | null = null): IterableIterator<OutboxRow> {
    this.#tenantRows ??= this.prepare(
      `SELECT ${QUEUE_ROW_COLUMNS} FROM outbox_queue WHERE namespace = ? AND synced = 0 AND tenant IS ? AND seq > ? ORDER BY seq`,
    );
    return this.#tenantRows.iterate(this.namespace, tenant, after ?? 0);
  }

  /** Up to `limit` tenants with pending rows of this namespace, by name, after `after` (null: from the first). */
  tenantsAfter(after: string | null, limit: number): string[] {
    // One seek per tenant: a tenant's rows are not read to find the next one.
    this.#nextTenant ??= this.prepare(
      "SELECT tenant FROM outbox_queue WHERE namespace = ? AND synced = 0 AND tenant > ? ORDER BY tenant LIMIT 1",
    );
    const tenants: string[] = [];
    for (let from = after ?? ""; tenants.length < limit; ) {
      const next = this.#nextTenant.get(this.namespace, from)?.tenant;
      if (next == null) break;
      tenants.push((from = next));
    }
    return tenants;
  }

  /** Whether pending rows of this namespace have no tenant (on a tenant template, each is a fault of its own). */
  hasRowsWithoutTenant(): boolean {
    this.#withoutTenant ??= this.prepare(
      "SELECT 1 AS found FROM outbox_queue WHERE namespace = ? AND synced = 0 AND tenant IS NULL LIMIT 1",
    );
    return this.#withoutTenant.get(this.namespace) !== null;
  }

  /** Whether `seq` is a row of this namespace anywhere: pending, delivered or dead-lettered. */
  exists(seq: number): boolean {
    return this.#exists.get(seq, this.namespace)!.found === 1;
  }

  /**
   * `namespace`'s sent mark (see DrainQueue.sentMark): the highest seq of it ever sent to a target,
   * 0 when none. Files of earlier versions kept it on the head as `sent_through`, honoured too.
   */
  sentMark(namespace = this.namespace): number {
    return (
      this.db
        .query<{ mark: number | null }, [string, string]>(
          `SELECT max(coalesce((SELECT CAST(value AS INTEGER) FROM outbox_meta WHERE key = ?1), 0),
            coalesce((SELECT sent_through FROM outbox_queue WHERE namespace = ?2 AND synced = 0 ORDER BY seq LIMIT 1), 0)) AS mark`,
        )
        .get(`${SENT_KEY_PREFIX}${namespace}`, namespace)!.mark ?? 0
    );
  }

  /** The head's seq, or null when nothing is pending. */
  headSeq(): number | null {
    return (
      this.db
        .query<{ seq: number }, [string]>(
          "SELECT seq FROM outbox_queue WHERE namespace = ? AND synced = 0 ORDER BY seq LIMIT 1",
        )
        .get(this.namespace)?.seq ?? null
    );
  }

  /** An InvalidArgumentError naming this namespace and file. */
  invalid(message: string): OutboxError {
    return new InvalidArgumentError(`${message} (namespace "${this.namespace}" in ${this.path})`, {
      namespace: this.namespace,
      file: this.path,
    });
  }

  /**
   * Throws (and closes the file) when the file at our path is no longer the one we write: deleted, renamed or
   * replaced.
   */
  checkNotMoved(): void {
    this.queueDb.checkNotMoved(this.namespace);
  }

  /** Closes this namespace's view; the connection closes with its last view. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.queueDb.release();
  }

  /**
   * Rows a foreign writer inserted get their place (see Layout.adoptForeignRows): on open, and before rows
   * are listed or counted.
   */
  adoptForeignRows(): void {
    const layout = LAYOUTS[this.layout];
    if (!this.read("cannot look for rows another writer inserted", () => layout.hasForeignRows(this.db))) return;
    this.write("cannot adopt rows another writer inserted", () => layout.adoptForeignRows(this.db));
  }

  /**
   * The reference confirms in two transactions; a crash between them leaves synced=1 rows. Finish
   * them — through write(), which waits out another writer's lock (our connections have SQLite's
   * busy handler off): a bare BEGIN IMMEDIATE failed at once with SQLITE_BUSY while the reference
   * was writing the file.
   */
  #finishReferenceConfirms(): void {
    const db = this.db;
    // Rows a tenant template applied out of order are at synced = 1 too, counted: they are confirmed
    // with the prefix they end up in (see Confirmation.markApplied), never out of order.
    const marked = () => db.query("SELECT 1 FROM outbox_meta WHERE key = ? AND CAST(value AS INTEGER) > 0");
    if (
      this.layout === "lean" &&
      this.read("cannot read the rows marked applied", () => marked().get(markedKey(this.namespace)))
    )
      return;
    const left = () =>
      db.query("SELECT 1 FROM outbox_queue WHERE namespace = ? AND synced = 1 LIMIT 1").get(this.namespace);
    if (!this.read("cannot read the reference's unfinished confirmations", left)) return;
    const now = isoTimestamp();
    this.write("cannot finish the reference's confirmations", () => {
      db.query(DELIVERED[this.layout].recordLeftovers).run(now, this.namespace);
      db.query("DELETE FROM outbox_queue WHERE namespace = ? AND synced = 1").run(this.namespace);
    });
  }
}
