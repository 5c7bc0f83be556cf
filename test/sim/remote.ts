// The simulated remote: one SQLite database that every drain of the world writes into — the ledger
// the drains create there, and a table per queue table — through the real sqlite writer
// (SqliteWriter: runIsolated, each atomic unit whole or not at all, the rest committed together in
// one transaction). A trigger notes every row a committed transaction applied, so the checkers read
// what landed from the remote itself, not from what the drain said; another makes a poisoned row
// fail, as a constraint would.
import { Database } from "bun:sqlite";
import { SqliteWriter } from "../../src/writers/sqlite.ts";
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

/** A remote at `file` over `tables` (the queue tables' names: each becomes a remote table of the same name). */
export class SimRemote {
  /** The simulator's own connection: poison, what was applied, the ledger. */
  readonly db: Database;
  readonly #writer: SqliteWriter;
  /** Commits so far: each carries its number. */
  #tx = 0;
  readonly #poisoned = new Set<number>();
  readonly #applied;
  readonly #numbered;
  readonly #poison;
  readonly #cure;

  constructor(
    file: string,
    tables: readonly string[],
    /** Told of every commit, as it happens (the checkers). */
    private readonly onCommit: (commit: Commit) => void,
    coalesce: boolean,
  ) {
    const db = new Database(file, { create: true });
    this.db = db;
    db.run("PRAGMA journal_mode = WAL");
    db.run("CREATE TABLE sim_applied (wid INTEGER NOT NULL, tx INTEGER)");
    db.run("CREATE TABLE sim_poison (wid INTEGER PRIMARY KEY)");
    for (const t of tables) {
      // No key on wid: a row applied twice must show twice, not fail as a duplicate.
      db.run(`CREATE TABLE ${t} (wid INTEGER NOT NULL, k TEXT, v INTEGER)`);
      db.run(
        `CREATE TRIGGER ${t}_poison BEFORE INSERT ON ${t} WHEN EXISTS (SELECT 1 FROM sim_poison WHERE wid = NEW.wid) BEGIN SELECT RAISE(ABORT, 'poisoned row'); END`,
      );
      db.run(
        `CREATE TRIGGER ${t}_applied AFTER INSERT ON ${t} BEGIN INSERT INTO sim_applied (wid) VALUES (NEW.wid); END`,
      );
    }
    this.#writer = new SqliteWriter({ path: file, coalesce });
    this.#applied = db.query<{ wid: number }, []>("SELECT wid FROM sim_applied WHERE tx IS NULL ORDER BY rowid");
    this.#numbered = db.query("UPDATE sim_applied SET tx = ? WHERE tx IS NULL");
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
   * Applies one batch now through the real sqlite writer and returns its results (an error of the
   * transaction itself throws, as the writer throws it). The rows the trigger noted since belong to
   * the one transaction it committed: the checkers are told of it before the answer goes back.
   */
  async apply(stmts: Statement[], host: number, call: number, at: number): Promise<WriteResult[]> {
    const results = await this.#writer.writeBatch(stmts);
    const wids = this.#applied.all().map((r) => r.wid);
    if (wids.length > 0) {
      const tx = ++this.#tx;
      this.#numbered.run(tx);
      this.onCommit({ tx, at, host, call, wids });
    }
    return results;
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
    this.#writer.close();
    this.db.close();
  }
}
