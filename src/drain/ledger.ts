import type { Logger } from "../logger.ts";
import { fenceSql, fleetReadSql, settleLanesReadSql, settleReadSql } from "../sql/ledger.ts";
import { ledgerStep } from "../sql/probe.ts";
import { maxSeqSql } from "../sql/schema.ts";
import type { Statement, WriteResult } from "../writers/writer.ts";
import type { Dialect } from "../vocabulary.ts";
import { parseCount, type BoundedWriter } from "./bounded-writer.ts";
import { ensureStep } from "./remote-schema.ts";
import type { DrainTable, LedgerMove } from "./table/table.ts";
import type { LedgerRow } from "./views.ts";

/**
 * One target's delivery ledger as the drain uses it: the table is checked (and with auto_schema
 * created) at startup, every batch opens each namespace with a fence (`fence`), and tables whose
 * outcome is unknown are settled from it (`settle`) before anything is sent again. The ledger
 * row of a queue is keyed by its file's origin id and the namespace.
 */
export class TargetLedger {
  /** The fence's text per number of ledger rows it moves (lanes make several). */
  private readonly fenceTexts = new Map<number, string>();
  private readonly settleText: string;
  private readonly settleLanesText: string;

  constructor(
    private readonly writer: BoundedWriter,
    private readonly dialect: Dialect,
    readonly table: string,
    private readonly label: string,
    private readonly autoSchema: boolean,
    private readonly logger: Logger,
  ) {
    this.settleText = settleReadSql(table, dialect);
    this.settleLanesText = settleLanesReadSql(table, dialect);
  }

  /**
   * Makes sure the ledger table exists, creating it when `auto_schema` allows (never an ALTER of a
   * user table). Returns null when it is usable, else why not (a remote schema fault: missing and
   * not creatable, or no permission). An outage throws.
   */
  async setup(): Promise<string | null> {
    const outcome = await ensureStep(this.writer, ledgerStep(this.table, this.dialect), this.table, this.autoSchema);
    if ("done" in outcome) {
      if (outcome.done === "applied")
        this.logger.info(`drain: created the delivery ledger ${this.table} on ${this.writer.target}`, {
          target: this.writer.target,
        });
      return null;
    }
    return this.autoSchema
      ? `cannot create the ledger table ${this.table}: ${outcome.error} (a DBA can run \`sqloutbox schema --apply\`)`
      : `the ledger table ${this.table} is missing; create it with \`sqloutbox schema --apply\` or set auto_schema = true`;
  }

  /**
   * The statement that opens `table`'s slice: moves each of its ledger rows (its name, or `name#lane`) from
   * `through` to `last`, or fails when one moved meanwhile.
   */
  fence(table: DrainTable, moves: readonly LedgerMove[]): Statement {
    let sql = this.fenceTexts.get(moves.length);
    if (sql === undefined) {
      sql = fenceSql(this.table, this.dialect, moves.length);
      this.fenceTexts.set(moves.length, sql);
    }
    const args: Array<string | number> = [];
    for (const m of moves) args.push(table.origin!, m.ledgerRow, m.last, this.label);
    for (const m of moves) args.push(m.ledgerRow, m.through);
    return { sql, args, namespace: table.name, seq: 0, fence: true };
  }

