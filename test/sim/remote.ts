// The simulated remote: one in-memory SQLite database that every drain of the world writes into —
// the ledger the drains create there, and a table per queue table — applying each batch the way the
// built-in writers do (runIsolated: each atomic unit whole or not at all, the rest committed
// together). A trigger notes every row a committed transaction applied, with that transaction's
// number, so the checkers read what landed from the remote itself, not from what the drain said.
import { Database, type SQLQueryBindings } from "bun:sqlite";
import { WriteError } from "../../src/errors.ts";
import { classifySqlite } from "../../src/writers/classify.ts";
import { type Outcome, runIsolated } from "../../src/writers/isolate.ts";
import type { Statement, WriteResult } from "../../src/writers/writer.ts";

/** The SQL a workload row is: every table of the remote takes these two shapes (so runs coalesce, and split). */
export const ROW_SQL = {
  keyed: (table: string) => `INSERT INTO ${table} (wid, k, v) VALUES (?, ?, ?)`,
  plain: (table: string) => `INSERT INTO ${table} (wid, v) VALUES (?, ?)`,
};

/** One remote transaction that committed: the workload rows it applied, in the order applied. */
export interface Commit {
  tx: number;
  at: number;
  /** The host whose drain sent it. */
  host: number;
  /** The writer call that carried it (see SimWriter). */
  call: number;
  wids: number[];
}

/** The ledger as the remote holds it. */
export interface LedgerEntry {
  origin: string;
  namespace: string;
  through: number;
}

/** A remote over `tables` (the queue tables' names: each becomes a remote table of the same name). */
export class SimRemote {
  readonly db = new Database(":memory:", { safeIntegers: false });
  /** Transactions begun (committed or not); a commit carries its number. */
  #tx = 0;
  readonly #applied;
  readonly #poisoned = new Set<number>();
  readonly #poison;
  readonly #cure;

  constructor(
    tables: readonly string[],
    /** Told of every commit, as it happens (the checkers). */
    private readonly onCommit: (commit: Commit) => void,
    private readonly coalesce: boolean,
  ) {
    const db = this.db;
    db.run("CREATE TABLE sim_tx (n INTEGER NOT NULL)");
    db.run("INSERT INTO sim_tx VALUES (0)");
    db.run("CREATE TABLE sim_applied (wid INTEGER NOT NULL, tx INTEGER NOT NULL)");
    db.run("CREATE TABLE sim_poison (wid INTEGER PRIMARY KEY)");
    for (const t of tables) {
      // No key on wid: a row applied twice must show twice, not fail as a duplicate.
      db.run(`CREATE TABLE ${t} (wid INTEGER NOT NULL, k TEXT, v INTEGER)`);
      db.run(
        `CREATE TRIGGER ${t}_poison BEFORE INSERT ON ${t} WHEN EXISTS (SELECT 1 FROM sim_poison WHERE wid = NEW.wid) BEGIN SELECT RAISE(ABORT, 'poisoned row'); END`,
      );
      db.run(
        `CREATE TRIGGER ${t}_applied AFTER INSERT ON ${t} BEGIN INSERT INTO sim_applied (wid, tx) SELECT NEW.wid, n FROM sim_tx; END`,
      );
    }
    this.#applied = db.query<{ wid: number }, [number]>("SELECT wid FROM sim_applied WHERE tx = ? ORDER BY rowid");
    this.#poison = db.query("INSERT OR IGNORE INTO sim_poison (wid) VALUES (?)");
    this.#cure = db.query("DELETE FROM sim_poison WHERE wid = ?");
  }

  /** Rows the remote refuses (a trigger raises) until cured: a statement that fails for a while. */
  poison(wid: number): void {
    this.#poisoned.add(wid);
    this.#poison.run(wid);
  }

  cure(wid: number): void {
    this.#poisoned.delete(wid);
    this.#cure.run(wid);
  }

  isPoisoned(wid: number): boolean {
    return this.#poisoned.has(wid);
  }

  get poisoned(): ReadonlySet<number> {
    return this.#poisoned;
  }

  /**
   * Applies one batch now, atomically per unit as a built-in writer does (see runIsolated), and
   * returns its results. An error of the transaction itself throws a WriteError.
   */
  async apply(stmts: Statement[], host: number, call: number, at: number): Promise<WriteResult[]> {
    if (stmts.length === 0) return [];
    return runIsolated(
      stmts,
      async (sent) => this.#pass(sent, host, call, at),
      classifySqlite,
      (message, error, misconfigured) =>
        new WriteError(`sim remote: ${message}`, undefined, {
          ...(error === undefined ? {} : { cause: error }),
          misconfigured: misconfigured ?? false,
        }),
      "sqlite",
      { coalesce: this.coalesce },
    );
  }

  /** The ledger's rows. */
  ledger(): LedgerEntry[] {
    try {
      return this.db
        .query<LedgerEntry, []>("SELECT origin, namespace, through FROM sqloutbox_ledger ORDER BY origin, namespace")
        .all();
    } catch {
      return []; // not created yet
    }
  }

  close(): void {
    this.db.close();
  }

  /** One optimistic pass in one transaction: the statements in order up to the first failure; committed only when all ran. */
  #pass(stmts: Statement[], host: number, call: number, at: number): { outcomes: Outcome[]; committed: boolean } {
    const db = this.db;
    db.run("BEGIN IMMEDIATE");
    const tx = ++this.#tx;
    db.query("UPDATE sim_tx SET n = ?").run(tx);
    const outcomes: Outcome[] = [];
    for (const stmt of stmts) {
      if (outcomes.length > 0 && !("result" in outcomes[outcomes.length - 1]!)) {
        outcomes.push({ notRun: true });
        continue;
      }
      try {
        outcomes.push({ result: run(db, stmt) });
      } catch (error) {
        outcomes.push({ error });
      }
    }
    const committed = outcomes.every((o) => "result" in o);
    if (!committed) {
      db.run("ROLLBACK");
      return { outcomes, committed };
    }
    const wids = this.#applied.all(tx).map((r) => r.wid);
    db.run("COMMIT");
    this.onCommit({ tx, at, host, call, wids });
    return { outcomes, committed };
  }
}

function run(db: Database, stmt: Statement): WriteResult {
  const query = db.query(stmt.sql);
  const args = stmt.args as SQLQueryBindings[];
  if (query.columnNames.length > 0) return { ok: true, rows: query.values(...args) as unknown[][] };
  const { changes } = query.run(...args);
  return { ok: true, rowsAffected: Number(changes) };
}
