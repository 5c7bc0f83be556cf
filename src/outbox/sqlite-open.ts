import { Database, constants } from "bun:sqlite";
import { closeSync, existsSync, fchmodSync, openSync, statSync } from "node:fs";
import { OutboxError, StorageError } from "../errors.ts";
import { DEFAULT_FILE_MODE, type Durability } from "../vocabulary.ts";
import { checkOwnFile, migrate } from "./schema.ts";

/**
 * Page size of files we create (files that already exist keep theirs, e.g. the reference's 4096).
 * Every enqueue commit writes pages to the WAL (two in the lean layout: the table and the worker
 * index; four in the reference's) and the cost of a page write grows with its size: 2 KiB pages
 * make an enqueue faster than 4 KiB, batch enqueue and the drain unchanged; 1 KiB pages gained
 * little more, at a worse p99, slower batches and overflow pages for most rows (measured when chosen).
 */
export const NEW_FILE_PAGE_SIZE = 2048;

/** How our own connection to a queue file is set up. */
export interface OpenOptions {
  durability: Durability;
  busyTimeoutMs: number;
  namespace?: string;
  fileMode?: number;
  /** false: the file must exist (a `db_file` the drain serves: the producer creates it). Default true. */
  create?: boolean;
}

/**
 * The WAL of a file we write is cut back to this size when a checkpoint has emptied it: without
 * a limit it stays at its largest size (a burst's worth) for the life of the file.
 */
export const JOURNAL_SIZE_LIMIT_BYTES = 8 * 1024 * 1024;

/**
 * A file that must exist (`create: false`: a drain's db_file) and was not created by its producer
 * yet: it is missing, or it holds no tables at all — an application that has just created its
 * database and not yet opened its outbox in it. Taking such a file over would stamp the
 * application's database as an outbox file of ours (page size, application_id, user_version) and
 * race the application's own switch to WAL; the drain waits for the producer instead.
 */
export class NotCreatedError extends StorageError {
  constructor(
    path: string,
    readonly state: "does not exist yet" | "holds no tables yet",
    namespace?: string,
  ) {
    super(`${path} ${state} (the producer creates it on first use)`, path, namespace);
  }
}

/**
 * Opens (creating if needed) an outbox file for writing: WAL, the chosen synchronous level and a
 * busy timeout so concurrent producer processes wait for the write lock instead of failing. A new
 * file is created with `fileMode` (default 0600: payloads rest in clear, and no other local user
 * should read them), whatever the umask, and with incremental auto-vacuum so the space a drained
 * backlog leaves can be given back (see QueueDb.reclaim); an existing file keeps its mode. Reads
 * before it writes, so a file of garbage bytes, a newer format or another application's database is
 * reported untouched. An application's own database holding our tables (embedded) must already be
 * in WAL mode: its journal mode is the application's, never switched here.
 */
export function openWritable(path: string, options: OpenOptions): Database {
  let db: Database | undefined;
  try {
    if (options.create === false) {
      if (!existsSync(path)) throw new NotCreatedError(path, "does not exist yet", options.namespace);
    } else {
      createPrivate(path, options.fileMode ?? DEFAULT_FILE_MODE);
    }
    db = new Database(path, { create: options.create !== false, readwrite: true });
    db.run(`PRAGMA busy_timeout = ${Math.max(0, Math.floor(options.busyTimeoutMs))}`);
    // Fails on a non-database before any write.
    const fresh = db.query<{ n: number }, []>("SELECT count(*) AS n FROM sqlite_schema").get()!.n === 0;
    if (fresh && options.create === false) throw new NotCreatedError(path, "holds no tables yet", options.namespace);
    const own = checkOwnFile(db, path); // before WAL: switching journal mode already writes to the file
    if (own.embedded) {
      requireWal(db, path);
    } else {
      if (fresh) {
        // Both only take effect on a new, empty file.
        db.run(`PRAGMA page_size = ${NEW_FILE_PAGE_SIZE}`);
        db.run("PRAGMA auto_vacuum = INCREMENTAL");
      }
      const mode = db.query<{ journal_mode: string }, []>("PRAGMA journal_mode = WAL").get();
      if (mode?.journal_mode.toLowerCase() !== "wal") {
        throw new Error(`cannot switch to WAL journal mode (got ${mode?.journal_mode})`);
      }
    }
    db.run(`PRAGMA synchronous = ${options.durability === "full" ? "FULL" : "NORMAL"}`);
    db.run(`PRAGMA journal_size_limit = ${JOURNAL_SIZE_LIMIT_BYTES}`);
    return db;
  } catch (e) {
    db?.close();
    throw storageError(e, "cannot open outbox file", path, options.namespace);
  }
}

