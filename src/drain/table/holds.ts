import { formatDuration } from "../../duration.ts";
import { describeError } from "../../errors.ts";
import type { Logger } from "../../logger.ts";
import type { DeliveryObserver } from "../observer.ts";
import { doublingMs } from "../schedule.ts";
import type { HoldReason, TableView } from "../views.ts";

/** A table held back: why, the message that says it, since and until when (epoch ms). */
interface TableHold {
  reason: HoldReason;
  message: string;
  since: number;
  until: number;
}

/** How long a table whose file cannot be opened, or whose chain has a gap, waits before the next look. */
const FILE_RETRY_MS = 30_000;
/** A db_file its producer has not created yet is looked for again this soon: the first push should not wait 30 s. */
const MISSING_RETRY_MS = 1_000;
/** A local SQLite error: 100 ms doubling to 30 s, so a broken file is retried, not spun on. */
const LOCAL_RETRY_FIRST_MS = 100;
const LOCAL_RETRY_CAP_MS = 30_000;
/** A remote schema fault: 2 s doubling to 60 s. */
const SCHEMA_RETRY_FIRST_MS = 2_000;
const SCHEMA_RETRY_CAP_MS = 60_000;

/** A hold found outside the table's own work, with what its message needs (see TableHolds.hold). */
export type HoldCause =
  | { reason: "file"; error: unknown }
  | { reason: "local"; error: unknown; what: string }
  | { reason: "remote schema"; message: string }
  | { reason: "origin"; message: string }
  | { reason: "writer contract"; message: string };

/** What a table waits for before it is sent, with no fault in it: until `release(reason)`. */
export type WaitReason = Extract<HoldReason, "compat setup" | "late answer">;

/** What status says of each wait, for a table of `target`. */
const WAITING: Record<WaitReason, (target: string) => string> = {
  "compat setup": (target) =>
    `the compatibility mode's setup on ${target} (the outbox_seq column and index, the local sequence seeded above the remote's) is not done yet`,
  "late answer": (target) =>
    `a timed-out batch to ${target} may still commit: without a ledger a late commit must not land after newer rows`,
};

/**
 * What holds one table back, if anything — a file that cannot be opened, a local SQLite error, a
 * remote schema fault, a chain gap, another origin on an injected table, a writer that broke its
 * contract — each cause with its own retry schedule, said in the log once per distinct message.
 * Beside that one hold, the waits (see WaitReason) last until released, whatever hold comes and
 * goes meanwhile: a remote schema retry must not let an injected table go before its setup did.
 */
export class TableHolds {
  #hold: TableHold | null = null;
  readonly #waits = new Map<WaitReason, TableHold>();
  #localErrors = 0;
  #schemaErrors = 0;

  constructor(
    private readonly where: { table: string; target: string; file: string },
    private readonly logger: Logger,
    private readonly observer: DeliveryObserver | null = null,
  ) {}

  /**
   * A cause found outside the table's own work: by the target (its setup, the open-file limit, a unit's
   * answer), the ledger, the fleet view, the compatibility setup.
   */
  hold(cause: HoldCause, now: number): void {
    switch (cause.reason) {
      case "file":
        this.file(cause.error, now);
        return;
      case "local":
        this.local(cause.error, now, cause.what);
        return;
      case "remote schema":
        this.schema(cause.message, now);
        return;
      case "origin":
        this.origin(cause.message, now);
        return;
      case "writer contract":
        this.contract(cause.message, now);
        return;
    }
  }

  /** True while a hold lasts at `now` (until its retry time). */
  active(now: number): boolean {
    return this.#hold !== null && this.#hold.until > now;
  }

  /** True while the table waits for something (see WaitReason). */
  get waiting(): boolean {
    return this.#waits.size > 0;
  }

  /** True while the table waits for `reason`. */
  waitsFor(reason: WaitReason): boolean {
    return this.#waits.has(reason);
  }

  /** When a timed hold is retried (epoch ms), if that is what keeps the table back at `now`; null otherwise. */
  retryAt(now: number): number | null {
    const hold = this.#hold;
    return this.#waits.size === 0 && hold !== null && hold.until > now && Number.isFinite(hold.until)
      ? hold.until
      : null;
  }

  /**
   * The hold as status and metrics show it (times ISO-8601): the fault until it is released — not
   * only until its retry time, for it holds every row of the table until then — else a wait.
   */
  view(): TableView["held"] {
    const hold = this.#hold ?? this.#waits.values().next().value ?? null;
    const iso = (ms: number) => new Date(ms).toISOString();
    return hold
      ? {
          reason: hold.reason,
          message: hold.message,
          since: iso(hold.since),
          until: Number.isFinite(hold.until) ? iso(hold.until) : null,
        }
      : null;
  }

  /** The queue file cannot be opened (corrupt, not an outbox file, a newer format, no permission). */
  file(error: unknown, now: number): void {
    this.#holdFor("file", `cannot open ${this.where.file}: ${describeError(error).message}`, now, now + FILE_RETRY_MS);
  }

