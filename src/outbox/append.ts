import type { Statement } from "bun:sqlite";
import { ForeignTransactionError, QueueFullError } from "../errors.ts";
import { DELIVERED } from "./delivered.ts";
import type { QueueFile } from "./queue-file.ts";
import { NEXT_ORD_SQL, NEXT_SEQ_SQL, queueInsertSql, type QueueLayout } from "./schema.ts";
import { retryBusy, storageError } from "./sqlite-open.ts";
import { isoTimestamp } from "./timestamp.ts";
import { NO_TRACE, type RowTrace } from "../trace-context.ts";

// The namespace tail is the last seq the namespace ever allocated, wherever that row is now:
// pending (synced=0, or a reference leftover synced=1), delivered or dead-lettered. Linking a new
// row to a delivered predecessor keeps the chain verifiable across deliveries. coalesce()
// short-circuits, so the common case (pending rows exist) is one index descent.
const tailSql = (layout: QueueLayout) => `SELECT coalesce(
  (SELECT max(seq) FROM outbox_queue WHERE namespace = ?1 AND synced = 0),
  nullif(max(
    ifnull((SELECT max(seq) FROM outbox_queue WHERE namespace = ?1 AND synced = 1), -1),
    ifnull(${DELIVERED[layout].maxOfNamespace}, -1),
    ifnull((SELECT max(seq) FROM outbox_dead_log WHERE namespace = ?1), -1)), -1)) AS tail`;

const COLUMNS = ["created_at", "namespace", "source", "tag", "payload", "prev_seq", "traceparent", "tracestate"];

export type { RowTrace };

/** What one appended row carries beyond its text: its group and trace context. */
export interface AppendExtra {
  grp: number | null;
  trace: RowTrace;
}

/** Appends one row after another inside a write transaction, each linked to the `prev` given; returns its seq. */
export type Append = (tag: string, payload: string, source: string, prev: number | null, extra?: AppendExtra) => number;

/** How large one group (one local transaction) may grow: rows, and characters of SQL text and payload. */
export interface GroupLimits {
  maxRows: number;
  maxChars: number;
}

/**
 * The default group bounds: 10 000 statements and 16 Mi characters (the drain's default
 * batch_max_bytes) — the drain holds a group in memory whole and sends it in one transaction.
 */
export const DEFAULT_GROUP_LIMITS: GroupLimits = { maxRows: 10_000, maxChars: 16 * 1024 * 1024 };

/** One event to append: its tag (SQL text) and payload (encoded arguments). */
export interface AppendItem {
  tag: string;
  payload: string;
}

/**
 * The producer's side of a queue: appending events at the namespace tail, each linked to the one
 * before (`prev_seq`), under the file's write lock so concurrent producer processes never fork a
 * chain. Rows appended inside a local transaction (QueueDb.begin: a `pushMany`, an
 * `outbox.transaction`) carry its group. Checks of the items themselves are the caller's (Outbox).
 */
export class Appender {
  readonly #file: QueueFile;
  readonly #maxPending: number | null;
  readonly #limits: GroupLimits;
  readonly #tail: Statement<{ tail: number | null }, [string]>;
  readonly #insertAtTail: Statement;
  /** Legacy layout only: an insert whose seq AUTOINCREMENT allocates, and the first row's group set after it. */
  readonly #insert: Statement | null = null;
  readonly #setGroup: Statement | null = null;
  /** Lean layout only: the next free seq and ord, and an insert at a given seq and ord. */
  readonly #nextSeq: Statement<{ seq: number }, []> | null = null;
  readonly #nextOrd: Statement<{ ord: number }, [string]> | null = null;
  readonly #insertAt: Statement | null = null;

