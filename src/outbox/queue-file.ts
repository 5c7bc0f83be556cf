import { constants, type Database, type SQLQueryBindings, type Statement } from "bun:sqlite";
import { InvalidArgumentError, OutboxClosedError, StorageError, type OutboxError } from "../errors.ts";
import type { Durability } from "../vocabulary.ts";
import { QUEUE_ROW_COLUMNS, type OutboxRow } from "./rows.ts";
import { layoutPendingCount, pendingCountSql, queueLayout, readOrigin, type QueueLayout } from "./schema.ts";
import { openMigrated, retryBusy, storageError } from "./sqlite-open.ts";
import { isoTimestamp } from "./timestamp.ts";

// How often a producer checks that its file is still the one at its path (a stat, ~0.9 µs: too
// dear for every enqueue). A file deleted or replaced while open would otherwise take every later
// event with it, silently; so at most this much is lost before enqueue throws.
const MOVED_CHECK_MS = 1_000;

/**
 * One namespace of one open queue file: the connection, its layout and origin, the transaction
 * wrappers that turn every SQLite failure into a typed error naming the file and namespace, and the
 * few reads every part of the queue needs (the pending count, the pending rows, whether a seq
 * exists). The producer's appends (append.ts), the drain's bookkeeping (delivery-log.ts) and the
 * operator's dead-letter work (dead-log.ts) all run on it; `Outbox` is their public face.
 */
export class QueueFile {
  readonly path: string;
  readonly namespace: string;
  readonly origin: string;
  readonly layout: QueueLayout;
  readonly db: Database;
  /** How long a statement waits for another connection's lock before SQLITE_BUSY is an error (ms). */
  readonly busyTimeoutMs: number;
  #closed = false;
  #movedCheckedAt = Date.now();
  #movedFlag = new Int32Array(2);
  #statements: Statement[] = [];
  #begin: Statement;
  #commit: Statement;
  #rollback: Statement;
  #pending: Statement<{ pending: number }, [string]>;
  #pendingRows: Statement<OutboxRow, [string, number]>;
  #exists: Statement<{ found: number }, [number, string]>;