/** Throws StorageError unless `db` (an application's own database) is in WAL mode; never changes it. */
export function requireWal(db: Database, path: string): void {
  const mode = db.query<{ journal_mode: string }, []>("PRAGMA journal_mode").get()?.journal_mode ?? "unknown";
  if (mode.toLowerCase() === "wal") return;
  throw new StorageError(
    `${path} is in journal_mode=${mode}, not WAL: the outbox shares an application's own database only in WAL mode (so the drain's reads never block the application's writes); switch it with PRAGMA journal_mode = WAL — sqloutbox never changes it behind the application's back`,
    path,
  );
}

/**
 * Creates `path` as an empty file with `mode` unless it exists. SQLite would create it with 0644
 * minus the umask, and its -wal and -shm files copy the database file's mode, so creating the file
 * first makes all three private.
 */
function createPrivate(path: string, mode: number): void {
  let fd: number;
  try {
    fd = openSync(path, "wx", mode);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "EEXIST") return; // exists: keep its mode
    throw e;
  }
  try {
    fchmodSync(fd, mode); // the umask may have removed bits the operator asked for
  } finally {
    closeSync(fd);
  }
}

/**
 * Opens and migrates a file. Switching a fresh file to WAL and creating the schema can meet
 * SQLITE_BUSY without SQLite's busy handler being consulted (lock upgrades that would deadlock
 * fail at once), so when several processes open one new file together we retry, within the
 * busy timeout, instead of surfacing the race to a producer.
 */
export function openMigrated(path: string, options: OpenOptions): Database {
  const { busyTimeoutMs, namespace } = options;
  const deadline = Date.now() + busyTimeoutMs;
  for (let delay = 1; ; delay = Math.min(delay * 2, 50)) {
    let db: Database | undefined;
    try {
      db = openWritable(path, options);
      migrate(db, path);
      return db;
    } catch (e) {
      db?.close(false);
      const code = ((e as { cause?: { code?: string } }).cause ?? (e as { code?: string }))?.code ?? "";
      if (!/^SQLITE_(BUSY|LOCKED)/.test(code) || Date.now() >= deadline)
        throw storageError(e, "cannot open outbox", path, namespace);
      Bun.sleepSync(delay);
    }
  }
}

const waitCell = new Int32Array(new SharedArrayBuffer(4));
/** The first wait after SQLITE_BUSY and the longest (ms): short, so that waiters take turns. */
const BUSY_WAIT_FIRST_MS = 0.05;
const BUSY_WAIT_CAP_MS = 1;

/**
 * Handles the failure of a first `attempt`: rethrows it unless it is SQLITE_BUSY, else runs
 * `attempt` again after waits of 50 µs doubling to 1 ms, jittered, until `timeoutMs` has passed
 * (then the last SQLITE_BUSY is thrown). The queue files' connections leave SQLite's own busy
 * handler off once open (see QueueDb): it sleeps 1, 2, 5 … 25, then 50 and 100 ms between tries
 * and keeps no queue, so a waiter that slept long kept losing the lock to those that had just
 * tried: with producer processes writing flat out into one file, pushes waited many times longer
 * and the drain fell behind; with these waits it keeps pace (bench:contention, docs/benchmarks.md).
 */
export function retryBusy<T>(first: unknown, attempt: () => T, timeoutMs: number): T {
  if (!isBusy(first)) throw first;
  const deadline = performance.now() + timeoutMs;
  for (let waitMs = BUSY_WAIT_FIRST_MS; ; waitMs = Math.min(waitMs * 2, BUSY_WAIT_CAP_MS)) {
    if (performance.now() >= deadline) throw first;
    Atomics.wait(waitCell, 0, 0, waitMs / 2 + Math.random() * waitMs); // a synchronous sleep below a millisecond
    try {
      return attempt();
    } catch (error) {
      if (!isBusy(error)) throw error;
      first = error;
    }
  }
}