  /** The app's db_file does not exist yet, or holds no tables yet: its producer creates them (the drain never does). */
  missing(now: number, state: "does not exist yet" | "holds no tables yet" = "does not exist yet"): void {
    this.#holdFor(
      "file",
      `${this.where.file} ${state}: its producer creates it on first use (new SQLMiddleware({ dbFile }) or { database })`,
      now,
      now + MISSING_RETRY_MS,
    );
  }

  /** A local SQLite error while doing `what`. */
  local(error: unknown, now: number, what: string): void {
    this.#localErrors += 1;
    const ms = doublingMs(this.#localErrors, LOCAL_RETRY_FIRST_MS, LOCAL_RETRY_CAP_MS);
    this.#holdFor(
      "local",
      `local error ${what} (${this.where.file}): ${describeError(error).message}`,
      now,
      now + ms,
      "error",
    );
  }

  /** The remote schema lacks something (the table, a column, the ledger): nothing is charged. */
  schema(message: string, now: number): void {
    this.#schemaErrors += 1;
    const ms = doublingMs(this.#schemaErrors, SCHEMA_RETRY_FIRST_MS, SCHEMA_RETRY_CAP_MS);
    this.#holdFor("remote schema", `remote schema on ${this.where.target}: ${message}`, now, now + ms);
  }

  /**
   * The head links to a row that exists nowhere (a lost row): nothing is sent past it until an operator
   * looks; re-checked every 30 s and on `kick`.
   */
  gap(seq: number, prevSeq: number, now: number): void {
    const message = `seq ${seq} links to prev_seq ${prevSeq}, which is neither pending, delivered nor dead-lettered (a lost row in ${this.where.file}); run \`sqloutbox verify\`, see the operations runbook`;
    this.#holdFor("chain gap", message, now, now + FILE_RETRY_MS, "error");
  }

  /** Another origin feeds this injected remote table: held until it is gone. */
  origin(message: string, now: number): void {
    this.#holdFor("origin", message, now, Number.POSITIVE_INFINITY, "error");
  }

  /**
   * The table's lane count changed while rows pushed under the old one are pending: held until the drain
   * restarts with the old count, or the queue is empty.
   */
  lanesChanged(message: string, now: number): void {
    this.#holdFor("lanes changed", message, now, Number.POSITIVE_INFINITY, "error");
  }

  /** The writer applied part of a namespace: held until the drain restarts. */
  /**
   * Fenced, the writer applied part of a namespace — its fence alone (`applied` null) or rows
   * `applied` (first and last seq) — and failed the rest: the fence may have committed for rows
   * that were not applied, so the table stops, loudly, rather than guess.
   */
  partlyApplied(applied: readonly [number, number] | null, now: number): void {
    const part = applied === null ? "its ledger fence" : `seq ${applied[0]}..${applied[1]}`;
    this.contract(
      `the writer of ${this.where.target} applied part of a namespace (${part}) and failed the rest: with ledger = true a writer must apply a namespace whole or not at all (set ledger = false for a writer that cannot)`,
      now,
    );
  }

  contract(message: string, now: number): void {
    this.#holdFor("writer contract", message, now, Number.POSITIVE_INFINITY, "error");
  }

  /** Not sent before `release(reason)`: the table waits (see WAITING). */
  wait(reason: WaitReason, now: number): void {
    if (this.#waits.has(reason)) return;
    const message = WAITING[reason](this.where.target);
    this.#waits.set(reason, { reason, message, since: now, until: Number.POSITIVE_INFINITY });
  }

  /**
   * The cause is gone (the file opened, the local work or the remote schema succeeded, a wait is over): the
   * hold of that reason ends, its retry schedule starts over.
   */
  release(reason: HoldReason): void {
    if (this.#waits.delete(reason as WaitReason)) return;
    if (reason === "local") this.#localErrors = 0;
    if (reason === "remote schema") this.#schemaErrors = 0;
    if (this.#hold?.reason !== reason) return;
    this.#hold = null;
    this.logger.info(`drain: "${this.where.table}" on ${this.where.target} is no longer held (${reason})`, {
      target: this.where.target,
      namespace: this.where.table,
    });
  }

  /**
   * Ends a timed hold now, so the table is tried at once (the operator fixed the cause); a hold without an
   * end (origin, lanes changed, writer contract) stays.
   */
  retryNow(now: number): void {
    if (this.#hold && Number.isFinite(this.#hold.until)) this.#hold = { ...this.#hold, until: now };
  }

  /** Holds the table; says so once per distinct message (a hold that repeats is not news). */
  #holdFor(reason: HoldReason, message: string, now: number, until: number, level: "warn" | "error" = "warn"): void {
    const repeated = this.#hold?.reason === reason && this.#hold.message === message;
    this.#hold = { reason, message, since: repeated ? this.#hold!.since : now, until };
    if (repeated) return;
    this.observer?.held({ target: this.where.target, table: this.where.table, reason, message, at: now, until });
    const retry = Number.isFinite(until) ? `, retrying in ${formatDuration(until - now)}` : "";
    this.logger[level](`drain: "${this.where.table}" is held (${reason})${retry}: ${message}`, {
      target: this.where.target,
      namespace: this.where.table,
      error_class: reason,
    });
  }
}
