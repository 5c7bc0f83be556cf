// A queue in memory with the drain's interface (DrainQueue), for driving a DrainTable without
// SQLite: it keeps pending rows, the delivered and dead-lettered seqs, attempts and failures, and
// counts what the table asked of it.
import type { DeadLettered } from "../../src/outbox/dead-log.ts";
import type { DeliveryRead, DrainQueue } from "../../src/outbox/drain-queue.ts";
import type { NamespaceHealth } from "../../src/outbox/health.ts";
import type { QueueDb } from "../../src/outbox/queue-db.ts";
import type { DeadReason, OutboxRow, Resequenced } from "../../src/outbox/outbox.ts";

/** A pending row as a queue reads it: seq, its group (null: alone), and what else a test sets (attempts, a backoff, …). */
export function pendingRow(seq: number, grp: number | null = null, extra: Partial<OutboxRow> = {}): OutboxRow {
  return {
    seq,
    namespace: "t",
    source: "",
    tag: `INSERT INTO t (id) VALUES (${seq})`,
    payload: "[]",
    prevSeq: seq - 1 || null,
    createdAt: "2026-12-01T00:00:00.000Z",
    attempts: 0,
    grp,
    traceparent: null,
    tracestate: null,
    laneKey: null,
    tenant: null,
    lastError: null,
    lastErrorClass: null,
    lastAttemptAt: null,
    nextAttemptAt: null,
    sentThrough: null,
    ...extra,
  };
}

export class FakeQueue implements DrainQueue {
  readonly path = "/fake/queue.db";
  readonly origin = "00000000-0000-7000-8000-000000000000";
  closed = false;
  /** Pending rows, seq order. */
  readonly rows: OutboxRow[] = [];
  readonly confirmed: number[] = [];
  readonly dead: Array<{
    seq: number;
    reason: string;
    error: string | null;
    /** In doubt (see LetterRemote), until settled as `remote`. */
    inDoubt: boolean;
    remote?: "applied" | "not applied";
  }> = [];
  /** Every confirmThrough bound asked for, in order. */
  readonly confirms: number[] = [];
  #sent = 0;
  #nextSeq = 1;

  constructor(readonly namespace = "t") {}

  /** Appends rows (a group when `grp` is true), as a producer would. */
  push(count: number, { grouped = false } = {}): number[] {
    const seqs: number[] = [];
    const grp = grouped ? this.#nextSeq : null;
    for (let i = 0; i < count; i++) {
      const seq = this.#nextSeq++;
      seqs.push(seq);
      this.rows.push(pendingRow(seq, grp, { namespace: this.namespace }));
    }
    return seqs;
  }

