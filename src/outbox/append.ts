import type { Statement } from "bun:sqlite";
import { QueueFullError } from "../errors.ts";
import type { QueueFile } from "./queue-file.ts";
import { NEXT_SLOT_SQL, queueInsertSql } from "./schema.ts";
import { retryBusy, storageError } from "./sqlite-open.ts";
import { isoTimestamp } from "./timestamp.ts";

// The namespace tail is the last seq the namespace ever allocated, wherever that row is now:
// pending (synced=0, or a reference leftover synced=1), delivered (sync log) or dead-lettered.
// Linking a new row to a delivered predecessor keeps the chain verifiable across deliveries.
// coalesce() short-circuits, so the common case (pending rows exist) is one index descent.
const TAIL_SQL = `SELECT coalesce(
  (SELECT max(seq) FROM outbox_queue WHERE namespace = ?1 AND synced = 0),
  nullif(max(
    ifnull((SELECT max(seq) FROM outbox_queue WHERE namespace = ?1 AND synced = 1), -1),
    ifnull((SELECT max(seq) FROM outbox_sync_log WHERE namespace = ?1), -1),
    ifnull((SELECT max(seq) FROM outbox_dead_log WHERE namespace = ?1), -1)), -1)) AS tail`;

const COLUMNS = ["created_at", "namespace", "source", "tag", "payload", "prev_seq"];

/** Appends one row after another inside a write transaction, each linked to the `prev` given; returns its seq. */
export type Append = (tag: string, payload: string, source: string, prev: number | null) => number;

/**
 * The producer's side of a queue: appending events at the namespace tail, each linked to the one
 * before (`prev_seq`), under the file's write lock so concurrent producer processes never fork a
 * chain. Checks of the items themselves are the caller's (Outbox).
 */
export class Appender {
  readonly #file: QueueFile;
  readonly #maxPending: number | null;
  readonly #tail: Statement<{ tail: number | null }, [string]>;
  readonly #insertAtTail: Statement<unknown, [string, string, string, string, string]>;
  /** Legacy layout only: an insert whose seq AUTOINCREMENT allocates. */
  readonly #insert: Statement | null = null;
  /** Lean layout only: the next free seq and ord, and an insert at a given seq and ord. */
  readonly #nextSlot: Statement<{ seq: number; ord: number }, [string]> | null = null;
  readonly #insertAt: Statement | null = null;

  constructor(file: QueueFile, maxPending: number | null) {
    this.#file = file;
    this.#maxPending = maxPending;
    this.#tail = file.prepare(TAIL_SQL);
    this.#insertAtTail = file.prepare(queueInsertSql(file.layout, COLUMNS, ["?2", "?1", "?3", "?4", "?5", `(${TAIL_SQL})`]));
    if (file.layout === "lean") {
      this.#nextSlot = file.prepare(NEXT_SLOT_SQL);
      this.#insertAt = file.prepare(`INSERT INTO outbox_queue (seq, ord, ${COLUMNS.join(", ")}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`);
    } else {
      this.#insert = file.prepare(queueInsertSql(file.layout, COLUMNS, ["?2", "?1", "?3", "?4", "?5", "?6"]));
    }
  }

  /** The namespace tail (see TAIL_SQL), or null for a namespace that never held a row. Inside a transaction. */
  tail(): number | null {
    return this.#tail.get(this.#file.namespace)!.tail;
  }

  /** Appends one event at the tail and returns its seq: one write transaction (see Outbox.enqueue). */
  one(tag: string, payload: string, source: string): number {
    const file = this.#file;
    if (this.#maxPending !== null) {
      return file.write("cannot enqueue", () => {
        this.#checkCapacity(1);
        return this.#appendAtTail(tag, payload, source);
      });
    }
    // Unbounded: ONE autocommit statement whose VALUES reads the tail. SQLite takes the write lock
    // when the statement starts, before the subquery reads anything, and we wait for it exactly as
    // for BEGIN IMMEDIATE (retryBusy); the BEGIN/tail/COMMIT round trips are saved.
    try {
      return this.#appendAtTail(tag, payload, source);
    } catch (e) {
      try {
        return retryBusy(e, () => this.#appendAtTail(tag, payload, source), file.busyTimeoutMs);
      } catch (e) {
        throw storageError(e, "cannot enqueue", file.path, file.namespace);
      }
    }
  }

  /** Appends events in one transaction: item 0 links to the tail, item i to item i−1's seq. */
  many(items: ReadonlyArray<{ tag: string; payload: string }>, source: string): number[] {
    return this.#file.write("cannot enqueue batch", () => {
      this.#checkCapacity(items.length);
      const seqs: number[] = [];
      const append = this.appender(isoTimestamp()); // one transaction, one creation time
      let prev = this.tail();
      for (const item of items) {
        prev = append(item.tag, item.payload, source, prev);
        seqs.push(prev);
      }
      return seqs;
    });
  }

  /**
   * An Append for rows created at `now`, inside the caller's write transaction. In the lean layout
   * the seq and ord are read once and counted on (nobody else can insert while we hold the write
   * lock): a batch row then costs what a plain INSERT does.
   */
  appender(now: string): Append {
    const namespace = this.#file.namespace;
    const insertAt = this.#insertAt;
    if (insertAt === null) {
      const insert = this.#insert!;
      return (tag, payload, source, prev) => Number(insert.run(namespace, now, source, tag, payload, prev).lastInsertRowid);
    }
    let { seq, ord } = this.#nextSlot!.get(namespace)!;
    return (tag, payload, source, prev) => {
      insertAt.run(seq, ord++, now, namespace, source, tag, payload, prev);
      return seq++;
    };
  }

  #appendAtTail(tag: string, payload: string, source: string): number {
    return Number(this.#insertAtTail.run(this.#file.namespace, isoTimestamp(), source, tag, payload).lastInsertRowid);
  }

  #checkCapacity(adding: number): void {
    if (this.#maxPending === null) return;
    if (this.#file.pendingCount() + adding > this.#maxPending) throw new QueueFullError(this.#file.namespace, this.#maxPending, this.#file.path);
  }
}
