import type { AppConfig, TargetConfig } from "../../config/types.ts";
import { describeError } from "../../errors.ts";
import type { Logger } from "../../logger.ts";
import type { Scheduler } from "../../scheduler.ts";
import { withTimeout } from "../../timeout.ts";
import type { Dialect } from "../../vocabulary.ts";
import type { TenantWriters } from "../../writers/writer.ts";
import { BoundedWriter } from "../bounded-writer.ts";
import { TargetLedger } from "../ledger.ts";
import { Reachability } from "../reachability.ts";
import { doublingMs } from "../schedule.ts";
import type { OpenContext } from "../table/table.ts";
import type { TenantHoldView } from "../views.ts";

/** A tenant's database as the drain holds it open: its writer (bounded by write_timeout), its ledger, its fence. */
export interface TenantRemote {
  tenant: string;
  /** `target[tenant]`: how logs and errors name it. */
  name: string;
  writer: BoundedWriter;
  ledger: TargetLedger;
  fence: NonNullable<OpenContext["fence"]>;
  /** Batches on their way to it: it is not closed while any is. */
  inFlight: number;
}

/** Why a tenant is held, since and until when (see TenantHoldView). */
export type TenantHold = TenantHoldView;

/** A tenant whose database failed: its reachability, its hold, and how often its schema was found wanting. */
interface Failing {
  reach: Reachability;
  hold: TenantHold;
  schemaFailures: number;
}

/** A tenant whose ledger cannot be set up (remote schema) tries again after this long, doubling to the cap. */
const SCHEMA_RETRY_FIRST_MS = 2_000;
const SCHEMA_RETRY_CAP_MS = 60_000;

/** What a template's tenant databases are opened with. */
export interface TenantRemotesParts {
  target: TargetConfig;
  app: AppConfig;
  dialect: Dialect;
  writers: TenantWriters;
  logger: Logger;
  now: () => number;
  scheduler: Scheduler;
  /** A tenant's database was closed (least recently used, or held): what the drain kept of it may go. */
  closed?: (tenant: string) => void;
}

/**
 * The tenant databases of one tenant template target: each opened on demand (its writer, its
 * ledger checked and with auto_schema created), at most `max_open_tenants` at once — the least
 * recently used closed first, never one with a batch on its way — and each tenant's own
 * reachability: a database that is down, missing or refusing holds that tenant alone, backed off
 * as a target would be, never charged to its rows. Counts what status and the metrics show.
 */
export class TenantRemotes {
  /** Open tenant databases, least recently used first. */
  readonly #open = new Map<string, TenantRemote>();
  /** Tenants whose database failed, by tenant: kept until it answers again (a closed writer keeps its hold). */
  readonly #failing = new Map<string, Failing>();
  /**
   * The tenants this cycle's plans admitted: their state must outlive the cycle, so they are not closed to
   * make room.
   */
  #pinned: ReadonlySet<string> = new Set();
  /** Opens and closes since the drain started. */
  readonly counts = { opened: 0, closed: 0 };

  constructor(private readonly parts: TenantRemotesParts) {}

  /** The most tenant databases open at once (`max_open_tenants`). */
  get maxOpen(): number {
    return this.parts.target.tenants!.maxOpen;
  }

  /** How many tenant databases are open now. */
  get openCount(): number {
    return this.#open.size;
  }

  /** Until when `tenant` is held (epoch ms), or null when it may be sent to now. */
  heldUntil(tenant: string, now: number): number | null {
    const failing = this.#failing.get(tenant);
    return failing !== undefined && failing.hold.until > now ? failing.hold.until : null;
  }

