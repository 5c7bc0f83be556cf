import { constants, type Database, type SQLQueryBindings, type Statement } from "bun:sqlite";
import { ForeignTransactionError, InvalidArgumentError, OutboxClosedError, StorageError } from "../errors.ts";
import type { Durability } from "../vocabulary.ts";
import type { QueueLayout } from "./layout.ts";
import { isEmbedded, migrate, queueLayout, readOrigin } from "./schema.ts";
import { openMigrated, requireWal, retryBusy, storageError } from "./sqlite-open.ts";
import { isoTimestamp } from "./timestamp.ts";
import { formatDuration } from "../duration.ts";

// How often a producer checks that its file is still the one at its path (a stat, ~0.9 µs: too
// dear for every enqueue). A file deleted or replaced while open would otherwise take every later
// event with it, silently; so at most this much is lost before enqueue throws.
const MOVED_CHECK_MS = 1_000;

/** How our own connection to a queue file is opened. Defaults: 10 s busy timeout, files created 0600. */
export interface QueueDbOptions {
  durability: Durability;
  busyTimeoutMs: number;
  fileMode?: number;
  /** false: the file must exist already (see OpenOptions.create). */
  create?: boolean;
  /** The namespace opening it, for messages. */
  namespace?: string;
  /** Told how long each `write` held the file's write lock, in seconds (the drain's metric); default none. */
  onWriteHold?: ((seconds: number) => void) | null;
}

/**
 * The local transaction open on a file and the group its rows form: every row appended while it is
 * open carries `id` (the first row's seq) as its group. Appends count seqs and ords on from what
 * they read once (nobody else can insert while the transaction holds the write lock).
 */
export interface OpenGroup {
  /** The seq of the group's first row; null until a row is written. */
  id: number | null;
  /** The next seq to place a row at, once read (RowInserts.nextSeq). */
  nextSeq: number | null;
  /**
   * Each namespace appended to in the transaction: its tail (the last row it holds), its next ord
   * (RowInserts.nextOrd), its pending count (for max_pending).
   */
  readonly namespaces: Map<string, { tail: number | null; ord: number; pending: number }>;
  /** The namespaces the current group touched: more than one, and it is recorded in outbox_group. */
  readonly touched: Set<string>;
  /** One transaction, one creation time. */
  readonly createdAt: string;
  rows: number;
  bytes: number;
  /** The seq of the last row appended. */
  last: number;
}

/**
 * One open queue file — our own connection to a file of ours (or the reference's), or the
 * application's own `bun:sqlite` connection when the outbox lives inside its database — shared by
 * every namespace of the file that this process opens through it: the layout and origin, the
 * statements prepared on it, and the local transaction a producer opened (`begin`/`commit`, the
 * group its rows form). Every SQLite failure becomes a typed error naming the file.
 */
export class QueueDb {
  readonly path: string;
  readonly db: Database;
  readonly layout: QueueLayout;
  readonly origin: string;
  /** The application's own database: its connection, pragmas and transactions are the application's. */
  readonly embedded: boolean;
  /**
   * How long a write or read waits out another connection's lock (SQLITE_BUSY), in short turns
   * (retryBusy) rather than SQLite's backing-off handler, which our connections turn off once
   * open. 0 on the application's connection: its own busy handler has waited already.
   */
  readonly busyTimeoutMs: number;
  /** The file says it holds rows for a tenant (see TENANT_FORMAT in schema.ts): checked once per open file. */
  tenantRowsMarked = false;
  /** Whether closing this closes the connection (false for the application's). */
  readonly #owned: boolean;
  #refs = 1;
  #closed = false;
  #statements: Statement[] = [];
  #begin: Statement;
  #commit: Statement;
  #rollback: Statement;
  #span: Statement;
  #group: OpenGroup | null = null;
  #movedCheckedAt = Date.now();
  #movedFlag = new Int32Array(2);
  readonly #onWriteHold: ((seconds: number) => void) | null;

  private constructor(
    path: string,
    db: Database,
    owned: boolean,
    busyTimeoutMs: number,
    onWriteHold: ((seconds: number) => void) | null = null,
  ) {
    this.path = path;
    this.db = db;
    this.#owned = owned;
    this.busyTimeoutMs = busyTimeoutMs;
    this.#onWriteHold = onWriteHold;
    try {
      this.origin = readOrigin(db)!;
      this.layout = queueLayout(db);
      this.embedded = isEmbedded(db);
      this.#begin = this.prepare("BEGIN IMMEDIATE");
      this.#commit = this.prepare("COMMIT");
      this.#rollback = this.prepare("ROLLBACK");
      this.#span = this.prepare("INSERT INTO outbox_group (grp, last_seq, namespaces) VALUES (?, ?, ?)");
      // SQLite's handler sleeps 1, 2, 5 … 50, then 100 ms between tries and keeps no queue: the
      // waiter that slept longest keeps losing the lock to those that just tried (see retryBusy).
      if (owned) db.run("PRAGMA busy_timeout = 0");
    } catch (e) {
      this.#finalize();
      if (owned) db.close();
      throw storageError(e, "cannot prepare outbox", path);
    }
  }

