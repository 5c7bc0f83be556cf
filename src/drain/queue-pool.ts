import type { Durability } from "../vocabulary.ts";
import type { DrainQueue } from "../outbox/drain-queue.ts";
import { drainQueueOn } from "../outbox/queue-for-drain.ts";
import { QueueDb } from "../outbox/queue-db.ts";

/**
 * How long one of the drain's write transactions held a queue file's write lock (every producer of the file
 * waits meanwhile).
 */
export interface LockHoldEvent {
  app: string;
  /** The queue file's path. */
  file: string;
  seconds: number;
}

/** How the drain opens a queue file (its own connections: the app's durability and file mode). */
export interface PoolOptions {
  maxPending: number | null;
  durability: Durability;
  fileMode: number;
  /** Told how long each write transaction on the file held its lock, in seconds (the file's first opening decides). */
  onWriteHold?: ((seconds: number) => void) | null;
}

/**
 * The drain's connections to `db_file`s: one per file, shared by every table served from it —
 * across targets, so a transaction's tables are read and confirmed on one connection. A db_file is
 * never created here: its producer creates it (it may be the application's own database).
 */
export class QueuePool {
  readonly #files = new Map<string, QueueDb>();

  /** The queue of `namespace` in `file`, on the file's shared connection (opened on first use). */
  queue(file: string, namespace: string, options: PoolOptions): DrainQueue {
    let queueDb = this.#files.get(file);
    if (queueDb === undefined || queueDb.closed) {
      queueDb = QueueDb.open(file, {
        durability: options.durability,
        busyTimeoutMs: 10_000,
        fileMode: options.fileMode,
        create: false,
        namespace,
        onWriteHold: options.onWriteHold,
      });
      this.#files.set(file, queueDb);
    }
    return drainQueueOn(queueDb, namespace, { maxPending: options.maxPending, durability: options.durability });
  }

  /** Whether `file` is open here already: another table's queue on it takes no descriptor more. */
  isOpen(file: string): boolean {
    return this.#files.get(file)?.closed === false;
  }

  /** Lets go of every file; each closes once its last table closed too. */
  close(): void {
    for (const queueDb of this.#files.values()) queueDb.release();
    this.#files.clear();
  }
}