  #row(seq: number): OutboxRow {
    const row = this.rows.find((r) => r.seq === seq);
    if (!row) throw new Error(`fake queue: seq ${seq} is not pending`);
    return row;
  }

  readForDelivery(
    limit: number,
    _maxBytes: number,
    ready: (head: OutboxRow, pending: number) => boolean,
    after: number | null = null,
    skip: ((row: OutboxRow) => boolean) | null = null,
  ): DeliveryRead {
    const passed = this.rows.filter((r) => r.seq > (after ?? 0) && skip?.(r));
    const pending = this.rows.filter((r) => r.seq > (after ?? 0) && !skip?.(r));
    const head = pending[0] ? { ...pending[0] } : null;
    const read: DeliveryRead = {
      head,
      pending: pending.length,
      rows: [],
      gap: null,
      truncated: false,
      spans: new Map(),
      passedOver: passed.at(-1)?.seq ?? null,
    };
    if (!head || !ready(head, pending.length)) return read;
    let rows = pending.slice(0, limit).map((r) => ({ ...r }));
    if (rows.length < pending.length) {
      read.truncated = true;
      const cut = pending[rows.length]!;
      if (cut.grp !== null) rows = rows.filter((r) => r.grp !== cut.grp); // whole groups only
    }
    read.rows = rows;
    return read;
  }

  readTenantForDelivery(): DeliveryRead {
    throw new Error("fake queue: no tenants (a tenant template is tested over real files)");
  }

  serveTenants(): void {}

  markApplied(): number {
    throw new Error("fake queue: no tenants (a tenant template is tested over real files)");
  }

  markedThrough(): number {
    return 0;
  }

  tenantsWithRows(): { tenants: string[]; withoutTenant: boolean } {
    return { tenants: [], withoutTenant: false };
  }

  head(): OutboxRow | null {
    return this.rows[0] ? { ...this.rows[0] } : null;
  }

  headSeq(): number | null {
    return this.rows[0]?.seq ?? null;
  }

  holdsGroup(grp: number): boolean {
    return this.rows.some((r) => r.grp === grp);
  }

  pendingCount(): number {
    return this.rows.length;
  }

  hasHistory(): boolean {
    return this.confirmed.length > 0 || this.dead.length > 0;
  }

  health(): NamespaceHealth {
    throw new Error("fake queue: no health");
  }

  commitCounters(): { version: number; writes: number } {
    return { version: 1, writes: 0 };
  }

  recordAttempt(seq: number, at?: Date, sentThrough: number | null = null): void {
    // The table must pass its own clock: the wall clock here would hide a table that stopped doing so.
    if (at === undefined) throw new Error("fake queue: recordAttempt without the table's clock");
    const row = this.#row(seq);
    row.attempts += 1;
    row.lastAttemptAt = at.toISOString();
    if (sentThrough !== null) this.#sent = Math.max(this.#sent, sentThrough);
  }

  refundAttempt(seq: number): void {
    const row = this.#row(seq);
    row.attempts = Math.max(0, row.attempts - 1);
  }

  recordFailure(seq: number, error: string, errorClass: string, nextAttemptAt: Date, attempts = 0): void {
    const row = this.#row(seq);
    Object.assign(row, { lastError: error, lastErrorClass: errorClass, nextAttemptAt: nextAttemptAt.toISOString() });
    row.attempts = Math.max(row.attempts, attempts);
  }

  deadLetter(
    seq: number,
    reason: DeadReason,
    error: string | null = null,
    _errorClass: string | null = null,
    inDoubt?: boolean,
  ): DeadLettered {
    const head = this.#row(seq);
    const moved = this.rows.filter((r) => r.seq === seq || (head.grp !== null && r.grp === head.grp));
    for (const r of moved) {
      this.rows.splice(this.rows.indexOf(r), 1);
      this.dead.push({ seq: r.seq, reason, error, inDoubt: inDoubt ?? r.seq <= this.#sent });
    }
    return { seqs: moved.map((r) => r.seq), others: [] };
  }

  lettersInDoubt(
    after: number,
    through: number,
  ): Array<{ seq: number; laneKey: string | null; tenant: string | null }> {
    return this.dead
      .filter((d) => d.inDoubt && d.seq > after && d.seq <= through)
      .map((d) => ({ seq: d.seq, laneKey: null, tenant: null }));
  }

  settleLetters(seqs: readonly number[], remote: "applied" | "not applied"): number {
    let changed = 0;
    for (const d of this.dead)
      if (d.inDoubt && seqs.includes(d.seq)) {
        d.inDoubt = false;
        d.remote = remote;
        changed++;
      }
    return changed;
  }

  sentMark(): number {
    return this.#sent;
  }

  /** Most rows one confirmation takes (a test sets it to see a confirmation go in parts). */
  confirmChunkRows = 2_000;

  confirmThrough(bound: number, maxRows = Number.POSITIVE_INFINITY): number {
    this.confirms.push(bound);
    const gone = this.rows.filter((r) => r.seq <= bound).slice(0, maxRows);
    for (const r of gone) {
      this.rows.splice(this.rows.indexOf(r), 1);
      this.confirmed.push(r.seq);
    }
    return gone.length;
  }

  /** Every slice confirmed from memory, in order. */
  readonly slices: Array<{ first: number; last: number; rows: number }> = [];

  confirmSlice(slice: { first: number; last: number; rows: number; firstPrev: number | null }): boolean {
    const held = this.rows.filter((r) => r.seq >= slice.first && r.seq <= slice.last);
    if (held.length !== slice.rows || this.rows[0]?.seq !== slice.first) return false;
    this.slices.push({ first: slice.first, last: slice.last, rows: slice.rows });
    for (const r of held) {
      this.rows.splice(this.rows.indexOf(r), 1);
      this.confirmed.push(r.seq);
    }
    return true;
  }

  seedSequence(minSeq: number): void {
    this.#nextSeq = Math.max(this.#nextSeq, minSeq + 1);
  }

  resequenceAbove(): Resequenced | null {
    return null;
  }

  pruneSyncLog(): number {
    return 0;
  }

  pruneSyncLogStep(): { removed: number; done: boolean } {
    return { removed: 0, done: true };
  }

  pruneReplayedDead(): number {
    return 0;
  }

  lanes: number | null = null;

  laneCount(): number | null {
    return this.lanes;
  }

  recordLaneCount(lanes: number): void {
    this.lanes = lanes;
  }

  openFile(): QueueDb {
    throw new Error("fake queue: no file");
  }

  close(): void {
    this.closed = true;
  }
}
