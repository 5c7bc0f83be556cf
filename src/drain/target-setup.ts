import { withTimeout } from "../timeout.ts";
import { prepareInjected } from "./compat.ts";
import { doublingMs } from "./schedule.ts";
import type { RemoteParts } from "./target-parts.ts";

/** A target whose ledger cannot be set up tries again after this long, doubling to the cap. */
const SETUP_RETRY_FIRST_MS = 2_000;
const SETUP_RETRY_CAP_MS = 60_000;

/** What one target's setup works with: the runner's parts it reads and reports to. */
export interface SetupParts extends RemoteParts {
  /** Opens the tables' queue files (the compatibility mode's seeding needs them open). */
  openTables: () => void;
  /** True while the service stops: a failure then is the stop closing the writer, not an outage. */
  stopping: () => boolean;
}

/**
 * One target's setup, before anything is delivered: the ledger table (checked, and with
 * auto_schema created), then the compatibility mode's schema and seeding. A ledger that cannot be
 * set up holds every table (remote schema) and is tried again on a doubling schedule; an outage is
 * the target's (Reachability) and is tried again after its backoff.
 */
export class TargetSetup {
  /** Why the ledger is not set up, while it is not. */
  #problem: string | null = null;
  #done = false;
  #running: Promise<boolean> | null = null;
  #retryAt = 0;
  #failures = 0;

  constructor(private readonly parts: SetupParts) {}

  /** Whether setup is done. */
  get done(): boolean {
    return this.#done;
  }

  /** Why the ledger is not set up, while it is not (status shows it). */
  get problem(): string | null {
    return this.#problem;
  }

  /** When a failed setup is tried again (epoch ms, the drain's clock). */
  get retryAt(): number {
    return this.#retryAt;
  }

  /** The ledger went missing under the drain (a fence said so): set it up again before the next batch. */
  undo(): void {
    this.#done = false;
  }

  /** Tries again at once (`kick`). */
  retryNow(): void {
    this.#retryAt = 0;
  }

  /**
   * Runs setup once (concurrent callers share the run); true when done. Delivery waits for it: the
   * ledger must exist before a fence can run, and compatibility-mode seeding must precede the
   * first delivery.
   */
  run(): Promise<boolean> {
    if (this.#done) return Promise.resolve(true);
    const { reachability, now, stopping } = this.parts;
    this.#running ??= this.#setUp()
      .catch((error) => {
        if (!stopping()) reachability.outage(error, "startup (ledger / auto_schema)", now());
        return false;
      })
      .finally(() => {
        this.#running = null;
      });
    return this.#running;
  }

  /** Setup bounded by `write_timeout`, for the service's start: a remote that hangs must not hang it. */
  async bounded(): Promise<void> {
    await withTimeout(this.run(), this.parts.app.writeTimeoutMs, () => false, this.parts.scheduler);
  }

  async #setUp(): Promise<boolean> {
    const { ledger, tables, reachability, logger, name } = this.parts;
    const now = this.parts.now();
    if (now < this.#retryAt) return false;
    this.parts.openTables();
    if (ledger) {
      const problem = await ledger.setup();
      reachability.recovered();
      if (problem) {
        this.#failures += 1;
        this.#retryAt = now + doublingMs(this.#failures, SETUP_RETRY_FIRST_MS, SETUP_RETRY_CAP_MS);
        if (this.#problem !== problem)
          logger.error(`drain: target ${name} is held (remote schema): ${problem}`, {
            target: name,
            error_class: "remote schema",
          });
        this.#problem = problem;
        for (const table of tables) table.hold({ reason: "remote schema", message: problem }, now);
        return false;
      }
      if (this.#problem) for (const table of tables) table.release("remote schema");
      this.#problem = null;
      this.#failures = 0;
    }
    // Compatibility-mode seeding before start() returns, so a producer's next seq is above the remote's.
    await this.injected(now);
    reachability.recovered();
    this.#done = true;
    return true;
  }

  /** The compatibility mode's setup for the tables that still need it (see compat.ts); an outage throws. */
  injected(now: number): Promise<void> {
    const { writer, dialect, tables, app, logger } = this.parts;
    if (writer === null) return Promise.resolve(); // a tenant template: no table of it is injected (config refuses it)
    return prepareInjected(writer, dialect, tables, app.autoSchema, logger, now);
  }
}
