import type { Statement } from "bun:sqlite";
import { ForeignTransactionError, QueueFullError } from "../errors.ts";
import { DELIVERED, type DeliveredSql } from "./delivered.ts";
import type { AppendItem, AppendRun, RowInserts } from "./layout.ts";
import type { QueueFile } from "./queue-file.ts";
import { LAYOUTS, markTenantRows } from "./schema.ts";
import { retryBusy, storageError } from "./sqlite-open.ts";
import { isoTimestamp } from "./timestamp.ts";
import { NO_TRACE, type RowTrace } from "../trace-context.ts";

// The namespace tail is the last seq the namespace ever allocated, wherever that row is now:
// pending (synced=0, or a reference leftover synced=1), delivered or dead-lettered. Linking a new
// row to a delivered predecessor keeps the chain verifiable across deliveries. coalesce()
// short-circuits, so the common case (pending rows exist) is one index descent.
const tailSql = (delivered: DeliveredSql) => `SELECT coalesce(
  (SELECT max(seq) FROM outbox_queue WHERE namespace = ?1 AND synced = 0),
  nullif(max(
    ifnull((SELECT max(seq) FROM outbox_queue WHERE namespace = ?1 AND synced = 1), -1),
    ifnull(${delivered.maxOfNamespace}, -1),
    ifnull((SELECT max(seq) FROM outbox_dead_log WHERE namespace = ?1), -1)), -1)) AS tail`;

const COLUMNS = [
  "created_at",
  "namespace",
  "source",
  "tag",
  "payload",
  "prev_seq",
  "traceparent",
  "tracestate",
  "lane_key",
  "tenant",
];

/**
 * What a row carries besides its statement: the producer's trace context and, when it was given
 * them, its key (see lane-key.ts: its text, checked) and its tenant (see tenant.ts: checked).
 */
export type RowContext = RowTrace & { key?: string | null; tenant?: string | null };

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
  /** One autocommit statement: the row, its tail read and its seq allocated in it. */
  readonly #insertAtTail: Statement;
  /** The layout's row INSERT inside a write transaction (see RowInserts). */
  readonly #rows: RowInserts;
  /**
   * The one item of a push inside a transaction, refilled each time (a push in a transaction allocates no
   * array for it).
   */
  readonly #oneItem: AppendItem[] = [{ tag: "", payload: "" }];
  /** The run it fills, one per appender, so that a row costs no allocation. */
  readonly #run: AppendRun = {
    namespace: "",
    createdAt: "",
    source: "",
    traceparent: null,
    tracestate: null,
    laneKey: null,
    tenant: null,
    grp: null,
    grouped: false,
    seq: 0,
    ord: 0,
  };

  constructor(file: QueueFile, maxPending: number | null, limits: GroupLimits = DEFAULT_GROUP_LIMITS) {
    this.#file = file;
    this.#maxPending = maxPending;
    this.#limits = limits;
    const layout = LAYOUTS[file.layout];
    const tail = tailSql(DELIVERED[file.layout]);
    this.#tail = file.prepare(tail);
    this.#insertAtTail = file.prepare(
      layout.insertSql(COLUMNS, ["?2", "?1", "?3", "?4", "?5", `(${tail})`, "?6", "?7", "?8", "?9"]),
    );
    this.#rows = layout.rowInserts(file);
    this.#run.namespace = file.namespace;
  }

  /** The namespace tail (see tailSql), or null for a namespace that never held a row. Inside a transaction. */
  tail(): number | null {
    return this.#tail.get(this.#file.namespace)!.tail;
  }

  /**
   * Appends one event at the tail and returns its seq: one write transaction (see Outbox.enqueue),
   * or one more row of the local transaction open on the file.
   */
  one(tag: string, payload: string, source: string, trace: RowContext = NO_TRACE): number {
    const file = this.#file;
    if (trace.tenant != null) this.#markTenantRows();
    if (file.queueDb.group !== null) {
      // One INSERT is atomic by itself: no savepoint needed, and the group's counters move only after it.
      const item = this.#oneItem[0]!;
      item.tag = tag;
      item.payload = payload;
      try {
        return this.appendToGroup(this.#oneItem, source, trace)[0]!;
      } catch (e) {
        throw storageError(e, "cannot enqueue", file.path, file.namespace);
      } finally {
        item.tag = item.payload = ""; // holds no event's text past its push
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
  many(items: readonly AppendItem[], source: string, trace: RowContext = NO_TRACE, grouped = true): number[] {
    const file = this.#file;
    if (trace.tenant != null) this.#markTenantRows();
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
  appendToGroup(items: readonly AppendItem[], source: string, trace: RowContext = NO_TRACE): number[] {
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
      ord: this.#rows.nextOrd(namespace),
      pending: this.#maxPending === null ? 0 : file.pendingCount(),
    };
    this.#checkCapacity(state.pending, items.length);
    const run = this.#start(group.createdAt, source, trace, group.id, true);
    run.seq = group.nextSeq ?? this.#rows.nextSeq();
    run.ord = state.ord;
    const seqs = this.#rows.insert(run, items, state.tail);
    const prev = seqs.at(-1) ?? state.tail;
    group.nextSeq = run.seq;
    // Moved only now that every row is written (a failed insert leaves the group as it was).
    state.tail = prev;
    state.ord = run.ord;
    state.pending += items.length;
    if (known === undefined) group.namespaces.set(namespace, state);
    group.touched.add(namespace);
    group.id = run.grp;
    group.rows += items.length;
    group.bytes += chars;
    if (prev !== null) group.last = prev;
    return seqs;
  }

  /** Appends rows that are not a group (each delivered on its own), inside the caller's write transaction. */
  #appendAlone(items: readonly AppendItem[], source: string, trace: RowContext): number[] {
    this.#checkCapacity(this.#maxPending === null ? 0 : this.#file.pendingCount(), items.length);
    const run = this.#start(isoTimestamp(), source, trace, null, false); // one transaction, one creation time
    run.seq = this.#rows.nextSeq();
    run.ord = this.#rows.nextOrd(run.namespace);
    return this.#rows.insert(run, items, this.tail());
  }

  /** The appender's run, set up for rows created at `createdAt` (its place is the caller's to set). */
  #start(createdAt: string, source: string, trace: RowContext, grp: number | null, grouped: boolean): AppendRun {
    const run = this.#run;
    run.createdAt = createdAt;
    run.source = source;
    run.traceparent = trace.traceparent;
    run.tracestate = trace.tracestate;
    run.laneKey = trace.key ?? null;
    run.tenant = trace.tenant ?? null;
    run.grp = grp;
    run.grouped = grouped;
    return run;
  }

  #appendAtTail(tag: string, payload: string, source: string, trace: RowContext): number {
    return Number(
      this.#insertAtTail.run(
        this.#file.namespace,
        isoTimestamp(),
        source,
        tag,
        payload,
        trace.traceparent,
        trace.tracestate,
        trace.key ?? null,
        trace.tenant ?? null,
      ).lastInsertRowid,
    );
  }

  /** The file says it holds rows for a tenant (see TENANT_FORMAT), once per open file, before the first is written. */
  #markTenantRows(): void {
    const qdb = this.#file.queueDb;
    if (qdb.tenantRowsMarked) return;
    const mark = () => markTenantRows(qdb.db);
    if (qdb.db.inTransaction) mark();
    else this.#file.write("cannot mark the file as holding tenants' rows", mark);
    qdb.tenantRowsMarked = true;
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
