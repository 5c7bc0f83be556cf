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
  /** The last tenant a cycle served (the next cycle goes on after it), null: from the first. */
  #turn: string | null = null;
  #lastSuccessAt: number | null = null;
  #lastRoundTripMs: number | null = null;
  #inFlight = 0;
  #pipelining = false;

  constructor(parts: TenantDeliveryParts) {
    this.#parts = parts;
    this.#remotes = new TenantRemotes({
      ...parts,
      closed: (tenant) => {
        for (const table of parts.tables) table.forgetTenant(tenant);
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
    const tenants = this.#choose(now, out);
    if (tenants.length === 0) return out;
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
          for (const draft of tenantDrafts) draft.table.unsent(draft);
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
    return out;
  }

  /**
   * The tenants this cycle serves: those with rows in any table, by name, from where the last cycle
   * stopped (round robin: a tenant with a large backlog gets a slice of each table a turn, as every
   * other does), at most `max_open_tenants`, past the held ones (each read again when its hold ends);
   * null among them when a table has rows without a tenant (each a fault of its own).
   */
  #choose(now: number, out: TargetCycle): Array<string | null> {
    const { tables } = this.#parts;
    const room = this.#remotes.maxOpen;
    const chosen: Array<string | null> = [];
    let withoutTenant = false;
    /**
     * Takes tenants with rows after `from` (and up to `until`), past the held ones, until `room` are taken;
     * true when more are left.
     */
    const take = (from: string | null, until: string | null): boolean => {
      for (let after = from; ; ) {
        const names = new Set<string>();
        for (const table of tables) {
          const found = table.tenantsWithRows(after, room + 1);
          withoutTenant ||= found.withoutTenant;
          for (const t of found.tenants) if (until === null || t <= until) names.add(t);
        }
        if (names.size === 0) return false;
        for (const tenant of [...names].sort()) {
          after = tenant;
          const held = this.#remotes.heldUntil(tenant, now);
          if (held !== null) out.wakeAt = minWake(out.wakeAt, held);
          else if (chosen.length < room) chosen.push(tenant);
          else return true;
        }
      }
    };
    // After the last one served, then from the first up to it: every tenant with rows gets its turn.
    const more = take(this.#turn, null) || (this.#turn !== null && take(null, this.#turn));
    this.#turn = more ? (chosen.at(-1) ?? null) : null;
    if (more) out.more = true; // the next tenants go in the next cycle, at once
    if (withoutTenant) chosen.push(null);
    return chosen;
  }

  /** Whether every open table has read `tenant`'s ledger rows. */
  #settledEverywhere(tenant: string): boolean {
    return this.#parts.tables.every((table) => !table.isOpen || table.settledFor(tenant));
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
        remote.inFlight += 1;
        try {
          const rows = await remote.ledger.readRows(open);
          this.#remotes.recovered(tenant, true);
          open.forEach((table, i) => {
            const read = rows[i]!;
            if (read === null)
              this.#remotes.schema(tenant, `cannot read the ledger ${this.#parts.target.ledgerTable}`, now);
            try {
              table.settleTenant(tenant, read);
            } catch (error) {
              table.hold({ reason: "local", error, what: `settling tenant "${tenant}" from its ledger` }, now);
            }
          });
        } catch (error) {
          this.#remotes.outage(tenant, error, "reading its delivery ledger", now);
        } finally {
          remote.inFlight -= 1;
        }
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
    return openLinked(drafts, this.#served, waitsIn, { now, fence: remote.fence }, out);
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
      this.#remotes.outage(remote.tenant, error, `a batch of ${batch.stmts.length} statements`, this.#parts.now());
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
  }

  /** Confirms locally the rows the tenants' databases applied (see Delivery.confirmApplied). */
  async confirmApplied(turn: (() => Promise<unknown>) | null = null, markBehind = false): Promise<void> {
    for (const table of this.#parts.tables) {
      if (!table.hasApplied) continue;
      if (turn) await turn();
      while (table.confirmApplied(this.#parts.now(), markBehind)) await this.#parts.scheduler.sleep(0);
    }
  }
}
