// The simulated remote: one SQLite database that every drain of the world writes into — the ledger
// the drains create there, and a table per queue table — through the real sqlite writer
// (SqliteWriter: runIsolated, each atomic unit whole or not at all, the rest committed together in
// one transaction). A trigger notes every row a committed transaction applied, so the checkers read
// what landed from the remote itself, not from what the drain said; another makes a poisoned row
// fail, as a constraint would.
import { Database } from "bun:sqlite";
import fs from "node:fs";
import path from "node:path";
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
  /** The tenant whose database it committed in (null: the one remote of a world without tenants). */
  tenant: string | null;
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
  readonly #applied;
  readonly #numbered;
  readonly #poison;
  readonly #cure;

  constructor(
    file: string,
    readonly tenant: string | null,
    tables: readonly string[],
    /** Told of every commit, as it happens (the checkers): numbers it. */
    private readonly onCommit: (commit: Omit<Commit, "tx">) => number,
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

  /** A row the remote refuses (a trigger raises) until cured: a statement that fails for a while. */
  poison(wid: number): void {
    this.#poison.run(wid);
  }

  cure(wid: number): void {
    this.#cure.run(wid);
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
      this.#numbered.run(this.onCommit({ tenant: this.tenant, at, host, call, wids }));
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

/**
 * The remote databases of a world: one, or one per tenant (`remote-{tenant}.db`, a tenant template's)
 * — which the fault plan takes down for a while (every call and open refused), or drops (its file
 * gone: what it applied is lost with it, calls fail) and makes anew (its tables back, no ledger: the
 * drain must set that up again). Poisoned rows are refused in every one. Transactions are numbered
 * across them all.
 */
export class SimRemotes {
  readonly #remotes = new Map<string | null, SimRemote>();
  readonly #down = new Set<string>();
  readonly #poisoned = new Set<number>();
  #tx = 0;

  constructor(
    private readonly dir: string,
    /** The tenants (none: one remote, no template). */
    readonly tenants: readonly string[],
    private readonly tables: readonly string[],
    private readonly onCommit: (commit: Commit) => void,
    private readonly coalesce: boolean,
  ) {
    if (tenants.length === 0) this.#make(null);
    for (const tenant of tenants) this.#make(tenant);
  }

  /** The database `tenant`'s rows go to (null: the one remote); null while it is dropped. */
  of(tenant: string | null): SimRemote | null {
    return this.#remotes.get(tenant) ?? null;
  }

  /** Whether calls to `tenant`'s database are refused now: it is down or dropped. */
  unreachable(tenant: string | null): string | null {
    if (tenant === null) return null;
    if (this.#down.has(tenant)) return `tenant database "${tenant}" is down`;
    return this.#remotes.has(tenant) ? null : `tenant database "${tenant}" does not exist`;
  }

  down(tenant: string, down: boolean): void {
    if (down) this.#down.add(tenant);
    else this.#down.delete(tenant);
  }

  isDown(tenant: string): boolean {
    return this.#down.has(tenant);
  }

  /** Drops `tenant`'s database: its file and everything in it, the ledger too. */
  drop(tenant: string): void {
    const remote = this.#remotes.get(tenant);
    if (remote === undefined) return;
    remote.close();
    this.#remotes.delete(tenant);
    for (const suffix of ["", "-wal", "-shm"]) fs.rmSync(`${this.#file(tenant)}${suffix}`, { force: true });
  }

  /** Makes `tenant`'s database anew (its tables, as a provisioning script would; no ledger). */
  recreate(tenant: string): void {
    if (!this.#remotes.has(tenant)) this.#make(tenant);
  }

  poison(wid: number): void {
    this.#poisoned.add(wid);
    for (const remote of this.#remotes.values()) remote.poison(wid);
  }

  cure(wid: number): void {
    this.#poisoned.delete(wid);
    for (const remote of this.#remotes.values()) remote.cure(wid);
  }

  isPoisoned(wid: number): boolean {
    return this.#poisoned.has(wid);
  }

  get poisoned(): ReadonlySet<number> {
    return this.#poisoned;
  }

  close(): void {
    for (const remote of this.#remotes.values()) remote.close();
    this.#remotes.clear();
  }

  #file(tenant: string | null): string {
    return tenant === null ? remotePath(this.dir, false) : remotePath(this.dir, true).replace("{tenant}", tenant);
  }

  #make(tenant: string | null): void {
    const numbered = (commit: Omit<Commit, "tx">) => {
      const tx = ++this.#tx;
      this.onCommit({ tx, ...commit });
      return tx;
    };
    const remote = new SimRemote(this.#file(tenant), tenant, this.tables, numbered, this.coalesce);
    for (const wid of this.#poisoned) remote.poison(wid);
    this.#remotes.set(tenant, remote);
  }
}

/** The connection path of a world's remote: a tenant template's has `{tenant}` in it (see SimRemotes). */
export function remotePath(dir: string, tenants: boolean): string {
  return path.join(dir, tenants ? "remote-{tenant}.db" : "remote.db");
}
