import { fleetRows, type TargetLedger } from "./ledger.ts";
import type { Statement, WriteResult } from "../writers/writer.ts";
import type { DrainTable } from "./table/table.ts";
import type { FleetRow, LedgerRow } from "./views.ts";

const keyOf = (origin: string, ledgerRow: string) => `${origin}\0${ledgerRow}`;
const byTableThenOrigin = (a: FleetRow, b: FleetRow) =>
  a.namespace.localeCompare(b.namespace) || a.origin.localeCompare(b.origin);

/** How often the fleet view (every origin's ledger rows for the served tables) is read again. */
const FLEET_REFRESH_MS = 15_000;
/** A read the ledger refused is tried again after this long: not in every cycle of a loop that waits for it. */
const FLEET_RETRY_MS = 1_000;

/**
 * What one target's drain knows of the fleet feeding its tables: every origin's ledger rows (a
 * table's own, and with lanes one per lane), read again every 15 s and updated at once when our own
 * rows move, shown per table and origin for `status` and the metrics; and, from them, the
 * compatibility mode's refusal of a second origin on an injected table.
 */
export class FleetView {
  /** Every origin's ledger rows for the served tables, by origin and ledger row: ours move with every batch. */
  #rows = new Map<string, LedgerRow>();
  /** The served tables' lane counts, by name: which ledger rows are a table's (rows of another lane count are not). */
  #lanes = new Map<string, number>();
  /** `#rows` per table and origin, sorted; null: to be made again (a row moved). */
  #shown: FleetRow[] | null = [];
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

  /**
   * When due: the read, to send alone (refresh) or along with another, and what to do with its answer; null
   * when not due.
   */
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
    this.#lanes = new Map(tables.map((t) => [t.name, t.lanes]));
    this.#rows = new Map(
      rows.filter((r) => this.#tableOf(r.namespace) !== null).map((r) => [keyOf(r.origin, r.namespace), r]),
    );
    this.#shown = null;
    this.readAt = now;
    this.#checkOrigins(tables, now);
  }

  /** The served table a ledger row accounts for (`name`, or `name#lane` for a lane of its count), or null. */
  #tableOf(ledgerRow: string): string | null {
    const mark = ledgerRow.lastIndexOf("#");
    if (mark < 0) return this.#lanes.has(ledgerRow) ? ledgerRow : null;
    const table = ledgerRow.slice(0, mark);
    const lane = ledgerRow.slice(mark + 1);
    const count = this.#lanes.get(table) ?? 1;
    return count > 1 && /^(0|[1-9][0-9]*)$/.test(lane) && Number(lane) < count ? table : null;
  }

  /** Every origin's delivery of the served tables, as last read or moved by us (sorted by table, then origin). */
  get rows(): FleetRow[] {
    this.#shown ??= this.#perTable();
    return this.#shown;
  }

  /** The ledger rows taken together per table and origin (see FleetRow). */
  #perTable(): FleetRow[] {
    const byTable = new Map<string, LedgerRow[]>();
    for (const row of this.#rows.values()) {
      const key = keyOf(row.origin, this.#tableOf(row.namespace)!);
      byTable.set(key, [...(byTable.get(key) ?? []), row]);
    }
    const shown: FleetRow[] = [];
    for (const rows of byTable.values()) {
      const first = rows[0]!;
      const table = this.#tableOf(first.namespace)!;
      const latest = rows.reduce((a, b) => (Date.parse(b.updatedAt) > Date.parse(a.updatedAt) ? b : a));
      const row: FleetRow = {
        origin: first.origin,
        namespace: table,
        through: Math.max(...rows.map((r) => r.through)),
        label: latest.label,
        updatedAt: latest.updatedAt,
      };
      if ((this.#lanes.get(table) ?? 1) > 1) {
        const slowest = rows.reduce((a, b) => (Date.parse(b.updatedAt) < Date.parse(a.updatedAt) ? b : a));
        row.lanes = {
          rows: rows.length,
          slowest: { ledgerRow: slowest.namespace, through: slowest.through, updatedAt: slowest.updatedAt },
        };
      }
      shown.push(row);
    }
    return shown.sort(byTableThenOrigin);
  }

  /** Our own ledger rows moved with a batch: the view shows them at once, not at the next read. */
  noteThrough(table: DrainTable, now: number): void {
    const origin = table.origin;
    if (!origin) return;
    this.#lanes.set(table.name, table.lanes);
    const updatedAt = new Date(now).toISOString();
    for (const { ledgerRow, through } of table.ledgerThroughs()) {
      const key = keyOf(origin, ledgerRow);
      if (this.#rows.get(key)?.through === through) continue; // a lane this batch did not move
      this.#rows.set(key, { origin, namespace: ledgerRow, through, label: this.originLabel, updatedAt });
      this.#shown = null;
    }
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
