// What the world knows independently of the drain: every row the workload produced (its host, table,
// key, group and current seq), what became of it locally (queued, dead, given up) and remotely
// (applied, by which transaction, when). The checkers compare the remote and the queue files with
// this, never with what the drain said.

/** A row's lane as the spec defines it, computed here on its own: FNV-1a (32 bits) over the key's UTF-8 bytes, modulo the lanes; null for a row without a key (a barrier). */
export function oracleLane(key: string | null, lanes: number): number | null {
  if (lanes === 1) return 0;
  if (key === null) return null;
  let hash = 0x811c9dc5;
  for (const byte of new TextEncoder().encode(key)) hash = Math.imul(hash ^ byte, 0x01000193) >>> 0;
  return hash % lanes;
}

/** Whether two rows' lanes meet: the same lane, or either is a barrier. */
export function lanesMeet(a: number | null, b: number | null): boolean {
  return a === null || b === null || a === b;
}

/** Whether two rows of a table keep their order: the same tenant (or none), lanes that meet. */
export function rowsMeet(a: RowModel, b: RowModel): boolean {
  return a.tenant === b.tenant && lanesMeet(a.lane, b.lane);
}

export type RowState = "queued" | "dead" | "given-up";

export interface RowModel {
  wid: number;
  host: number;
  table: string;
  key: string | null;
  lane: number | null;
  /** The tenant whose database it goes to (null: no tenant template). */
  tenant: string | null;
  gid: number;
  /** The seq the row has in its queue now (a replay gives it a new one). */
  seq: number;
  state: RowState;
  /** Who moved it to the dead letters last (kept after a replay): the operator (skip) or the drain (max_attempts). */
  deadBy: "operator" | "drain" | null;
  /** Times the drain sent it (a call to the writer carried it). */
  sends: number;
  /** Calls carrying it that have not reached the remote yet (nor been refused or rolled back). */
  inFlight: number;
  /**
   * While it is dead (or given up): what its letter said the remote may have done with it, as last
   * read from its queue file (see LetterRemote); null while queued. Kept when the letter is purged.
   */
  remote: "not applied" | "in doubt" | "applied" | null;
  /** Remote transactions that applied it. */
  applied: number;
  /** The seq it carried when applied, and where in the remote's order. */
  appliedSeq: number | null;
  appliedTx: number | null;
  /** Replays of its dead letter. */
  replays: number;
  /**
   * Applied in a tenant database since dropped: lost with it (applied, appliedSeq and appliedTx
   * start over). Applied again in the database made anew if the drain had not confirmed it, or not.
   */
  lost: boolean;
}

export interface GroupModel {
  gid: number;
  host: number;
  wids: number[];
  tables: Set<string>;
}

/** Every produced row and group of a world. */
export class Model {
  readonly rows = new Map<number, RowModel>();
  readonly groups = new Map<number, GroupModel>();
  /** By host, table and seq: the row that has that seq now. */
  readonly #bySeq = new Map<string, RowModel>();
  /** By host and table, in the order made. */
  readonly #byTable = new Map<string, RowModel[]>();
  #nextWid = 1;
  #nextGid = 1;

  /** A fresh row id, unique across the world's hosts. */
  wid(): number {
    return this.#nextWid++;
  }

  /** Records a group of rows the workload committed: `rows` with their seqs. */
  produced(
    host: number,
    rows: ReadonlyArray<{
      wid: number;
      table: string;
      key: string | null;
      lane: number | null;
      tenant: string | null;
      seq: number;
    }>,
  ): GroupModel {
    const gid = this.#nextGid++;
    const group: GroupModel = { gid, host, wids: rows.map((r) => r.wid), tables: new Set(rows.map((r) => r.table)) };
    this.groups.set(gid, group);
    for (const r of rows) {
      const row: RowModel = {
        ...r,
        host,
        gid,
        state: "queued",
        deadBy: null,
        sends: 0,
        inFlight: 0,
        remote: null,
        applied: 0,
        appliedSeq: null,
        appliedTx: null,
        replays: 0,
        lost: false,
      };
      this.rows.set(r.wid, row);
      this.#bySeq.set(seqKey(host, r.table, r.seq), row);
      const key = `${host}/${r.table}`;
      const list = this.#byTable.get(key);
      if (list) list.push(row);
      else this.#byTable.set(key, [row]);
    }
    return group;
  }

  /** The row with this seq in that host's table now, if the workload made it. */
  bySeq(host: number, table: string, seq: number): RowModel | undefined {
    return this.#bySeq.get(seqKey(host, table, seq));
  }

  /** A replay gave the row a new seq; it is queued again. */
  resequenced(row: RowModel, seq: number): void {
    this.#bySeq.delete(seqKey(row.host, row.table, row.seq));
    row.seq = seq;
    row.state = "queued";
    row.remote = null;
    row.replays += 1;
    this.#bySeq.set(seqKey(row.host, row.table, seq), row);
  }

  /** `tenant`'s database was dropped: every row it had applied is lost with it (see RowModel.lost). */
  dropped(tenant: string): void {
    for (const row of this.rows.values()) {
      if (row.tenant !== tenant || row.applied === 0) continue;
      row.lost = true;
      row.applied = 0;
      row.appliedSeq = null;
      row.appliedTx = null;
    }
  }

  /** The rows of one host's table. */
  rowsOf(host: number, table: string): readonly RowModel[] {
    return this.#byTable.get(`${host}/${table}`) ?? [];
  }

  /** The rows of a row's group. */
  groupOf(row: RowModel): RowModel[] {
    return this.groups.get(row.gid)!.wids.map((w) => this.rows.get(w)!);
  }
}

function seqKey(host: number, table: string, seq: number): string {
  return `${host}/${table}/${seq}`;
}

/**
 * How many times a row must have been applied once the world drained: once, unless the operator
 * gave it up (never) — or its letter is left in doubt (the remote may have applied it: a replay is
 * refused, so once or never) or applied (once), or it was lost with a dropped tenant database
 * (once or never again). Null: either is right.
 */
export function expectedApplied(row: RowModel): number | null {
  if (row.lost) return null; // applied in a database since dropped: again in the new one, or not
  if (row.state === "queued") return 1;
  if (row.remote === "in doubt") return null;
  if (row.remote === "applied") return 1;
  return row.state === "given-up" ? 0 : 1;
}

/** Whether a row was applied as many times as expectedApplied says (once or never, where either is right). */
export function appliedAsExpected(row: RowModel): boolean {
  const expected = expectedApplied(row);
  return expected === null ? row.applied <= 1 : row.applied === expected;
}
