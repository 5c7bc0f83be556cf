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
import { awaitedBy, BatchPlanner, layOut, type SentBatch } from "../batch-plan.ts";
import { linkDrafts } from "../linked-groups.ts";
import type { DeliveryObserver } from "../observer.ts";
import { minWake } from "../schedule.ts";
import type { DrainTable, SliceDraft, TableSlice } from "../table/table.ts";
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

  /** `tenant`'s database lacks what a statement needs (a table, the ledger): that tenant is held, its ledger set up again after. */
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

  /** One cycle: plan every table (of `only`), read the ledgers of tenants met for the first time, send each tenant's batch. */
  async deliver(now: number, out: TargetCycle, only: ReadonlySet<DrainTable> | null): Promise<TargetCycle> {
    const { drafts, settle, admitted } = this.#plan(now, out, only);
    this.#remotes.pin(admitted);
    if (settle.size > 0) {
      out.more = out.readOn = true; // their rows go in the next cycle, at once: not a spin
      await this.#settle([...settle], now);
    }
    const byTenant = Map.groupBy(drafts, (d) => d.rows[0]!.tenant!);
    const sends: Array<Promise<void>> = [];
    for (const [tenant, tenantDrafts] of byTenant) {
      const remote = sends.length < this.#remotes.maxOpen ? await this.#remotes.use(tenant, now) : null;
      if (remote === null) {
        // Held, or no room this cycle: its rows are read again (next cycle, or when its hold ends).
        for (const draft of tenantDrafts) draft.table.unsent(draft);
        out.more ||= this.#remotes.heldUntil(tenant, now) === null;
        out.wakeAt = minWake(out.wakeAt, this.#remotes.heldUntil(tenant, now));
        continue;
      }
      const batch = this.#open(remote, tenantDrafts, now, out);
      if (batch !== null) sends.push(this.#send(remote, batch, out));
    }
    await Promise.all(sends);
    await this.#remotes.trim();
    return out;
  }

  /** Every table's plan (the tables a transaction across them waits on too, ready or not). */
  #plan(now: number, out: TargetCycle, only: ReadonlySet<DrainTable> | null) {
    const { tables, app } = this.#parts;
    const drafts: SliceDraft[] = [];
    const settle = new Set<string>();
    const looked = new Set<string>();
    const admitted = new Set<string>();
    const tenantGate = (tenant: string) => {
      const until = this.#remotes.heldUntil(tenant, now);
      if (until !== null) return until;
      if (admitted.has(tenant)) return null;
      if (admitted.size >= this.#remotes.maxOpen) return "later";
      admitted.add(tenant);
      return null;
    };
    const plan = (table: DrainTable, force: boolean) => {
      looked.add(table.name);
      const prepare = (t: DrainTable, row: Parameters<BatchPlanner["prepare"]>[1]) => this.#planner.prepare(t, row);
      const { drafts: made, outcome } = table.plan({ now, maxBytes: app.batchMaxBytes, prepare, force, tenantGate });
      out.deadLettered += outcome.deadLettered;
      out.failed += outcome.failed;
      out.more ||= outcome.more;
      if (outcome.readOn) out.readOn = true;
      out.wakeAt = minWake(out.wakeAt, outcome.wakeAt);
      for (const tenant of outcome.settle ?? []) settle.add(tenant);
      this.#planner.forgetReadAhead(outcome.touched);
      drafts.push(...made);
    };
    for (const table of tables) if (only === null || only.has(table)) plan(table, false);
    for (let next = awaitedBy(tables, drafts, looked); next.length > 0; next = awaitedBy(tables, drafts, looked))
      for (const table of next) plan(table, true);
    return { drafts, settle, admitted };
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
          this.#remotes.recovered(tenant);
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
    const { held, units } = linkDrafts(drafts, this.#served, (t, grp) => planned.get(t)?.waitOf(grp) ?? null);
    const opened = new Map<SliceDraft, TableSlice>();
    for (const draft of drafts) {
      const waiting = held.get(draft);
      if (waiting !== undefined) {
        for (const g of waiting) out.wakeAt = minWake(out.wakeAt, g.until);
        const left = draft.table.holdBack(draft, waiting);
        if (left === "read on") out.more = out.readOn = true;
        if (left !== "send") continue;
      }
      opened.set(draft, draft.table.openSlice(draft, { now, fence: remote.fence }));
    }
    return layOut(units.map((unit) => unit.flatMap((d) => (opened.has(d) ? [opened.get(d)!] : []))));
  }

  /** Sends one tenant's batch and applies its answer; a tenant whose database does not answer is held (nothing charged). */
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
    this.#remotes.recovered(remote.tenant);
    this.#lastSuccessAt = this.#parts.now();
    this.#lastRoundTripMs = this.#parts.scheduler.elapsed() - started;
    applyAnswered(batch, results, observed, started, out, parts);
  }

  /** Confirms locally the rows the tenants' databases applied (see Delivery.confirmApplied). */
  async confirmApplied(turn: (() => Promise<unknown>) | null = null): Promise<void> {
    for (const table of this.#parts.tables) {
      if (!table.hasApplied) continue;
      if (turn) await turn();
      while (table.confirmApplied(this.#parts.now())) await this.#parts.scheduler.sleep(0);
    }
  }
}