  constructor(path: string, namespace: string, options: { durability: Durability; busyTimeoutMs: number; fileMode?: number }) {
    this.path = path;
    this.namespace = namespace;
    this.busyTimeoutMs = options.busyTimeoutMs;
    this.db = openMigrated(path, namespace, options);
    try {
      this.origin = readOrigin(this.db)!;
      this.layout = queueLayout(this.db);
      this.#finishReferenceConfirms();
      this.#begin = this.prepare("BEGIN IMMEDIATE");
      this.#commit = this.prepare("COMMIT");
      this.#rollback = this.prepare("ROLLBACK");
      this.#pending = this.prepare(pendingCountSql(layoutPendingCount(this.layout)));
      this.#pendingRows = this.prepare(`SELECT ${QUEUE_ROW_COLUMNS} FROM outbox_queue WHERE namespace = ? AND synced = 0 AND seq > ? ORDER BY seq`);
      this.#exists = this.prepare(`SELECT
        EXISTS (SELECT 1 FROM outbox_queue WHERE seq = ?1 AND namespace = ?2)
        OR EXISTS (SELECT 1 FROM outbox_sync_log WHERE seq = ?1 AND namespace = ?2)
        OR EXISTS (SELECT 1 FROM outbox_dead_log WHERE seq = ?1 AND namespace = ?2) AS found`);
      // From here on SQLITE_BUSY is waited out by retryBusy, in short turns, in write() and read()
      // and the producer's append: SQLite's own handler backs off to 100 ms sleeps and starves
      // the waiters that slept longest (see retryBusy).
      this.db.run("PRAGMA busy_timeout = 0");
    } catch (e) {
      this.db.close();
      throw storageError(e, "cannot prepare outbox", path, namespace);
    }
  }

  /** A statement kept for the life of the file (finalized by close()). */
  prepare<Row = unknown, Params extends SQLQueryBindings[] = SQLQueryBindings[]>(sql: string): Statement<Row, Params> {
    const stmt = this.db.prepare<Row, Params>(sql) as Statement<Row, Params>;
    this.#statements.push(stmt as unknown as Statement);
    return stmt;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Throws OutboxClosedError once closed. */
  ensureOpen(): void {
    if (this.#closed) throw new OutboxClosedError(this.path, this.namespace);
  }

  /** Runs `fn` in one BEGIN IMMEDIATE transaction (waiting for the write lock up to busyTimeoutMs); any failure rolls back and throws a StorageError saying `what`. */
  write<T>(what: string, fn: () => T): T {
    try {
      this.#begin.run();
    } catch (e) {
      try {
        retryBusy(e, () => this.#begin.run(), this.busyTimeoutMs);
      } catch (e) {
        throw storageError(e, what, this.path, this.namespace);
      }
    }
    try {
      const result = fn();
      this.#commit.run();
      return result;
    } catch (e) {
      if (this.db.inTransaction) this.#rollback.run();
      throw storageError(e, what, this.path, this.namespace);
    }
  }

  /** Runs `fn` (reads: run again while another connection's lock makes it SQLITE_BUSY), turning a failure into a StorageError saying `what`. */
  read<T>(what: string, fn: () => T): T {
    try {
      return fn();
    } catch (e) {
      try {
        return retryBusy(e, fn, this.busyTimeoutMs);
      } catch (e) {
        throw storageError(e, what, this.path, this.namespace);
      }
    }
  }

  /** This namespace's pending rows, without a scan (see PendingCount in schema.ts). */
  pendingCount(): number {
    return this.#pending.get(this.namespace)!.pending;
  }

  /** This namespace's pending rows, head first (or from the first above `after`), streamed. */
  pendingRows(after: number | null = null): IterableIterator<OutboxRow> {
    // Every seq is at least 1 in both layouts (AUTOINCREMENT; the lean allocation and its
    // foreign-insert trigger start one above 0), so "after 0" is every pending row.
    return this.#pendingRows.iterate(this.namespace, after ?? 0);
  }

  /** Whether `seq` is a row of this namespace anywhere: pending, delivered (sync log) or dead-lettered. */
  exists(seq: number): boolean {
    return this.#exists.get(seq, this.namespace)!.found === 1;
  }

  /** The head's seq, or null when nothing is pending. */
  headSeq(): number | null {
    return this.db
      .query<{ seq: number }, [string]>("SELECT seq FROM outbox_queue WHERE namespace = ? AND synced = 0 ORDER BY seq LIMIT 1")
      .get(this.namespace)?.seq ?? null;
  }

  /** An InvalidArgumentError naming this namespace and file. */
  invalid(message: string): OutboxError {
    return new InvalidArgumentError(`${message} (namespace "${this.namespace}" in ${this.path})`, { namespace: this.namespace, file: this.path });
  }

  /** Throws (and closes) when the file at our path is no longer the one we write: deleted, renamed or replaced. */
  checkNotMoved(): void {
    const now = Date.now();
    if (now - this.#movedCheckedAt < MOVED_CHECK_MS) return;
    this.#movedCheckedAt = now;
    this.#movedFlag[0] = 0;
    if (this.db.fileControl(constants.SQLITE_FCNTL_HAS_MOVED, this.#movedFlag) !== 0 || this.#movedFlag[0] === 0) return;
    this.close();
    throw new StorageError(
      `cannot enqueue: namespace "${this.namespace}" in ${this.path}: the file was deleted or replaced while open; events enqueued in the last ${MOVED_CHECK_MS} ms went with it. The outbox is closed; open it again to write to a new file at this path.`,
      this.path,
      this.namespace,
    );
  }

  /** Closes the file; idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    // Finalize our prepared statements first: SQLite only closes (checkpointing and removing the
    // -wal/-shm files when it is the last connection) once no statement is left open.
    for (const stmt of this.#statements) stmt.finalize();
    this.db.close(false);
  }

  /** The reference confirms in two transactions; a crash between them leaves synced=1 rows. Finish them. */
  #finishReferenceConfirms(): void {
    const db = this.db;
    if (!db.query("SELECT 1 FROM outbox_queue WHERE namespace = ? AND synced = 1 LIMIT 1").get(this.namespace)) return;
    db.transaction(() => {
      db.query(
        "INSERT OR IGNORE INTO outbox_sync_log (seq, namespace, synced_at) SELECT seq, namespace, ? FROM outbox_queue WHERE namespace = ? AND synced = 1",
      ).run(isoTimestamp(), this.namespace);
      db.query("DELETE FROM outbox_queue WHERE namespace = ? AND synced = 1").run(this.namespace);
    }).immediate();
  }
}