  constructor(file: QueueFile, maxPending: number | null, limits: GroupLimits = DEFAULT_GROUP_LIMITS) {
    this.#file = file;
    this.#maxPending = maxPending;
    this.#limits = limits;
    const tail = tailSql(file.layout);
    this.#tail = file.prepare(tail);
    this.#insertAtTail = file.prepare(
      queueInsertSql(file.layout, COLUMNS, ["?2", "?1", "?3", "?4", "?5", `(${tail})`, "?6", "?7"]),
    );
    if (file.layout === "lean") {
      this.#nextSeq = file.prepare(NEXT_SEQ_SQL);
      this.#nextOrd = file.prepare(NEXT_ORD_SQL);
      this.#insertAt = file.prepare(
        `INSERT INTO outbox_queue (seq, ord, grp, ${COLUMNS.join(", ")}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      );
    } else {
      this.#insert = file.prepare(
        queueInsertSql(file.layout, ["grp", ...COLUMNS], ["?9", "?2", "?1", "?3", "?4", "?5", "?6", "?7", "?8"]),
      );
      this.#setGroup = file.prepare("UPDATE outbox_queue SET grp = ?1 WHERE seq = ?1");
    }
  }

  /** The namespace tail (see tailSql), or null for a namespace that never held a row. Inside a transaction. */
  tail(): number | null {
    return this.#tail.get(this.#file.namespace)!.tail;
  }

  /**
   * Appends one event at the tail and returns its seq: one write transaction (see Outbox.enqueue),
   * or one more row of the local transaction open on the file.
   */
  one(tag: string, payload: string, source: string, trace: RowTrace = NO_TRACE): number {
    const file = this.#file;
    if (file.queueDb.group !== null) {
      // One INSERT is atomic by itself: no savepoint needed, and the group's counters move only after it.
      try {
        return this.appendToGroup([{ tag, payload }], source, trace)[0]!;
      } catch (e) {
        throw storageError(e, "cannot enqueue", file.path, file.namespace);
      }
    }
    // The application's own database: a push inside its transaction could not be kept with the rest of it.
    if (file.db.inTransaction) throw new ForeignTransactionError(file.path);
    if (this.#maxPending !== null) {
      return file.write("cannot enqueue", () => {
        this.#checkCapacity(file.pendingCount(), 1);
        return this.#appendAtTail(tag, payload, source, trace);
      });
    }
    // Unbounded: ONE autocommit statement whose VALUES reads the tail. SQLite takes the write lock
    // when the statement starts, before the subquery reads anything, and we wait for it exactly as
    // for BEGIN IMMEDIATE (retryBusy); the BEGIN/tail/COMMIT round trips are saved.
    try {
      return this.#appendAtTail(tag, payload, source, trace);
    } catch (e) {
      try {
        return retryBusy(e, () => this.#appendAtTail(tag, payload, source, trace), file.queueDb.busyTimeoutMs);
      } catch (e) {
        throw storageError(e, "cannot enqueue", file.path, file.namespace);
      }
    }
  }

  /**
   * Appends events as one group: item 0 links to the tail, item i to item i−1's seq. In its own
   * transaction, or — inside the local transaction open on the file — as part of its group, in a
   * savepoint so a failure undoes only these rows. `grouped: false` (outside a transaction): the
   * rows commit together but are delivered each on its own.
   */
  many(items: readonly AppendItem[], source: string, trace: RowTrace = NO_TRACE, grouped = true): number[] {
    const file = this.#file;
    const qdb = file.queueDb;
    if (qdb.group !== null) return file.write("cannot enqueue batch", () => this.appendToGroup(items, source, trace));
    if (!grouped) return file.write("cannot enqueue batch", () => this.#appendAlone(items, source, trace));
    qdb.begin();
    let seqs: number[];
    try {
      seqs = this.appendToGroup(items, source, trace);
    } catch (e) {
      qdb.rollback();
      throw storageError(e, "cannot enqueue batch", file.path, file.namespace);
    }
    qdb.commit();
    return seqs;
  }

  /**
   * Appends `items` to the group of the local transaction open on the file (QueueDb.begin): seqs
   * and ords counted on from one read, the namespace's tail kept from its last append. The group's
   * counters move only once every row is written.
   */
  appendToGroup(items: readonly AppendItem[], source: string, trace: RowTrace = NO_TRACE): number[] {
    const file = this.#file;
    const group = file.queueDb.group;
    if (group === null) throw file.invalid("appendToGroup needs the transaction open on the file");
    const namespace = file.namespace;
    let chars = 0;
    for (const item of items) chars += item.tag.length + item.payload.length;
    this.#checkGroupSize(group.rows + items.length, group.bytes + chars);
    const known = group.namespaces.get(namespace);
    const state = known ?? {
      tail: this.tail(),
      ord: this.#nextOrd?.get(namespace)?.ord ?? 0,
      pending: this.#maxPending === null ? 0 : file.pendingCount(),
    };
    this.#checkCapacity(state.pending, items.length);
    const seqs: number[] = [];
    let { tail: prev, ord } = state;
    let grp = group.id;
    if (this.#insertAt !== null) {
      let seq = group.nextSeq ?? this.#nextSeq!.get()!.seq;
      grp ??= seq;
      for (const item of items) {
        this.#insertAt.run(
          seq,
          ord++,
          grp,
          group.createdAt,
          namespace,
          source,
          item.tag,
          item.payload,
          prev,
          trace.traceparent,
          trace.tracestate,
        );
        seqs.push((prev = seq++));
      }
      group.nextSeq = seq;
    } else {
      for (const item of items) {
        const seq = Number(
          this.#insert!.run(
            namespace,
            group.createdAt,
            source,
            item.tag,
            item.payload,
            prev,
            trace.traceparent,
            trace.tracestate,
            grp,
          ).lastInsertRowid,
        );
        if (grp === null) this.#setGroup!.run((grp = seq));
        seqs.push((prev = seq));
      }
    }
    group.namespaces.set(namespace, { tail: prev, ord, pending: state.pending + items.length });
    group.touched.add(namespace);
    group.id = grp;
    group.rows += items.length;
    group.bytes += chars;
    if (prev !== null) group.last = prev;
    return seqs;
  }

  /** Appends rows that are not a group (each delivered on its own), inside the caller's write transaction. */
  #appendAlone(items: readonly AppendItem[], source: string, trace: RowTrace): number[] {
    this.#checkCapacity(this.#maxPending === null ? 0 : this.#file.pendingCount(), items.length);
    const append = this.appender(isoTimestamp()); // one transaction, one creation time
    const extra = { grp: null, trace };
    const seqs: number[] = [];
    let prev = this.tail();
    for (const item of items) seqs.push((prev = append(item.tag, item.payload, source, prev, extra)));
    return seqs;
  }

  /**
   * An Append for rows created at `now`, inside the caller's write transaction (dead-letter
   * replay, resequencing). In the lean layout the seq and ord are read once and counted on (nobody
   * else can insert while we hold the write lock): a batch row then costs what a plain INSERT does.
   */
  appender(now: string): Append {
    const namespace = this.#file.namespace;
    const insertAt = this.#insertAt;
    if (insertAt === null) {
      const insert = this.#insert!;
      return (tag, payload, source, prev, extra) =>
        Number(
          insert.run(
            namespace,
            now,
            source,
            tag,
            payload,
            prev,
            extra?.trace.traceparent ?? null,
            extra?.trace.tracestate ?? null,
            extra?.grp ?? null,
          ).lastInsertRowid,
        );
    }
    let seq = this.#nextSeq!.get()!.seq;
    let ord = this.#nextOrd!.get(namespace)!.ord;
    return (tag, payload, source, prev, extra) => {
      insertAt.run(
        seq,
        ord++,
        extra?.grp ?? null,
        now,
        namespace,
        source,
        tag,
        payload,
        prev,
        extra?.trace.traceparent ?? null,
        extra?.trace.tracestate ?? null,
      );
      return seq++;
    };
  }

  #appendAtTail(tag: string, payload: string, source: string, trace: RowTrace): number {
    return Number(
      this.#insertAtTail.run(
        this.#file.namespace,
        isoTimestamp(),
        source,
        tag,
        payload,
        trace.traceparent,
        trace.tracestate,
      ).lastInsertRowid,
    );
  }

  #checkCapacity(pending: number, adding: number): void {
    if (this.#maxPending === null) return;
    if (pending + adding > this.#maxPending)
      throw new QueueFullError(this.#file.namespace, this.#maxPending, this.#file.path);
  }

  #checkGroupSize(rows: number, chars: number): void {
    const { maxRows, maxChars } = this.#limits;
    if (rows <= maxRows && chars <= maxChars) return;
    const what =
      rows > maxRows
        ? `${rows} statements, over the limit of ${maxRows}`
        : `${chars} characters of SQL text and arguments, over the limit of ${maxChars}`;
    throw this.#file.invalid(
      `a transaction would hold ${what} (maxGroupStatements / maxGroupBytes): the drain delivers a transaction whole, in one remote transaction, so it must fit in memory; split it into smaller transactions`,
    );
  }
}