  /** Every tenant held now, oldest hold first. */
  held(now: number): TenantHold[] {
    return [...this.#failing.values()]
      .map((f) => f.hold)
      .filter((h) => h.until > now)
      .sort((a, b) => a.since - b.since);
  }

  /**
   * `tenant`'s database, opened (and its ledger set up) if it is not, touched as the most recently
   * used; null when it cannot be now — held, no room (every open one has a batch on its way), or
   * it failed to open (then it is held).
   */
  async use(tenant: string, now: number): Promise<TenantRemote | null> {
    const open = this.#open.get(tenant);
    if (open !== undefined) {
      this.#open.delete(tenant);
      this.#open.set(tenant, open);
      return open;
    }
    if (this.heldUntil(tenant, now) !== null) return null;
    if (this.#open.size >= this.maxOpen && !(await this.#closeOne())) return null;
    const name = `${this.parts.target.name}[${tenant}]`;
    let remote: TenantRemote;
    try {
      const writer = new BoundedWriter(
        name,
        await this.parts.writers.open(tenant),
        this.parts.app.writeTimeoutMs,
        this.parts.scheduler,
      );
      const { target, app, dialect, logger } = this.parts;
      const ledger = new TargetLedger(writer, dialect, target.ledgerTable, app.originLabel, app.autoSchema, logger);
      remote = { tenant, name, writer, ledger, fence: ledger.fence.bind(ledger), inFlight: 0 };
      this.#open.set(tenant, remote);
      this.counts.opened += 1;
    } catch (error) {
      this.outage(tenant, error, "opening its database", now);
      return null;
    }
    try {
      const problem = await remote.ledger.setup();
      if (problem === null) return remote;
      this.schema(tenant, problem, now);
    } catch (error) {
      this.outage(tenant, error, "setting up its ledger", now);
    }
    await this.#close(remote);
    return null;
  }

  /**
   * `tenant`'s database did not answer `what`: the tenant is held, backed off as a target is (see
   * Reachability); nothing is charged.
   */
  outage(tenant: string, error: unknown, what: string, now: number): void {
    const failing = this.#failingOf(tenant);
    failing.reach.outage(error, what, now);
    const reason = failing.reach.state === "misconfigured" ? "misconfigured" : "outage";
    failing.hold = {
      ...failing.hold,
      reason,
      message: describeError(error).message,
      until: failing.reach.backoffUntil,
    };
  }

  /**
   * `tenant`'s ledger (or a table of its database) is missing or not permitted: held, tried again on a
   * doubling schedule.
   */
  schema(tenant: string, message: string, now: number): void {
    const failing = this.#failingOf(tenant);
    const first = failing.hold.reason !== "remote schema" || failing.hold.message !== message;
    failing.schemaFailures += 1;
    const retryMs = doublingMs(failing.schemaFailures, SCHEMA_RETRY_FIRST_MS, SCHEMA_RETRY_CAP_MS);
    failing.hold = { ...failing.hold, reason: "remote schema", message, until: now + retryMs };
    if (first)
      this.parts.logger.error(
        `drain: tenant "${tenant}" of ${this.parts.target.name} is held (remote schema): ${message}`,
        {
          target: this.parts.target.name,
          tenant,
          error_class: "remote schema",
        },
      );
    // Opened again when its hold ends, so its ledger is set up again (a database dropped and made anew).
    const open = this.#open.get(tenant);
    if (open !== undefined && open.inFlight === 0) void this.#close(open);
  }

  /** How often `tenant`'s database was found lacking what a statement needs since it last delivered. */
  schemaFaults(tenant: string): number {
    return this.#failing.get(tenant)?.schemaFailures ?? 0;
  }

  /**
   * `tenant`'s database answered: its hold, if any, ends — with `reachedOnly` (it answered a read of
   * the ledger, not a batch), only a hold for an outage: one for a table it lacks ends when a batch goes.
   */
  recovered(tenant: string, reachedOnly = false): void {
    const failing = this.#failing.get(tenant);
    if (failing === undefined || (reachedOnly && failing.hold.reason === "remote schema")) return;
    failing.reach.recovered();
    this.#failing.delete(tenant);
  }

  /** Ends every tenant's hold now (`kick`), or `tenant`'s only. */
  retryNow(tenant?: string): void {
    for (const [t, failing] of this.#failing) {
      if (tenant !== undefined && t !== tenant) continue;
      failing.reach.retryNow();
      failing.hold.until = 0;
    }
  }

  /**
   * The tenants whose rows this cycle plans (at most `max_open_tenants`): none of them is closed to
   * make room for another until `trim` — closing one forgets what the tables know of its lanes,
   * which its planned slices rely on.
   */
  pin(tenants: ReadonlySet<string>): void {
    this.#pinned = tenants;
  }

  /**
   * Unpins the cycle's tenants and closes the least recently used databases with no batch on their way, down
   * to `max_open_tenants`.
   */
  async trim(): Promise<void> {
    this.#pinned = new Set();
    while (this.#open.size > this.maxOpen && (await this.#closeOne()));
  }

  /** Closes every open tenant database (the drain stops). */
  async closeAll(): Promise<void> {
    await Promise.all([...this.#open.values()].map((r) => this.#close(r)));
  }

  #failingOf(tenant: string): Failing {
    let failing = this.#failing.get(tenant);
    if (failing === undefined) {
      const { target, app, logger, now, scheduler } = this.parts;
      const reach = new Reachability(`${target.name}[${tenant}]`, app.outageBackoffCapMs, logger, () =>
        scheduler.random(),
      );
      const hold: TenantHold = { tenant, reason: "outage", message: "", since: now(), until: 0 };
      this.#failing.set(tenant, (failing = { reach, hold, schemaFailures: 0 }));
    }
    return failing;
  }

  /** Closes the least recently used open database with no batch on its way, not pinned; false when there is none. */
  async #closeOne(): Promise<boolean> {
    for (const remote of this.#open.values()) {
      if (remote.inFlight > 0 || this.#pinned.has(remote.tenant)) continue;
      await this.#close(remote);
      return true;
    }
    return false;
  }

  /** Closes one tenant's writer, bounded: a database that cannot close must not hold the drain. */
  async #close(remote: TenantRemote): Promise<void> {
    if (this.#open.get(remote.tenant) !== remote) return;
    this.#open.delete(remote.tenant);
    this.counts.closed += 1;
    this.parts.closed?.(remote.tenant);
    try {
      await withTimeout(Promise.resolve(remote.writer.writer.close?.()), 2000, () => undefined, this.parts.scheduler);
    } catch (error) {
      this.parts.logger.warn(`drain: closing ${remote.name} failed: ${describeError(error).message}`, {
        target: this.parts.target.name,
        tenant: remote.tenant,
      });
    }
  }
}
