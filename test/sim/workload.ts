// The seeded workload and operator: producers push single rows, pushMany groups, transactions
// (across tables in a db_file) and barrier rows (no key in a table with lanes), through the real
// SQLMiddleware; the operator kicks, skips a head, replays and purges dead letters with the same
// library calls the CLI makes. Every change to a queue file is reported to the drains' watchers,
// and to the model, which is how the checkers know what was produced and what became of it.
import { retryBackedOffHeads, withOutbox } from "../../src/outbox/outbox.ts";
import type { Host } from "./host.ts";
import { type Model, oracleLane, type RowModel } from "./model.ts";
import type { Random } from "./random.ts";
import { ROW_SQL } from "./remote.ts";
import type { Trace } from "./trace.ts";

/** The keys rows are pushed with: few, so lanes meet. */
const KEYS = ["k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"];

/** What the workload and the operator reach of the world. */
export interface WorkloadWorld {
  readonly now: number;
  model: Model;
  trace: Trace;
  /** A producer or the operator committed to `file`. */
  committed(file: string): void;
  /** The checkers look at the dead letters as they are, before the operator changes them. */
  beforeOperator(): void;
  /** The operator replayed these letters of `host` (their old seqs), and a replay refused `refused` letters. */
  replayed(host: number, letters: ReadonlyArray<{ namespace: string; seq: number }>, refused: number): void;
  /** A row was made (not committed yet): the fault plan may poison it. */
  made(wid: number): void;
}

type Row = { wid: number; table: string; key: string | null; lane: number | null; tenant: string | null; seq: number };

export class Workload {
  constructor(
    private readonly world: WorkloadWorld,
    private readonly random: Random,
    private readonly weights: Readonly<Record<"push" | "pushMany" | "transaction" | "barrier", number>>,
  ) {}

  /** One producer action on `host`, drawn from the seed. */
  produce(host: Host): void {
    const { random } = this;
    const kind = random.weighted(this.weights);
    const rows: Row[] = [];
    const table = random.pick(host.tables);
    // With tenants, each action's rows go to one tenant's database (a transaction is one tenant's).
    const tenant = host.tenants.length > 0 ? random.pick(host.tenants) : null;
    const options = (k: string | null) =>
      k === null && tenant === null
        ? undefined
        : { ...(k === null ? {} : { key: k }), ...(tenant === null ? {} : { tenant }) };
    const make = (name: string, key: string | null): { sql: string; args: Array<string | number>; row: Row } => {
      const lanes = host.tables.find((t) => t.name === name)!.lanes;
      const wid = this.world.model.wid();
      this.world.made(wid);
      const keyed = key !== null && random.chance(0.7);
      return {
        sql: keyed ? ROW_SQL.keyed(name) : ROW_SQL.plain(name),
        args: keyed ? [wid, key, random.int(0, 999)] : [wid, random.int(0, 999)],
        row: { wid, table: name, key, lane: oracleLane(key, lanes), tenant, seq: 0 },
      };
    };
    const key = () => (random.chance(0.1) ? null : random.pick(KEYS));
    switch (kind) {
      case "push":
      case "barrier": {
        const k = kind === "barrier" ? null : key();
        const { sql, args, row } = make(table.name, k);
        row.seq = host.producer.push(table.name, sql, args, options(k));
        rows.push(row);
        break;
      }
      case "pushMany": {
        const k = key();
        const made = Array.from({ length: random.int(2, 4) }, () => make(table.name, k));
        const seqs = host.producer.pushMany(
          table.name,
          made.map((m) => [m.sql, m.args] as const),
          options(k),
        );
        made.forEach((m, i) => {
          m.row.seq = seqs[i]!;
          rows.push(m.row);
        });
        break;
      }
      case "transaction": {
        // Across tables only in a db_file: one file per table refuses it.
        const count = random.int(2, 4);
        host.producer.transaction(
          () => {
            for (let i = 0; i < count; i++) {
              const t = host.dbFile ? random.pick(host.tables) : table;
              const k = key();
              const { sql, args, row } = make(t.name, k);
              row.seq = host.producer.push(t.name, sql, args, k === null ? undefined : { key: k });
              rows.push(row);
            }
          },
          tenant === null ? undefined : { tenant },
        );
        break;
      }
    }
    const group = this.world.model.produced(host.index, rows);
    this.world.trace.add(
      `h${host.index} ${kind} g${group.gid}${tenant === null ? "" : ` @${tenant}`}: ${rows.map((r) => `${r.table}#${r.seq}=w${r.wid}${r.key === null ? "" : `/${r.key}`}`).join(" ")}`,
    );
    for (const file of new Set(rows.map((r) => host.fileOf(r.table)))) this.world.committed(file);
  }

