import type { DrainQueue } from "../../outbox/drain-queue.ts";
import type { OutboxRow } from "../../outbox/outbox.ts";
import { LaneMap } from "./lane-map.ts";
import { type HeldHead, type Lane, lanesOf, type Plan } from "./planner.ts";
import { endOfGroup } from "./row-groups.ts";
import type { HeldLaneView } from "../views.ts";

/** What a table with lanes knows once a slice is applied whole (see TableLanes.moveOn). */
export interface LanesAfter {
  cursor: number | null;
  frontier: number | null;
  /** The last row read: with no frontier, every row up to it is applied once the slice is. */
  lastRead: number | null;
  /**
   * The slice is every pending row from its first through its last, nothing before it left pending (no
   * frontier, nothing passed over, nothing left): it may be confirmed as read.
   */
  whole: boolean;
  /** The read's start as the plan knew it (TableLanes.epoch): a restart since makes `cursor` stale. */
  epoch: number;
  /** Each row's slot in the ledger's throughs (see LaneMap), once the slice is opened. */
  slots?: number[];
}

/**
 * One table's lanes as its drain tracks them: per ledger row (the table's own for rows without a
 * key, `name#lane` per lane, by slot: see LaneMap) the ledger's through as this drain last saw or
 * set it — a row is applied when its seq is at or below its lane's —, the lanes held back by a
 * head backing off (until when) and those heads, where the next read starts (rows before it are
 * applied or in a lane held back; null: at the head) and the first row still pending before it
 * (where the local confirmation stops). A table a tenant template serves keeps all this per
 * tenant (each tenant's lanes are its own, in its own database, read on their own); the methods
 * take the tenant (null: the rows without one — every row of any other table). A table of one lane
 * asks only a row's lane (0) and a group's. Its state changes only through these methods, called
 * by the table that owns it (table.ts), which keeps the rest: the cuts, what waits for its
 * confirmation, the read-ahead.
 */
export class TableLanes {
  readonly map: LaneMap;
  /** What is known of each tenant's lanes (a table served by a tenant template); "" for rows without a tenant. */
  readonly #tenants = new Map<string, TenantLanes>();
  /** The lanes of the rows without a tenant: every row of a table no tenant template serves. */
  readonly #own = new TenantLanes();

  constructor(
    table: string,
    readonly count: number,
    /** The table is served by a tenant template: each row's tenant is its own set of lanes, in its own database. */
    readonly tenanted = false,
  ) {
    this.map = new LaneMap(table, count);
    // Rows without a tenant are never delivered by a tenant template (a fault): they are at 0, settled.
    if (tenanted) this.#own.throughs = new Array<number>(count + 1).fill(0);
  }