  /** Opens (creating and migrating if needed) our own connection to the queue file at `path`. */
  static open(path: string, options: QueueDbOptions): QueueDb {
    return new QueueDb(path, openMigrated(path, options), true, options.busyTimeoutMs, options.onWriteHold);
  }

  /**
   * The application's own database, by the explicit opt-in of `new SQLMiddleware({ database })`:
   * it must be a file (the drain reads it) in WAL mode (never switched here); the outbox creates or
   * upgrades its `outbox_*` tables in it and leaves everything else as it is.
   */
  static borrow(database: Database): QueueDb {
    const path = database.filename;
    if (typeof path !== "string" || path === "" || path === ":memory:" || path.startsWith("file::memory:")) {
      throw new InvalidArgumentError(
        "SQLMiddleware({ database }) needs a database in a file: the drain reads the events from it (an in-memory database has no file)",
      );
    }
    // Creating or upgrading our tables needs a transaction of its own, and a push inside the application's
    // would be refused anyway.
    if (database.inTransaction) throw new ForeignTransactionError(path);
    try {
      requireWal(database, path);
      migrate(database, path, { embed: true });
    } catch (e) {
      throw storageError(e, "cannot use the application's database for the outbox", path);
    }
    return new QueueDb(path, database, false, 0);
  }

  /** A statement kept for the life of the connection (finalized by close()). */
  prepare<Row = unknown, Params extends SQLQueryBindings[] = SQLQueryBindings[]>(sql: string): Statement<Row, Params> {
    const stmt = this.db.prepare<Row, Params>(sql) as Statement<Row, Params>;
    this.#statements.push(stmt as unknown as Statement);
    return stmt;
  }

  /** One more user of this connection (a namespace opened on it); each calls release() once. */
  acquire(): this {
    this.ensureOpen();
    this.#refs += 1;
    return this;
  }