  // ── the operator ──────────────────────────────────────────────────────────────────────────

  /** One operator action on `host`, drawn from the seed. */
  operate(host: Host): void {
    const action = this.random.weighted({ kick: 3, skip: 2, replay: 3, purge: 1 });
    this.world.beforeOperator();
    if (action === "kick") this.kick(host);
    else if (action === "skip") this.skip(host);
    else if (action === "replay") this.replay(host, false);
    else this.purge(host);
  }

  /** `sqloutbox kick`: every backed-off head retried now, and the drain told (SIGUSR2). */
  kick(host: Host): void {
    const retried = host.files.flatMap((file) => retryBackedOffHeads(file));
    if (host.live) host.process!.service.retryNow();
    this.world.trace.add(`operator kicks h${host.index}: ${retried.map((r) => `${r.namespace}#${r.seq}`).join(" ")}`);
    for (const file of host.files) this.world.committed(file);
  }

  /** `sqloutbox skip`: a table's head (and its group) moved to the dead letters. */
  skip(host: Host): void {
    const table = this.random.pick(host.tables);
    const moved = withOutbox(table.file, table.name, (outbox) => {
      const head = outbox.head();
      return head === null ? null : outbox.skipHead(head.seq);
    });
    if (moved === null) return;
    const rows = moved.seqs.map((seq) => this.#rowAt(host, table.file, seq)).filter((r) => r !== undefined);
    for (const row of rows) {
      row.state = "dead";
      row.deadBy = "operator";
    }
    this.world.trace.add(`operator skips h${host.index} ${table.name}: ${rows.map((r) => `w${r.wid}`).join(" ")}`);
    this.world.committed(table.file);
  }

  /**
   * `sqloutbox dead-letter replay`: one dead letter (with its group) — or, `all`, every one not yet
   * replayed. Letters the remote applied or may have are refused (the operator cannot know better:
   * no --force here), and counted.
   */
  replay(host: Host, all: boolean): void {
    this.world.beforeOperator();
    for (const table of host.tables) {
      const letters = withOutbox(table.file, table.name, (outbox) => outbox.listDead()).filter(
        (l) => l.replayedAt === null,
      );
      if (letters.length === 0) continue;
      const chosen = all ? letters.map((l) => l.seq) : [this.random.pick(letters).seq];
      const { replayed, refused } = withOutbox(table.file, table.name, (outbox) => outbox.replayDeadMany(chosen));
      this.world.replayed(host.index, replayed, refused.length);
      const moved: string[] = [];
      for (const r of replayed) {
        const row = this.world.model.bySeq(host.index, r.namespace, r.seq);
        if (row === undefined) continue;
        this.world.model.resequenced(row, r.newSeq);
        moved.push(`w${row.wid}:${r.seq}->${r.newSeq}`);
      }
      const kept = refused.map((r) => `${r.namespace}#${r.seq} ${r.remote}`);
      this.world.trace.add(
        `operator replays h${host.index} ${table.name}: ${moved.join(" ")}${kept.length > 0 ? ` (refused: ${kept.join(", ")})` : ""}`,
      );
      this.world.committed(table.file);
      if (!all) return;
    }
  }

  /** `sqloutbox dead-letter purge`: letters dead before now — sometimes unreplayed ones too, whose rows are given up. */
  purge(host: Host): void {
    const unreplayed = this.random.chance(0.3);
    const before = new Date(this.world.now);
    for (const table of host.tables) {
      const { purged } = withOutbox(table.file, table.name, (outbox) => outbox.purgeDead({ before, unreplayed }));
      const given: string[] = [];
      for (const letter of purged) {
        if (letter.replayedAt !== null) continue;
        const row = this.world.model.bySeq(host.index, letter.namespace, letter.seq);
        if (row === undefined) continue;
        row.state = "given-up";
        given.push(`w${row.wid}`);
      }
      this.world.trace.add(
        `operator purges h${host.index} ${table.name}${unreplayed ? " (unreplayed too)" : ""}: ${purged.length} letters${given.length ? `, gave up ${given.join(" ")}` : ""}`,
      );
      this.world.committed(table.file);
    }
  }

  /** The workload's row that has `seq` in `file` now (seqs are per file: a db_file's tables share them). */
  #rowAt(host: Host, file: string, seq: number): RowModel | undefined {
    for (const t of host.tables) {
      if (t.file !== file) continue;
      const row = this.world.model.bySeq(host.index, t.name, seq);
      if (row !== undefined) return row;
    }
    return undefined;
  }
}
