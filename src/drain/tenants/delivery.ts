import type { TargetConfig } from "../../config/types.ts";
import type { Dialect } from "../../vocabulary.ts";
import type { TenantWriters, WriteResult } from "../../writers/writer.ts";
import {
  type AnswerParts,
  applyAnswered,
  batchLost,
  type DeliveryHooks,
  observeSent,
  type TargetCycle,
} from "../batch-answer.ts";
import { awaitedBy, BatchPlanner, openLinked, type SentBatch } from "../batch-plan.ts";
import type { DeliveryObserver } from "../observer.ts";
import { minWake } from "../schedule.ts";
import type { DrainTable, SliceDraft } from "../table/table.ts";
import type { TargetParts } from "../target-parts.ts";
import type { TenantsView } from "../views.ts";
import { type TenantRemote, TenantRemotes } from "./remotes.ts";

/** What a tenant template target's delivery works with. */
export interface TenantDeliveryParts extends TargetParts {
  target: TargetConfig;
  dialect: Dialect;
  writers: TenantWriters;
  observer: DeliveryObserver | null;
  hooks: DeliveryHooks;
}

/**
 * The batches of a tenant template target (SPEC §4c): each tenant's rows go to its own database,
 * one batch per tenant, sent side by side. A cycle plans every table once — each table's plan
 * makes a slice per tenant whose rows go, and holds back the tenants whose database is held — then
 * reads the ledger rows of the tenants a plan met for the first time (their rows go next cycle),
 * links each tenant's slices of a transaction across tables, opens them behind the fence of that
 * tenant's ledger and sends every tenant's batch at once. A tenant whose database is down, missing
 * or refusing holds that tenant alone; nothing is charged. Tenants are served in commit order:
 * every tenant whose rows are at the front of a table goes in the same cycle, at most
 * `max_open_tenants` of them.
 */
export class TenantDelivery {
  readonly #parts: TenantDeliveryParts;
  readonly #remotes: TenantRemotes;
  readonly #planner: BatchPlanner;
  /** The tables by name (linking ignores tables another target serves). */
  readonly #served: ReadonlySet<string>;
  /** The last tenant a cycle served (the next cycle goes on after it), null: a new round, from the first. */
  #turn: string | null = null;
  /** What the cycles of this round found: the earliest wake, and whether rows were left to go (see deliver). */
  #round: { wakeAt: number | null; more: boolean } = { wakeAt: null, more: false };
  #lastSuccessAt: number | null = null;
  #lastRoundTripMs: number | null = null;
  #inFlight = 0;
  #pipelining = false;

