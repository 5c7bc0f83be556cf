import { fleetRows, type TargetLedger } from "./ledger.ts";
import type { Statement, WriteResult } from "../writers/writer.ts";
import type { DrainTable } from "./table.ts";
import type { LedgerRow } from "./views.ts";

const keyOf = (origin: string, namespace: string) => `${origin}\0${namespace}`;
const byTableThenOrigin = (a: LedgerRow, b: LedgerRow) =>
  a.namespace.localeCompare(b.namespace) || a.origin.localeCompare(b.origin);

/** How often the fleet view (every origin's ledger row for the served tables) is read again. */
const FLEET_REFRESH_MS = 15_000;
/** A read the ledger refused is tried again after this long: not in every cycle of a loop that waits for it. */
const FLEET_RETRY_MS = 1_000;

/**
 * What one target's drain knows of the fleet feeding its tables: every origin's ledger row, read
 * again every 15 s and updated at once when our own row moves, for `status` and the metrics; and,
 * from it, the compatibility mode's refusal of a second origin on an injected table.
 */
export class FleetView {
  /** Every origin's ledger row for the served tables by origin and namespace: our row moves with every batch, and a search per batch cost O(tables). */
  #rows = new Map<string, LedgerRow>();
  /** The keys of `#rows` in display order; null: sort them again (a table's first row since the last read). */
  #order: string[] | null = [];
  /** When they were last read (epoch ms; 0: never). */
  readAt = 0;
  /** When a read was last tried, answered or not (epoch ms; 0: never). */
  #triedAt = 0;

  constructor(
    private readonly target: string,
    private readonly originLabel: string,
  ) {}

  /** When the rows are due to be read again (epoch ms, the drain's clock). */
  get dueAt(): number {
    return Math.max(this.readAt + FLEET_REFRESH_MS, this.#triedAt + FLEET_RETRY_MS);
  }

  /**
   * Reads the rows again when due, then holds every injected table another origin feeds too. A read
   * the ledger refuses keeps the last rows and holds (an origin hold must not lapse for want of an
   * answer) and is tried again a second later. An outage throws.
   */
  async refresh(ledger: TargetLedger, tables: DrainTable[], now: number): Promise<void> {
    const due = this.readAlong(ledger, tables, now);
    if (due !== null) due.take(await ledger.read(due.read));
  }

  /** When due: the read, to send alone (refresh) or along with another, and what to do with its answer; null when not due. */
  readAlong(
    ledger: TargetLedger,
    tables: DrainTable[],
    now: number,
  ): { read: Statement; take: (result: WriteResult) => void } | null {
    if (now < this.dueAt || tables.length === 0) return null;
    this.#triedAt = now;
    return { read: ledger.fleetRead(tables), take: (result) => this.#take(fleetRows(result), tables, now) };
  }

  #take(rows: LedgerRow[] | null, tables: DrainTable[], now: number): void {
    if (rows === null) return;
    this.rows = rows;
    this.readAt = now;
    this.#checkOrigins(tables, now);
  }

  /** Every origin's ledger row for the served tables, as last read or moved by us (sorted by table, then origin). */
  get rows(): LedgerRow[] {
    this.#order ??= [...this.#rows.keys()].sort((a, b) => byTableThenOrigin(this.#rows.get(a)!, this.#rows.get(b)!));
    return this.#order.map((key) => this.#rows.get(key)!);
  }

  set rows(rows: LedgerRow[]) {
    this.#rows = new Map(rows.map((r) => [keyOf(r.origin, r.namespace), r]));
    this.#order = [...this.#rows.keys()]; // as the ledger sorted them
  }

  /** Our own ledger row moved with a batch: the view shows it at once, not at the next read. */
  noteThrough(table: DrainTable, now: number): void {
    const origin = table.origin;
    if (!origin || table.through === null) return;
    const key = keyOf(origin, table.name);
    if (!this.#rows.has(key)) this.#order = null;
    this.#rows.set(key, {
      origin,
      namespace: table.name,
      through: table.through,
      label: this.originLabel,
      updatedAt: new Date(now).toISOString(),
    });
  }

  /**
   * Compatibility mode stamps per-file seqs into `outbox_seq`: two queue files feeding one injected
   * table would absorb each other's rows as duplicates. Refused loudly: the table is held, naming both.
   */
  #checkOrigins(tables: DrainTable[], now: number): void {
    for (const table of tables) {
      const origin = table.origin;
      if (!table.config.injectOutboxSeq || !table.isOpen || origin === null) continue;
      const others = this.rows.filter((r) => r.namespace === table.name && r.origin !== origin);
      if (others.length === 0) {
        table.release("origin");
        continue;
      }
      const theirs = others.map((r) => `${r.origin} (${r.label || "no label"})`).join(", ");
      const message =
        `inject_outbox_seq table "${table.name}" on ${this.target} is also fed by origin ${theirs}; this queue is origin ${origin} (${this.originLabel}). ` +
        "Per-file outbox_seq values of two queues collide and would be absorbed as duplicates: set inject_outbox_seq = false to deliver through the ledger";
      table.hold({ reason: "origin", message }, now);
    }
  }
}