function isBusy(error: unknown): boolean {
  return ((error as { code?: unknown })?.code ?? "").toString().startsWith("SQLITE_BUSY");
}

/**
 * How long a read-only handle waits for a writer's brief exclusive moments (WAL recovery, a closing writer's
 * checkpoint).
 */
const READ_BUSY_TIMEOUT_MS = 5_000;
/** A quiet file that changes under every read this many times in a row is reported, not retried forever. */
const READ_ATTEMPTS = 20;

/**
 * Runs `read` on a strictly read-only handle of an existing file and returns what it read from ONE
 * consistent state of the file. Never creates a file: not the database, and not the -wal/-shm
 * side files. When no -wal file exists nobody has the file open in WAL mode, so it is opened
 * `immutable` (SQLite would otherwise create -wal/-shm even for a read-only handle) — without
 * locks, so a writer that appears meanwhile and checkpoints into the file (its close does) could
 * make that read torn. Afterwards a -wal that now exists, or a changed file, means exactly that:
 * the result (or error) is discarded and the file read again. Otherwise a plain read-only handle
 * uses the writer's existing -wal/-shm under SQLite's normal locking, waiting out a writer's
 * brief exclusive moments.
 */
export function readSnapshot<T>(path: string, read: (db: Database) => T): T {
  for (let attempt = 1; ; attempt++) {
    const before = fileStamp(path);
    const { db, immutable } = openReadOnly(path);
    let result: { value: T } | { error: unknown };
    try {
      // One read transaction: every query of `read` sees the same snapshot (counter and rows agree).
      db.run("BEGIN");
      result = { value: read(db) };
    } catch (error) {
      result = { error };
    } finally {
      if (db.inTransaction) db.run("ROLLBACK");
      db.close();
    }
    if (!immutable || (!existsSync(`${path}-wal`) && fileStamp(path) === before)) {
      if ("error" in result) throw result.error;
      return result.value;
    }
    if (attempt >= READ_ATTEMPTS)
      throw new StorageError(`cannot read outbox file: ${path}: it kept changing while being read`, path);
  }
}

function fileStamp(path: string): string {
  try {
    const st = statSync(path, { bigint: true });
    return `${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
  } catch (e) {
    if ((e as { code?: string }).code === "ENOENT") throw new StorageError(`outbox file does not exist: ${path}`, path);
    throw storageError(e, "cannot read outbox file", path);
  }
}

function openReadOnly(path: string): { db: Database; immutable: boolean } {
  const immutable = !existsSync(`${path}-wal`);
  try {
    const db = immutable
      ? new Database(`file:${uriPath(path)}?immutable=1`, constants.SQLITE_OPEN_READONLY | constants.SQLITE_OPEN_URI)
      : new Database(path, { readonly: true });
    try {
      if (!immutable) db.run(`PRAGMA busy_timeout = ${READ_BUSY_TIMEOUT_MS}`);
      db.query("SELECT count(*) FROM sqlite_schema").get();
    } catch (e) {
      db.close();
      throw e;
    }
    return { db, immutable };
  } catch (e) {
    throw storageError(e, "cannot read outbox file", path);
  }
}

function uriPath(path: string): string {
  return path.split("/").map(encodeURIComponent).join("/");
}

/** Wraps an SQLite (or fs) failure in a StorageError naming the file, namespace and SQLite code. */
export function storageError(e: unknown, what: string, file: string, namespace?: string): OutboxError {
  if (e instanceof OutboxError) return e;
  const err = e as { message?: string; code?: string };
  const code = err.code ? ` [${err.code}]` : "";
  const ns = namespace !== undefined ? ` namespace "${namespace}" in` : "";
  return new StorageError(`${what}:${ns} ${file}: ${err.message ?? String(e)}${code}`, file, namespace, { cause: e });
}