  /** The lanes of `tenant`'s rows (null: rows without one). */
  #of(tenant: string | null): TenantLanes {
    if (tenant === null || !this.tenanted) return this.#own;
    let lanes = this.#tenants.get(tenant);
    if (lanes === undefined) this.#tenants.set(tenant, (lanes = new TenantLanes()));
    return lanes;
  }

  /** Every tenant's lanes known, the rows without a tenant's first. */
  #all(): TenantLanes[] {
    return [this.#own, ...this.#tenants.values()];
  }

  /**
   * A key's lane depends on the lane count: rows sent under one count must not be delivered under
   * another — their ledger rows would not account for them, so rows a lane delivered ahead of a
   * held one, or a batch of unknown outcome, would land twice. Returns why `queue` must wait while
   * such rows are pending (at or below the sent mark), or null; a queue whose pending rows were
   * never sent takes this count (recorded in the file).
   */
  countProblem(queue: DrainQueue, table: string): string | null {
    const recorded = queue.laneCount() ?? 1;
    if (recorded === this.count) return null;
    const head = queue.head();
    if (head === null || head.seq > queue.sentMark()) {
      queue.recordLaneCount(this.count);
      return null;
    }
    return `lanes of "${table}" changed from ${recorded} to ${this.count} while ${queue.pendingCount()} rows delivered with ${recorded} are pending: set lanes = ${recorded} again until the table is empty (sqloutbox status shows its depth), then change it and restart`;
  }

  /** A row's lane (0 with one lane; null: a row without a key, a barrier over every lane). */
  of(row: Pick<OutboxRow, "laneKey">): Lane {
    return this.map.of(row);
  }

  /**
   * Where the next read (of `tenant`'s rows) starts — rows before it are applied or in a lane held back;
   * null: at the head.
   */
  cursor(tenant: string | null = null): number | null {
    return this.#of(tenant).cursor;
  }

  /** The first row still pending before the cursor, if any: the local confirmation stops before it. */
  frontier(tenant: string | null = null): number | null {
    return this.#of(tenant).frontier;
  }

  /**
   * How often the reads (of `tenant`'s rows) were sent back to the head: an answer to a slice planned before
   * must not move the cursor.
   */
  epoch(tenant: string | null = null): number {
    return this.#of(tenant).epoch;
  }

  /** The lanes of `tenant`'s rows held back by a head backing off, until when (epoch ms). */
  blocked(tenant: string | null = null): ReadonlyMap<Lane, number> {
    return this.#of(tenant).blocked;
  }

  /** Whether the ledger says the remote applied `row` (its lane's through is at or above it). */
  isApplied(row: OutboxRow): boolean {
    const { throughs, throughsMax } = this.#of(row.tenant);
    // Rows above every lane's through (the rows read after the cursor, mostly) need no lane looked up.
    return throughs !== null && row.seq <= throughsMax && row.seq <= throughs[this.map.slotOf(row)]!;
  }

  /** Whether `tenant`'s ledger rows were read (its rows may be planned). */
  settled(tenant: string | null = null): boolean {
    return this.#of(tenant).throughs !== null;
  }

  /** The through this drain knows for `slot` (0 before settlement, or for a lane without a ledger row). */
  throughAt(slot: number, tenant: string | null = null): number {
    return this.#of(tenant).throughs?.[slot] ?? 0;
  }

  /**
   * Settlement read the ledger's rows of `tenant` (`byRow`, a row it lacks at 0): the next read
   * starts at the head, no lane held back.
   */
  settle(byRow: ReadonlyMap<string, number>, tenant: string | null = null): void {
    const lanes = this.#of(tenant);
    lanes.throughs = this.map.throughsOf(byRow);
    lanes.throughsMax = lanes.throughs.reduce((a, b) => Math.max(a, b), 0);
    lanes.fromHead();
    lanes.frontier = null;
    lanes.blocked.clear();
  }

  /**
   * `tenant`'s database was closed: what the reads knew of its lanes goes (its next read starts at
   * its head), but its throughs stay while rows they say are applied wait for their confirmation
   * (see prune). Keeps the memory of a template's tables bounded by the tenants open and the
   * backlog, not every tenant ever seen.
   */
  forget(tenant: string): void {
    const lanes = this.#tenants.get(tenant);
    if (lanes === undefined) return;
    lanes.closed = true;
    lanes.lift();
    lanes.fromHead();
    lanes.frontier = lanes.heldUntil = null;
  }

  /**
   * Drops the closed tenants whose applied rows are all confirmed (at or below `confirmed`): they are settled
   * again when next met.
   */
  prune(confirmed: number): void {
    for (const [tenant, lanes] of this.#tenants)
      if (lanes.closed && lanes.throughsMax <= confirmed) this.#tenants.delete(tenant);
  }

  /** Forgets the ledger view (of `tenant` only, when given): the next batch settles first. */
  unsettle(tenant?: string): void {
    if (tenant !== undefined) this.#of(tenant).throughs = null;
    else for (const l of this.tenanted ? this.#tenants.values() : [this.#own]) l.throughs = null;
  }

  /**
   * The next read (of `tenant`'s rows; undefined: of every tenant's) starts at the head (an answer that was
   * not a slice applied whole, `kick`).
   */
  restart(tenant?: string | null): void {
    if (tenant !== undefined) this.#of(tenant).fromHead();
    else for (const lanes of this.#all()) lanes.fromHead();
  }

  /**
   * When the first hold on a lane of `tenant`'s rows (or on the tenant) ends (epoch ms): they are read again
   * then. Null: none is held. (Another tenant's holds end when a plan of that tenant's rows lifts them: a
   * plan of these rows that woke for them would find nothing to lift, and wake again at once.)
   */
  nextLift(tenant: string | null = null): number | null {
    const lanes = this.#of(tenant);
    let next = lanes.heldUntil;
    for (const until of lanes.blocked.values()) next = Math.min(next ?? until, until);
    return next;
  }

  /** A lane (of `tenant`'s) whose hold ran out is read from the head again (its rows were passed over since). */
  liftHolds(now: number, tenant: string | null = null): void {
    const lanes = this.#of(tenant);
    let ended = lanes.heldUntil !== null && lanes.heldUntil <= now;
    for (const until of lanes.blocked.values()) ended ||= until <= now;
    if (ended) lanes.fromHead();
    if (lanes.cursor !== null) return;
    lanes.lift();
    lanes.frontier = lanes.heldUntil = null;
  }

  /**
   * A plan from the head found these lanes of `tenant` held back, these heads backing off, and these groups
   * that span tables waiting.
   */
  planned(plan: Plan, tenant: string | null = null): void {
    const lanes = this.#of(tenant);
    lanes.blocked = plan.backingOff;
    for (const [lane, head] of plan.heldHeads) lanes.heldHeads.set(lane, head);
    for (const [grp, until] of plan.waiting) if (until !== null) lanes.waits.set(grp, until);
  }

  /**
   * When a group that spans tables, held back here, may go at the earliest (epoch ms), if known (see
   * TenantLanes.waits).
   */
  waitOf(grp: number): number | null {
    for (const lanes of this.#all()) {
      const until = lanes.waits.get(grp);
      if (until !== undefined) return until;
    }
    return null;
  }

  /**
   * The groups `[start, end)` of a draft's `rows` wait for their part in another table (see
   * linkDrafts): with a known end, each holds its lanes until then (holdUntil); without, the next
   * read starts at its first row. Either way the confirmation stops before the first of them.
   */
  holdBack(
    rows: readonly OutboxRow[],
    after: LanesAfter,
    groups: ReadonlyArray<{ start: number; end: number; until: number | null; waitsOn: readonly string[] }>,
  ): void {
    for (const g of groups) {
      const first = rows[g.start]!.seq;
      after.frontier = Math.min(after.frontier ?? first, first);
      if (g.until === null) after.cursor = Math.min(after.cursor ?? first - 1, first - 1);
      else {
        const why = `its group waits for its rows in ${g.waitsOn.map((t) => `"${t}"`).join(", ")}`;
        this.holdUntil(rows.slice(g.start, g.end), g.until, why);
      }
    }
    after.whole = false;
  }

  /**
   * A group of rows `group` (this table's part of a group that spans tables) waits for its part in
   * another table until `until` (epoch ms): its lanes are held until then, as behind a head backing
   * off here — the reads start past them meanwhile, and the lanes are read again from the head
   * once the time comes. `why` is what status shows of the held lanes.
   */
  holdUntil(group: readonly OutboxRow[], until: number, why: string): void {
    const first = group[0]!;
    const { blocked, heldHeads, waits } = this.#of(first.tenant);
    const head: HeldHead = {
      seq: first.seq,
      key: first.laneKey,
      attempts: first.attempts,
      lastError: why,
      retryAt: until,
    };
    for (const lane of lanesOf(group, (r) => this.of(r))) {
      blocked.set(lane, Math.min(blocked.get(lane) ?? until, until));
      if (!heldHeads.has(lane)) heldHeads.set(lane, head);
    }
    if (first.grp !== null) waits.set(first.grp, until);
  }

  /**
   * What is known once a plan's slice (if any) was applied whole: where the next read starts
   * (unless the reads were sent back to the head since it was planned).
   * Returns how far the local confirmation may go: up to the first row still pending, every row
   * before it applied (in that slice, or earlier and passed over).
   */
  moveOn(after: LanesAfter, tenant: string | null = null): number {
    const lanes = this.#of(tenant);
    // Sent back to the head since that plan (a kick, a hold that ended): the reads start there still.
    const current = after.epoch === lanes.epoch;
    lanes.cursor = current ? after.cursor : null;
    lanes.frontier = current ? after.frontier : null;
    return after.frontier !== null ? after.frontier - 1 : (after.lastRead ?? 0);
  }

  /**
   * A slice of `rows` (their slots, when known) applied whole: each ledger row it moved is at its
   * last row now. `tableThrough`: the table's own row, as known before settlement of the lanes.
   * Returns the table's own through.
   */
  applied(rows: readonly OutboxRow[], slots: readonly number[] | undefined, tableThrough: number | null): number {
    const lanes = this.#of(rows[0]!.tenant); // a slice holds one tenant's rows
    const known = lanes.throughs ?? [...new Array<number>(this.count).fill(0), tableThrough ?? 0];
    const throughs = this.map.throughsAfter(known, rows, slots);
    lanes.throughs = throughs;
    lanes.throughsMax = Math.max(lanes.throughsMax, throughs[this.count]!, rows[rows.length - 1]!.seq);
    return throughs[this.count]!;
  }

  /**
   * The ledger rows this drain knows to exist (a through above 0, as last seen or set), with their throughs
   * (not a tenant template's).
   */
  ledgerThroughs(): Array<{ ledgerRow: string; through: number }> {
    const throughs = this.#own.throughs ?? [];
    const out: Array<{ ledgerRow: string; through: number }> = [];
    for (let slot = 0; slot < throughs.length; slot++)
      if (throughs[slot]! > 0) out.push({ ledgerRow: this.map.ledgerRow(slot), through: throughs[slot]! });
    return out;
  }

  /**
   * The ledger rows a slice of `rows` moves, each from the through this drain knows (or, behind a
   * slice in flight, the through by slot that one leaves: `behind`) to the slice's last row of it;
   * with `slots`, each row's slot is written into it.
   */
  moves(
    rows: readonly OutboxRow[],
    behind: readonly number[] | undefined,
    slots: number[],
  ): Array<{ ledgerRow: string; through: number; last: number }> {
    const { map } = this;
    const tenant = rows[0]!.tenant; // a slice holds one tenant's rows
    for (const row of rows) slots.push(map.slotOf(row));
    const lastOf = new Array<number>(this.count + 1).fill(0);
    for (let i = 0; i < slots.length; i++) lastOf[slots[i]!] = rows[i]!.seq;
    const moves: Array<{ ledgerRow: string; through: number; last: number }> = [];
    for (let slot = 0; slot <= this.count; slot++)
      if (lastOf[slot]! > 0)
        moves.push({
          ledgerRow: map.ledgerRow(slot),
          through: behind?.[slot] ?? this.throughAt(slot, tenant),
          last: lastOf[slot]!,
        });
    return moves;
  }

  /**
   * Settled, and nothing holds a lane back (no backoff, no held head): never for a tenant template (nothing
   * goes behind a slice in flight).
   */
  get free(): boolean {
    const own = this.#own;
    return !this.tenanted && own.throughs !== null && own.blocked.size === 0 && own.heldHeads.size === 0;
  }

  /**
   * The throughs by slot, every slot, the ledger is at once `ahead` (its rows and slots) is applied
   * — where it moves each lane it has rows of, where the ledger is for the others: what the fence of
   * a slice of `rows` behind it expects. Null when one of its lanes has no ledger row an answer
   * showed committed (a fence that finds no row inserts it, and would commit ahead of `ahead`).
   */
  throughsBehind(
    ahead: readonly OutboxRow[],
    aheadSlots: readonly number[] | undefined,
    rows: readonly OutboxRow[],
  ): number[] | null {
    const known = this.#own.throughs!;
    for (const row of rows) if (!(known[this.map.slotOf(row)]! > 0)) return null;
    return this.map.throughsAfter(known, ahead, aheadSlots);
  }

  /**
   * Whether the ledger, as this drain knows it, is at `behind` in every slot, not only the ones a
   * slice behind another moves: a slice of other lanes than the one ahead commits whether or not
   * that one did, and confirming it by its bound would confirm the rows of the one ahead with it.
   */
  asExpected(behind: readonly number[]): boolean {
    const known = this.#own.throughs;
    if (known === null || known.length !== behind.length) return false;
    for (let slot = 0; slot < known.length; slot++) if (known[slot] !== behind[slot]) return false;
    return true;
  }

  /** The lanes of the group that starts at `rows[start]` (null among them: a row without a key). */
  ofGroup(rows: readonly OutboxRow[], start: number): Lane[] {
    return lanesOf(rows.slice(start, endOfGroup(rows, start)), (r) => this.of(r));
  }

  /**
   * Whether the group that starts at `rows[start]` is the first of each of its lanes in `rows` (a barrier
   * only when it is the first).
   */
  leads(rows: readonly OutboxRow[]): (start: number) => boolean {
    return (start) => {
      const lanes = new Set(this.ofGroup(rows, start));
      if (lanes.has(null)) return start === 0;
      for (let i = 0; i < start; i++) {
        const lane = this.of(rows[i]!);
        if (lane === null || lanes.has(lane)) return false;
      }
      return true;
    };
  }

  /**
   * The lanes held by their head backing off at `now`, lowest lane first (every lane, for a row without a
   * key: null).
   */
  heldView(now: number): HeldLaneView[] {
    return [...this.#own.heldHeads]
      .filter(([, head]) => head.retryAt > now)
      .sort(([a], [b]) => (a ?? -1) - (b ?? -1))
      .map(([lane, head]) => ({
        lane,
        seq: head.seq,
        key: head.key,
        attempts: head.attempts,
        lastError: head.lastError,
        nextAttemptAt: new Date(head.retryAt).toISOString(),
      }));
  }
}

/** What the drain knows of one tenant's lanes of a table (or of the rows without a tenant). */
class TenantLanes {
  /** By slot, the ledger's throughs; null: not settled. */
  throughs: number[] | null = null;
  /** The highest of `throughs`: rows above it need no lane looked up. */
  throughsMax = 0;
  blocked = new Map<Lane, number>();
  /** The heads backing off that hold their lanes (as the last plan from the head found them, and charges since). */
  heldHeads = new Map<Lane, HeldHead>();
  /**
   * Groups that span tables held back in a lane held until a known time (a backoff here), by group:
   * until when. The next reads start past them, so the plans do not see them again; the other
   * tables they span are told from here that they wait (see linked-groups.ts).
   */
  waits = new Map<number, number>();

  /** Where the next read starts (rows before it are applied or in a lane held back); null: at the head. */
  cursor: number | null = null;
  /** The first row still pending before the cursor, if any: the local confirmation stops before it. */
  frontier: number | null = null;
  /** How often the reads were sent back to the head (see LanesAfter.epoch). */
  epoch = 0;
  /** A tenant's: its database is held until then (epoch ms); its rows are read again then. */
  heldUntil: number | null = null;
  /** A tenant's: its database was closed; only its throughs are kept (see TableLanes.forget). */
  closed = false;

  /** The reads start at the head again: every hold is found anew. */
  lift(): void {
    this.blocked = new Map();
    this.heldHeads = new Map();
    this.waits = new Map();
  }

  /** The next read starts at the head; a plan made before no longer says where. */
  fromHead(): void {
    this.cursor = null;
    this.epoch += 1;
  }
}