  /**
   * Settles `tables` from the ledger in one round trip, reading each row with the lock that waits
   * for a transaction still holding it (a late COMMIT), then applies it locally (DrainTable.settle).
   * A queue without a ledger row that delivered before — through `outbox_seq` (this project's
   * earlier versions, the Python reference) — is migrated: its remote MAX(outbox_seq) is adopted as
   * applied, so nothing that landed is delivered again (one more round trip, once). Returns how many
   * rows were confirmed. `along`: more reads of the drain's own sent in the same round trip (the
   * fleet view's), their results returned in order. An outage throws; a ledger that cannot be read
   * holds the table.
   */
  async settle(
    tables: DrainTable[],
    now: number,
    along: Statement[] = [],
  ): Promise<{ confirmed: number; along: WriteResult[] }> {
    const ready = tables.filter((t) => t.isOpen);
    if (ready.length + along.length === 0) return { confirmed: 0, along: [] };
    const sent = await this.writer.send([
      ...ready.map((t) =>
        t.lanes > 1
          ? {
              sql: this.settleLanesText,
              args: [t.origin!, t.name, `${t.name}#`, `${t.name}$`],
              namespace: t.name,
              seq: 0,
            }
          : { sql: this.settleText, args: [t.origin!, t.name], namespace: t.name, seq: 0 },
      ),
      ...along,
    ]);
    const results = sent.slice(0, ready.length);
    const read = new Map<DrainTable, number | null>();
    const lanes = new Map<DrainTable, Map<string, number>>();
    ready.forEach((t, i) => {
      const result = results[i]!;
      if (t.lanes > 1) {
        const rows = result.ok ? laneRows(result.rows) : null;
        if (rows === null)
          t.hold(
            {
              reason: "remote schema",
              message: `cannot read the ledger ${this.table}: ${result.ok ? "a lane's through is not a number" : result.error}`,
            },
            now,
          );
        else {
          lanes.set(t, rows);
          read.set(t, rows.size === 0 ? null : (rows.get(t.name) ?? 0));
        }
        return;
      }
      const through = result.ok ? parseCount(result.rows, null) : undefined;
      if (through === undefined)
        t.hold(
          {
            reason: "remote schema",
            message: `cannot read the ledger ${this.table}: ${result.ok ? "its through is not a number" : result.error}`,
          },
          now,
        );
      else read.set(t, through);
    });
    const adopted = await this.adoptions(
      [...read]
        .filter(([t, through]) => through === null && !t.config.injectOutboxSeq && t.hasDelivered())
        .map(([t]) => t),
    );
    let confirmed = 0;
    for (const [table, through] of read) {
      try {
        const mark = adopted.get(table);
        const options = mark ? { adopted: mark } : {};
        const lanesRead = lanes.get(table);
        confirmed += lanesRead ? table.settleLanes(lanesRead, options) : table.settle(through, options);
        if (mark) {
          this.logger.warn(
            `drain: "${table.name}" on ${this.writer.target} starts on the delivery ledger: its earlier delivery reached outbox_seq ${mark} there, taken as applied`,
            {
              target: this.writer.target,
              namespace: table.name,
              seq: mark,
            },
          );
        }
      } catch (error) {
        table.unsettle();
        table.hold({ reason: "local", error, what: "settling from the ledger" }, now);
      }
    }
    if (confirmed > 0) {
      this.logger.info(
        `drain: ${confirmed} rows sent to ${this.writer.target} before an interruption were applied there (the ledger says so); confirmed without redelivery`,
        {
          target: this.writer.target,
          rows: confirmed,
        },
      );
    }
    return { confirmed, along: sent.slice(ready.length) };
  }

  /**
   * Reads each of `tables`' ledger rows of this queue — its own and every lane's — in one round
   * trip, by ledger row (a tenant's, in its own database: see TenantDelivery). Null for a table
   * whose rows the ledger cannot give now (it holds what is not a through). An outage throws.
   */
  async readRows(tables: DrainTable[]): Promise<Array<Map<string, number> | null>> {
    const results = await this.writer.send(
      tables.map((t) => ({
        sql: this.settleLanesText,
        args: [t.origin!, t.name, `${t.name}#`, `${t.name}$`],
        namespace: t.name,
        seq: 0,
      })),
    );
    return results.map((result) => (result.ok ? laneRows(result.rows) : null));
  }

  /** The remote MAX(outbox_seq) of each table (0 when it has no such column), in one round trip. */
  private async adoptions(tables: DrainTable[]): Promise<Map<DrainTable, number>> {
    const marks = new Map<DrainTable, number>();
    if (tables.length === 0) return marks;
    const results = await this.writer.send(
      tables.map((t) => ({ sql: maxSeqSql(t.name, this.dialect), args: [], namespace: t.name, seq: 0 })),
    );
    tables.forEach((t, i) => {
      const result = results[i]!;
      const max = result.ok ? parseCount(result.rows, 0) : 0; // no outbox_seq column: nothing was delivered idempotently
      if (max) marks.set(t, max);
    });
    return marks;
  }

  /**
   * The read of every origin's ledger rows for `tables` (no lock; with lanes, every lane's): the fleet view's
   * (see fleetRows).
   */
  fleetRead(tables: DrainTable[]): Statement {
    const plain = tables.filter((t) => t.lanes === 1).map((t) => t.name);
    const laned = tables.filter((t) => t.lanes > 1).flatMap((t) => [t.name, `${t.name}#`, `${t.name}$`]);
    return {
      sql: fleetReadSql(this.table, this.dialect, plain.length, laned.length / 3),
      args: [...plain, ...laned],
      namespace: this.table,
      seq: 0,
    };
  }

  /** The answer of one of these reads (fleetRead) sent alone. An outage throws. */
  read(read: Statement): Promise<WriteResult> {
    return this.writer.control(read.sql, read.namespace, read.args);
  }
}

/** The rows a fleetRead answered, or null when the ledger answered with an error. */
export function fleetRows(result: WriteResult): LedgerRow[] | null {
  if (!result.ok || !result.rows) return null;
  return result.rows.map(([origin, namespace, through, label, updatedAt]) => ({
    origin: String(origin),
    namespace: String(namespace),
    through: Number(through),
    label: String(label ?? ""),
    updatedAt: String(updatedAt ?? ""),
  }));
}

/** A lanes settlement read's rows (`namespace, through`) by ledger row, or null when one is not a number. */
function laneRows(rows: unknown[][] | undefined): Map<string, number> | null {
  const out = new Map<string, number>();
  for (const row of rows ?? []) {
    const through = Number(row[1]);
    if (!Number.isSafeInteger(through)) return null;
    out.set(String(row[0]), through);
  }
  return out;
}