  /** One user is done; the last one closes the connection (ours) or lets go of it (the application's). */
  release(): void {
    if (this.#closed) return;
    this.#refs -= 1;
    if (this.#refs <= 0) this.close();
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Throws OutboxClosedError once closed. */
  ensureOpen(namespace = ""): void {
    if (this.#closed) throw new OutboxClosedError(this.path, namespace);
  }

  /** The local transaction a producer opened, if one is open. */
  get group(): OpenGroup | null {
    return this.#group;
  }

  /**
   * Runs `fn` in one BEGIN IMMEDIATE transaction; any failure rolls back and throws a StorageError
   * saying `what`. Inside a producer's open transaction it runs in a savepoint of it instead, so a
   * failed step undoes only itself and the group's counters are restored with it. How long the
   * write lock was held — from BEGIN IMMEDIATE's return to COMMIT's or ROLLBACK's — goes to
   * `onWriteHold`, when opened with one.
   */
  write<T>(what: string, fn: () => T, namespace?: string): T {
    const group = this.#group;
    if (group !== null) return this.#inSavepoint(what, fn, group, namespace);
    try {
      this.#takeWriteLock();
    } catch (e) {
      throw storageError(e, what, this.path, namespace);
    }
    const heldAt = this.#onWriteHold === null ? 0 : Bun.nanoseconds();
    try {
      const result = fn();
      this.#commit.run();
      return result;
    } catch (e) {
      if (this.db.inTransaction) this.#rollback.run();
      throw storageError(e, what, this.path, namespace);
    } finally {
      this.#onWriteHold?.((Bun.nanoseconds() - heldAt) / 1e9);
    }
  }

  #inSavepoint<T>(what: string, fn: () => T, group: OpenGroup, namespace: string | undefined): T {
    const { id, nextSeq, rows, bytes, last } = group;
    const namespaces = [...group.namespaces].map(([name, state]) => [name, { ...state }] as const);
    const touched = [...group.touched];
    this.db.run("SAVEPOINT outbox_step");
    try {
      const result = fn();
      this.db.run("RELEASE outbox_step");
      return result;
    } catch (e) {
      this.db.run("ROLLBACK TO outbox_step");
      this.db.run("RELEASE outbox_step");
      Object.assign(group, { id, nextSeq, rows, bytes, last });
      group.namespaces.clear();
      for (const [name, state] of namespaces) group.namespaces.set(name, state);
      group.touched.clear();
      for (const name of touched) group.touched.add(name);
      throw storageError(e, what, this.path, namespace);
    }
  }

  /**
   * Runs `fn` (reads: run again while another connection's lock makes it SQLITE_BUSY), turning a failure into
   * a StorageError saying `what`.
   */
  read<T>(what: string, fn: () => T, namespace?: string): T {
    try {
      return fn();
    } catch (e) {
      try {
        return retryBusy(e, fn, this.busyTimeoutMs);
      } catch (e) {
        throw storageError(e, what, this.path, namespace);
      }
    }
  }

  /** BEGIN IMMEDIATE, waiting for the write lock up to busyTimeoutMs. */
  #takeWriteLock(): void {
    try {
      this.#begin.run();
    } catch (e) {
      retryBusy(e, () => this.#begin.run(), this.busyTimeoutMs);
    }
  }

  /**
   * Opens a producer's local transaction (BEGIN IMMEDIATE: the write lock is taken up front, so a
   * read inside it that later writes cannot fail with SQLITE_BUSY) and the group its rows form.
   * Refused inside a transaction the outbox did not open.
   */
  begin(): void {
    this.ensureOpen();
    if (this.#group !== null) throw new InvalidArgumentError(`a transaction is already open on ${this.path}`);
    if (this.db.inTransaction) throw new ForeignTransactionError(this.path);
    try {
      this.#takeWriteLock();
    } catch (e) {
      throw storageError(e, "cannot begin a transaction", this.path);
    }
    this.#group = {
      id: null,
      nextSeq: null,
      namespaces: new Map(),
      touched: new Set(),
      createdAt: isoTimestamp(),
      rows: 0,
      bytes: 0,
      last: 0,
    };
  }

  /**
   * Ends the current group of the open transaction and starts the next one, in the same
   * transaction (dead-letter replay re-enqueues several groups at once, each its own again).
   */
  nextGroup(): void {
    const group = this.#group;
    if (group === null) throw new InvalidArgumentError(`no transaction is open on ${this.path}`);
    this.#recordSpan(group);
    Object.assign(group, { id: null, rows: 0, bytes: 0 });
    group.touched.clear();
  }

  #recordSpan(group: OpenGroup): void {
    if (group.id !== null && group.touched.size > 1)
      this.#span.run(group.id, group.last, JSON.stringify([...group.touched].sort()));
  }

  /**
   * Commits the open transaction; a group that touched several namespaces is recorded for the drain first
   * (outbox_group).
   */
  commit(): void {
    const group = this.#group;
    if (group === null) return;
    try {
      this.#recordSpan(group);
      this.#commit.run();
    } catch (e) {
      if (this.db.inTransaction) this.#rollback.run();
      throw storageError(e, "cannot commit the transaction", this.path);
    } finally {
      this.#group = null;
    }
  }

  /** Rolls the open transaction back (nothing of it stays); idempotent. */
  rollback(): void {
    if (this.#group === null) return;
    this.#group = null;
    if (this.db.inTransaction) this.#rollback.run();
  }

  /**
   * Runs `fn` in one local transaction: what it writes — the application's rows on this connection
   * and every push — commits together or not at all, and its pushes form one group. Inside an open
   * transaction it joins it. `fn` must be synchronous: an await would let other code write into
   * the transaction, so a promise is refused (and rolled back).
   */
  transaction<T>(fn: () => T): T {
    if (this.#group !== null) return fn();
    this.begin();
    let result: T;
    try {
      result = callSynchronously(fn, "outbox.transaction(fn)");
    } catch (e) {
      this.rollback();
      throw e;
    }
    this.commit();
    return result;
  }

  /** Throws (and closes) when the file at our path is no longer the one we write: deleted, renamed or replaced. */
  checkNotMoved(namespace: string): void {
    if (!this.#owned) return; // the application's own database is the application's to move
    const now = Date.now();
    if (now - this.#movedCheckedAt < MOVED_CHECK_MS) return;
    this.#movedCheckedAt = now;
    this.#movedFlag[0] = 0;
    if (this.db.fileControl(constants.SQLITE_FCNTL_HAS_MOVED, this.#movedFlag) !== 0 || this.#movedFlag[0] === 0)
      return;
    this.close();
    throw new StorageError(
      `cannot enqueue: namespace "${namespace}" in ${this.path}: the file was deleted or replaced while open; events enqueued in the last ${formatDuration(MOVED_CHECK_MS)} went with it. The outbox is closed; open it again to write to a new file at this path.`,
      this.path,
      namespace,
    );
  }

  /** Closes the connection (ours) or lets go of it (the application's); idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#group !== null) this.rollback();
    this.#finalize();
    if (this.#owned) this.db.close(false);
  }

  // Finalize our prepared statements first: SQLite only closes (checkpointing and removing the
  // -wal/-shm files when it is the last connection) once no statement is left open.
  #finalize(): void {
    for (const stmt of this.#statements) stmt.finalize();
    this.#statements = [];
  }
}

/**
 * Calls a transaction's `fn`, refusing a promise: an await inside it would let other code write into the
 * transaction. `who` names the call in the error.
 */
export function callSynchronously<T>(fn: () => T, who: string): T {
  const result = fn();
  if (result instanceof Promise) {
    result.catch(() => {}); // its rejection is not ours to report
    throw new InvalidArgumentError(
      `${who} needs a synchronous function: an await inside it would let other code write into the transaction; do the async work before or after`,
    );
  }
  return result;
}