  constructor(parts: TenantDeliveryParts) {
    this.#parts = parts;
    this.#remotes = new TenantRemotes({
      ...parts,
      closed: (tenant) => {
        for (const table of parts.tables) table.tenants.forget(tenant);
      },
    });
    this.#planner = new BatchPlanner({
      ...parts,
      fence: null,
      changed: (tables) => parts.hooks.changed(tables),
      tenanted: true,
    });
    this.#served = new Set(parts.tables.map((t) => t.name));
  }

  get lastSuccessAt(): number | null {
    return this.#lastSuccessAt;
  }

  get lastRoundTripMs(): number | null {
    return this.#lastRoundTripMs;
  }

  get inFlight(): number {
    return this.#inFlight;
  }

  get pipelining(): boolean {
    return this.#pipelining;
  }

  pipeline(on: boolean): void {
    this.#pipelining = on;
  }

  /** The tenants as status shows them. */
  view(): TenantsView {
    const remotes = this.#remotes;
    const { opened, closed } = remotes.counts;
    return { open: remotes.openCount, maxOpen: remotes.maxOpen, opened, closed, held: remotes.held(this.#parts.now()) };
  }

  /**
   * `tenant`'s database lacks what a statement needs (a table, the ledger): that tenant is held, its ledger
   * set up again after.
   */
  fault(tenant: string, message: string): void {
    this.#remotes.schema(tenant, message, this.#parts.now());
  }

  /** Ends every tenant's hold now (`kick`), or `tenant`'s only. */
  retryNow(tenant?: string): void {
    this.#remotes.retryNow(tenant);
  }

  /** Closes every tenant's database (the drain stops). */
  close(): Promise<void> {
    return this.#remotes.closeAll();
  }

  /**
   * One cycle: the next tenants with rows (see #choose), their ledgers read where this drain has
   * not yet, every table's slice per tenant, and each tenant's batch sent, side by side.
   */
  async deliver(now: number, out: TargetCycle, _only: ReadonlySet<DrainTable> | null): Promise<TargetCycle> {
    if (this.#turn === null) this.#round = { wakeAt: null, more: false };
    const tenants = this.#choose(now, out);
    const roundGoesOn = this.#turn !== null;
    if (tenants.length > 0) await this.#deliverTo(tenants, now, out);
    // A round of the tenants spans cycles: what one cycle found waiting (a hold, a backoff) is woken
    // for at the round's end too, and rows a table left for a tenant (a full batch) go next round at
    // once — neither is forgotten when the next cycles look at other tenants.
    const round = this.#round;
    round.wakeAt = minWake(round.wakeAt, out.wakeAt);
    round.more ||=
      (out.more && out.readOn === true) ||
      // rows went, failed or died: what waited behind them (a cut passed, a lane freed) goes next round
      out.delivered + out.failed + out.deadLettered > 0 ||
      // a fence that failed: the tenant's ledger is read again, and its rows go, at once
      tenants.some((t) => t !== null && !this.#settledEverywhere(t) && this.#remotes.heldUntil(t, now) === null);
    out.wakeAt = round.wakeAt;
    // The round goes on with the next tenants at once, whether this cycle sent anything or not.
    if (roundGoesOn || round.more) out.more = out.readOn = true;
    return out;
  }

  async #deliverTo(tenants: Array<string | null>, now: number, out: TargetCycle): Promise<void> {
    this.#remotes.pin(new Set(tenants.filter((t) => t !== null)));
    try {
      const unsettled = tenants.filter((t): t is string => t !== null && !this.#settledEverywhere(t));
      if (unsettled.length > 0) await this.#settle(unsettled, now);
      // One whose database could not be opened to read its ledger is held now: read again when that ends.
      for (const tenant of unsettled) out.wakeAt = minWake(out.wakeAt, this.#remotes.heldUntil(tenant, now));
      const ready = tenants.filter((t) => t === null || this.#settledEverywhere(t));
      const drafts = this.#plan(now, out, ready);
      const sends: Array<Promise<void>> = [];
      for (const [tenant, tenantDrafts] of Map.groupBy(drafts, (d) => d.rows[0]!.tenant)) {
        // Rows without a tenant are refused at planning (prepare): none has a statement to send.
        const remote = tenant === null ? null : await this.#remotes.use(tenant, now);
        if (remote === null) {
          // Its database could not be opened (it is held now): its rows are read again when the hold ends.
          for (const draft of tenantDrafts) draft.table.tenants.unsent(draft);
          if (tenant !== null) out.wakeAt = minWake(out.wakeAt, this.#remotes.heldUntil(tenant, now));
          continue;
        }
        const batch = this.#open(remote, tenantDrafts, now, out);
        if (batch !== null) sends.push(this.#send(remote, batch, out));
      }
      await Promise.all(sends);
    } finally {
      await this.#remotes.trim();
    }
    // Confirmed as far as the prefix goes; at the end of a round of the tenants, the rows applied
    // behind one still pending are marked so (read and listed no more until the prefix takes them).
    await this.confirmApplied(() => this.#parts.scheduler.sleep(0), this.#turn === null);
  }

  /**
   * The tenants this cycle serves: those with rows in any table, by name, after the last cycle's
   * (round robin: a tenant with a large backlog gets a slice of each table a turn, as every other
   * does), at most `max_open_tenants`, past the held ones (each read again when its hold ends); null
   * among them when a table has rows without a tenant (each a fault of its own). A round ends with
   * the last tenant by name; while tenants are left in it, the next cycle comes at once.
   */
  #choose(now: number, out: TargetCycle): Array<string | null> {
    const { tables } = this.#parts;
    const room = this.#remotes.maxOpen;
    const chosen: Array<string | null> = [];
    let withoutTenant = false;
    let more = false;
    // A table held on a timer lists no tenants: it is looked at again when the hold ends.
    for (const table of tables) out.wakeAt = minWake(out.wakeAt, table.retryAt(now));
    for (let after = this.#turn; !more; ) {
      // A page of tenants per table; names past the end of a full page wait for the next look.
      let until: string | null = null;
      const names = new Set<string>();
      for (const table of tables) {
        const found = table.tenants.withRows(after, room + 1);
        withoutTenant ||= found.withoutTenant;
        for (const t of found.tenants) names.add(t);
        const last = found.tenants.at(-1);
        if (found.tenants.length > room && last !== undefined && (until === null || last < until)) until = last;
      }
      const page = [...names].sort().filter((t) => until === null || t <= until);
      if (page.length === 0) break;
      for (const tenant of page) {
        after = tenant;
        const held = this.#remotes.heldUntil(tenant, now);
        if (held !== null) out.wakeAt = minWake(out.wakeAt, held);
        else if (chosen.length < room) chosen.push(tenant);
        else {
          more = true;
          break;
        }
      }
      if (until === null) break;
    }
    this.#turn = more ? (chosen.at(-1) as string) : null;
    if (withoutTenant) chosen.push(null);
    return chosen;
  }

  /** Whether every open table has read `tenant`'s ledger rows. */
  #settledEverywhere(tenant: string): boolean {
    return this.#parts.tables.every((table) => !table.isOpen || table.tenants.settled(tenant));
  }

  /**
   * Every table's slices of `tenants` (the tables a transaction across them waits on too, ready or not),
   * within one batch's bytes.
   */
  #plan(now: number, out: TargetCycle, tenants: ReadonlyArray<string | null>): SliceDraft[] {
    const { tables, app } = this.#parts;
    const drafts: SliceDraft[] = [];
    const looked = new Set<string>();
    // The cycle's batches share one target batch's byte budget: its memory is bounded as one target's.
    let budget = app.batchMaxBytes;
    const prepare = (t: DrainTable, row: Parameters<BatchPlanner["prepare"]>[1]) => this.#planner.prepare(t, row);
    const plan = (table: DrainTable, force: boolean) => {
      looked.add(table.name);
      if (budget <= 0) {
        out.more = true;
        return;
      }
      const { drafts: made, outcome } = table.plan({ now, maxBytes: budget, prepare, force, tenants });
      out.deadLettered += outcome.deadLettered;
      out.failed += outcome.failed;
      out.more ||= outcome.more;
      if (outcome.readOn) out.readOn = true;
      out.wakeAt = minWake(out.wakeAt, outcome.wakeAt);
      this.#planner.forgetReadAhead(outcome.touched);
      for (const draft of made) budget -= draft.bytes;
      drafts.push(...made);
    };
    for (const table of tables) plan(table, false);
    for (let next = awaitedBy(tables, drafts, looked); next.length > 0; next = awaitedBy(tables, drafts, looked))
      for (const table of next) plan(table, true);
    return drafts;
  }

  /** Reads the ledger rows of `tenants` (each in its own database, side by side) and applies them to every table. */
  async #settle(tenants: string[], now: number): Promise<void> {
    const { tables } = this.#parts;
    const open = tables.filter((t) => t.isOpen);
    await Promise.all(
      tenants.slice(0, this.#remotes.maxOpen).map(async (tenant) => {
        const remote = await this.#remotes.use(tenant, now);
        if (remote === null) return;
        let unreadable = false;
        remote.inFlight += 1;
        try {
          const rows = await remote.ledger.readRows(open);
          this.#remotes.recovered(tenant, true);
          open.forEach((table, i) => {
            const read = rows[i]!;
            unreadable ||= read === null;
            try {
              table.tenants.settle(tenant, read);
            } catch (error) {
              table.hold({ reason: "local", error, what: `settling tenant "${tenant}" from its ledger` }, now);
            }
          });
        } catch (error) {
          this.#remotes.outage(tenant, error, "reading its delivery ledger", now);
        } finally {
          remote.inFlight -= 1;
        }
        // Held once this read is done: the database is closed then, and its ledger set up again when
        // opened (one dropped and made anew has none).
        if (unreadable) this.#remotes.schema(tenant, `cannot read the ledger ${this.#parts.target.ledgerTable}`, now);
      }),
    );
  }

  /**
   * One tenant's batch: its slices of a transaction across tables linked (what waits held back
   * with its lanes), each opened behind the fence of the tenant's ledger; null when nothing goes.
   */
  #open(remote: TenantRemote, drafts: SliceDraft[], now: number, out: TargetCycle): SentBatch | null {
    const planned = new Map(drafts.map((d) => [d.table.name, d.table]));
    const waitsIn = (t: string, grp: number) => planned.get(t)?.waitOf(grp) ?? null;
    return openLinked(drafts, this.#served, waitsIn, this.#planner.goneFrom, { now, fence: remote.fence }, out);
  }

  /**
   * Sends one tenant's batch and applies its answer; a tenant whose database does not answer is held (nothing
   * charged).
   */
  async #send(remote: TenantRemote, batch: SentBatch, out: TargetCycle): Promise<void> {
    const parts: AnswerParts = {
      ...this.#parts,
      name: remote.name,
      forgetReadAhead: (tables) => this.#planner.forgetReadAhead(tables),
    };
    const observed = observeSent(batch, parts);
    const started = this.#parts.scheduler.elapsed();
    remote.inFlight += 1;
    this.#inFlight += 1;
    let results: WriteResult[];
    try {
      results = await remote.writer.send(batch.stmts);
    } catch (error) {
      batchLost(batch, observed, error, parts);
      const now = this.#parts.now();
      this.#remotes.outage(remote.tenant, error, `a batch of ${batch.stmts.length} statements`, now);
      out.wakeAt = minWake(out.wakeAt, this.#remotes.heldUntil(remote.tenant, now)); // its rows go again then
      return;
    } finally {
      remote.inFlight -= 1;
      this.#inFlight -= 1;
    }
    this.#remotes.recovered(remote.tenant, true); // it answered: an outage is over
    this.#lastSuccessAt = this.#parts.now();
    this.#lastRoundTripMs = this.#parts.scheduler.elapsed() - started;
    const faults = this.#remotes.schemaFaults(remote.tenant);
    const answered = applyAnswered(batch, results, observed, started, out, parts);
    // What it lacked (a table, the ledger) is there now when rows went and none was refused for it.
    if (answered.slices.some((slice) => slice.delivered > 0) && this.#remotes.schemaFaults(remote.tenant) === faults)
      this.#remotes.recovered(remote.tenant);
    // Held for what its database lacks (a table, the ledger): its rows go again when that hold ends.
    out.wakeAt = minWake(out.wakeAt, this.#remotes.heldUntil(remote.tenant, this.#parts.now()));
  }

  /** Confirms locally the rows the tenants' databases applied (see Delivery.confirmApplied). */
  async confirmApplied(turn: (() => Promise<unknown>) | null = null, markBehind = false): Promise<void> {
    for (const table of this.#parts.tables) {
      table.tenants.lookAtHead();
      if (!table.hasApplied) continue;
      if (turn) await turn();
      while (table.confirmApplied(this.#parts.now(), markBehind)) await this.#parts.scheduler.sleep(0);
    }
  }
}
