// The invariants, each a checker of its own, apart from the workload: run as each remote
// transaction commits, as each batch goes out, at every tick, and at the end. Each compares the
// truth — the remote's rows and ledger, the queue files — with the world's own model (model.ts),
// and throws a Violation naming itself at the first step that breaks it.
import type { Database } from "bun:sqlite";
import { parseTimestamp } from "../../src/outbox/timestamp.ts";
import type { Statement } from "../../src/writers/writer.ts";
import { expectedApplied, type GroupModel, type Model, type RowModel, rowsMeet } from "./model.ts";
import type { Commit, SimRemotes } from "./remote.ts";

/** Every invariant the checkers hold, by name (each counts its checks). */
export const INVARIANTS = [
  "exactly-once",
  "whole-groups",
  "lane-order",
  "ledger",
  "backoff",
  "dead-letters",
  "free-lanes-advance",
  "drained",
] as const;
export type Invariant = (typeof INVARIANTS)[number];

/** An invariant broken: which, how, and the known issue (see KNOWN) that explains it, if one does. */
export class Violation extends Error {
  constructor(
    readonly invariant: Invariant,
    message: string,
    readonly known: KnownIssue | null = null,
  ) {
    super(`${invariant}: ${message}${known === null ? "" : ` [known: ${known}: ${KNOWN[known]}]`}`);
  }
}

/** A host as the checkers see it. */
export interface HostView {
  index: number;
  tables: ReadonlyArray<{ name: string; lanes: number; file: string }>;
  maxAttempts: number | null;
  batchSize: number;
  /** Its writer keeps batches in flight behind each other. */
  readonly concurrent: boolean;
  /** A drain process runs on the host. */
  readonly live: boolean;
  /** When the host's drain was last disturbed (a crash, a start, an outage, a lost or slow call): virtual ms. */
  readonly calmSince: number;
  /** A read-only connection to one of its queue files. */
  read(file: string): Database;
  /** The file that holds `table`. */
  fileOf(table: string): string;
}

/** What the checkers read of the world. */
export interface WorldView {
  model: Model;
  remotes: SimRemotes;
  hosts: readonly HostView[];
  readonly now: number;
  /**
   * When `tenant`'s database was last disturbed (down, dropped, made anew, a call refused), or will
   * be undisturbed again; null while it is down or dropped (its rows cannot go).
   */
  tenantCalmSince(tenant: string): number | null;
  /** How long a batch may take, both ways, when nothing goes wrong (ms). */
  roundTripMs: number;
}

/**
 * Known issues of the drain the simulator found, reported and not fixed yet: a violation one of them
 * explains ends its seed counted under the issue's name instead of failing it — unless the run is
 * strict (`--strict`), as it will be once they are fixed. Each entry goes when its fix lands. None
 * now: the last two (skip-in-flight, late-commit-dead: a dead letter the remote applied) were fixed
 * by letters that say what the remote may have done with them.
 */
export const KNOWN: Readonly<Record<string, string>> = {};
export type KnownIssue = string;

/** What a letter says the remote may have done with its row (see LetterRemote). */
type Remote = "not applied" | "in doubt" | "applied";

export class Checkers {
  readonly counts = Object.fromEntries(INVARIANTS.map((i) => [i, 0])) as Record<Invariant, number>;
  /** Origin id → host, learned from the fences the drains send. */
  readonly #origins = new Map<string, number>();
  /** Dead letters seen, by `host/namespace/seq`: the row each is of (its seq changes when it is replayed). */
  readonly #letters = new Map<string, RowModel>();
  /** When each group became free to go (see #free), by gid. */
  readonly #freeSince = new Map<number, number>();
  /** The rows each call carries (with the seq each had when sent), until it reaches the remote (or is refused, or rolled back). */
  readonly #carried = new Map<number, Array<{ row: RowModel; seq: number }>>();

  constructor(private readonly world: WorldView) {}

  // ── as a remote transaction commits ───────────────────────────────────────────────────────

  commit(commit: Commit): void {
    const { model } = this.world;
    const position = new Map(commit.wids.map((w, i) => [w, i]));
    // A call sent before its rows were dead-lettered and replayed (new seqs) lands them all the same.
    for (const { row, seq } of this.#carried.get(commit.call) ?? [])
      if (position.has(row.wid) && seq !== row.seq)
        throw new Violation(
          "dead-letters",
          `tx ${commit.tx} applied wid ${row.wid} as seq ${seq} of a call sent before it was dead-lettered (${row.deadBy ?? "?"}) and replayed as seq ${row.seq}: its letter was replayed while the remote could still apply it`,
        );
    for (const wid of commit.wids) {
      const row = model.rows.get(wid);
      if (row === undefined)
        throw new Violation("exactly-once", `tx ${commit.tx} applied wid ${wid}, which no producer made`);
      this.counts["exactly-once"]++;
      if (row.applied > 0)
        throw new Violation(
          "exactly-once",
          `wid ${wid} (host ${row.host} ${row.table} seq ${row.seq}) applied again by tx ${commit.tx}, first by tx ${row.appliedTx}`,
        );
      // A batch that carried it before it died may commit after: only while its letter says in doubt.
      if (row.state !== "queued") {
        this.counts["dead-letters"]++;
        const remote = row.state === "dead" ? this.#remoteOf(row) : row.remote;
        if (remote !== "in doubt")
          throw new Violation(
            "dead-letters",
            `tx ${commit.tx} applied wid ${wid} (${row.table} seq ${row.seq}), which is ${row.state} locally (${row.deadBy ?? "?"}) and whose letter says ${remote ?? "nothing"}, not in doubt`,
          );
      }
    }
    for (const wid of commit.wids) {
      const row = model.rows.get(wid)!;
      this.counts["whole-groups"]++;
      const group = model.groups.get(row.gid)!;
      // (A row lost with a dropped tenant database was applied with its group there: the rest may follow alone.)
      const missing = group.wids.filter((w) => !position.has(w) && !model.rows.get(w)!.lost);
      if (missing.length > 0)
        throw new Violation(
          "whole-groups",
          `tx ${commit.tx} applied wid ${wid} of group ${group.gid} (${group.wids.join(",")}) without wids ${missing.join(",")}: half a group on the remote`,
        );
      this.#order(row, commit, position);
    }
    for (const wid of commit.wids) {
      const row = model.rows.get(wid)!;
      row.applied += 1;
      row.appliedSeq = row.seq;
      row.appliedTx = commit.tx;
    }
    this.#ledger(commit.host, commit.tenant);
  }

  /** Every row before `row` in a lane it shares (or across all, a barrier) was applied before it, or is gone from its queue. */
  #order(row: RowModel, commit: Commit, position: ReadonlyMap<number, number>): void {
    const { model } = this.world;
    const mine = position.get(row.wid)!;
    for (const other of model.rowsOf(row.host, row.table)) {
      if (other === row || other.seq > row.seq || !rowsMeet(other, row)) continue;
      this.counts["lane-order"]++;
      // (A row lost with a dropped tenant database was delivered there, before: it may go again or not.)
      if (other.applied > 0 || other.lost) continue;
      const at = position.get(other.wid);
      if (at !== undefined && at < mine) continue;
      if (other.state !== "queued" || !this.#stillQueued(other)) continue;
      throw new Violation(
        "lane-order",
        `tx ${commit.tx} applied wid ${row.wid} (host ${row.host} ${row.table} seq ${row.seq} lane ${row.lane}) before wid ${other.wid} (seq ${other.seq} lane ${other.lane}), still queued ${at === undefined ? "and not in it" : "later in it"}`,
      );
    }
  }

  /** Whether a row the model thinks queued still is; if not, the drain dead-lettered it: the model learns so. */
  #stillQueued(row: RowModel): boolean {
    if (this.#inQueue(row)) return true;
    this.deadLetters();
    return row.state === "queued";
  }

  /** Whether the row (at its seq now) is in its queue, not yet confirmed. */
  #inQueue(row: RowModel): boolean {
    const host = this.world.hosts[row.host]!;
    const db = host.read(host.fileOf(row.table));
    return (
      db.query("SELECT 1 FROM outbox_queue WHERE seq = ? AND namespace = ? AND synced = 0").get(row.seq, row.table) !==
      null
    );
  }

  /**
   * The ledger of each origin of `host` (in `tenant`'s database) says exactly the highest seq applied
   * there in each of its rows (a table's, or a lane's).
   */
  #ledger(host: number, tenant: string | null): void {
    const { model, remotes } = this.world;
    const view = this.world.hosts[host]!;
    for (const entry of remotes.of(tenant)?.ledger() ?? []) {
      if (this.#origins.get(entry.origin) !== host) continue;
      this.counts.ledger++;
      const [table, laneText] = entry.namespace.split("#") as [string, string | undefined];
      const lanes = view.tables.find((t) => t.name === table)?.lanes ?? 1;
      const lane = laneText === undefined ? (lanes === 1 ? 0 : null) : Number(laneText);
      let highest = 0;
      for (const row of model.rowsOf(host, table))
        if (row.applied > 0 && row.lane === lane && row.tenant === tenant) highest = Math.max(highest, row.appliedSeq!);
      if (entry.through !== highest)
        throw new Violation(
          "ledger",
          `host ${host}'s ledger row ${entry.namespace}${tenant === null ? "" : ` of tenant ${tenant}`} says through ${entry.through}, but the highest seq applied in it is ${highest}`,
        );
    }
  }

  // ── as a batch goes out ───────────────────────────────────────────────────────────────────

  /** A drain of `host` sends `stmts` in `call`: learn its origins; no group goes while its backoff runs. */
  sent(host: number, call: number, stmts: readonly Statement[]): void {
    const { model } = this.world;
    const view = this.world.hosts[host]!;
    const groups = new Set<GroupModel>();
    const carried: Array<{ row: RowModel; seq: number }> = [];
    this.#carried.set(call, carried);
    for (const stmt of stmts) {
      if (stmt.fence) {
        this.#origins.set(String(stmt.args[0]), host);
        continue;
      }
      if (stmt.seq === 0) continue;
      const row = model.bySeq(host, stmt.namespace, stmt.seq);
      if (row === undefined) continue;
      row.sends += 1;
      row.inFlight += 1;
      carried.push({ row, seq: row.seq });
      groups.add(model.groups.get(row.gid)!);
    }
    for (const group of groups) {
      this.counts.backoff++;
      const until = this.#backoffUntil(view, group);
      if (until !== null && until > this.world.now)
        throw new Violation(
          "backoff",
          `host ${host} sent group ${group.gid} (wids ${group.wids.join(",")}) ${until - this.world.now} ms before its backoff ends`,
        );
    }
  }

  /** A call reached the remote, or never will (refused, rolled back with a crashed process). */
  landed(call: number): void {
    for (const { row } of this.#carried.get(call) ?? []) row.inFlight -= 1;
    this.#carried.delete(call);
  }

  /** When the group's backoff ends (the latest next_attempt_at of its rows), or null. */
  #backoffUntil(view: HostView, group: GroupModel): number | null {
    let until: number | null = null;
    for (const wid of group.wids) {
      const row = this.world.model.rows.get(wid)!;
      const next = view
        .read(view.fileOf(row.table))
        .query<{ next: string | null }, [number, string]>(
          "SELECT next_attempt_at AS next FROM outbox_queue WHERE seq = ? AND namespace = ?",
        )
        .get(row.seq, row.table)?.next;
      const at = parseTimestamp(next ?? null);
      if (at !== null) until = Math.max(until ?? at, at);
    }
    return until;
  }

  // ── at every tick ─────────────────────────────────────────────────────────────────────────

  tick(): void {
    this.deadLetters();
    this.#freeLanes();
  }

  /**
   * Every dead letter: moved by the drain after max_attempts sends (or skipped by the operator);
   * one whose row the remote applied as that seq says so or says in doubt, never "not applied", and
   * one that says "applied" was. The model learns what is dead, and what each letter says.
   */
  deadLetters(): void {
    const { model } = this.world;
    for (const view of this.world.hosts) {
      for (const file of new Set(view.tables.map((t) => t.file))) {
        const letters = view
          .read(file)
          .query<{ seq: number; namespace: string; reason: string; replayed: string | null; remote: Remote }, []>(
            "SELECT seq, namespace, reason, replayed_at AS replayed, coalesce(remote, 'not applied') AS remote FROM outbox_dead_log",
          )
          .all();
        for (const letter of letters) {
          const key = `${view.index}/${letter.namespace}/${letter.seq}`;
          const seen = this.#letters.get(key);
          if (seen !== undefined) {
            this.#says(seen, letter, view.index);
            continue;
          }
          this.counts["dead-letters"]++;
          const row = model.bySeq(view.index, letter.namespace, letter.seq);
          if (row === undefined)
            throw new Violation(
              "dead-letters",
              `host ${view.index} dead-lettered ${letter.namespace} seq ${letter.seq}, no row of the workload`,
            );
          this.#letters.set(key, row);
          if (letter.reason === "max_attempts" && view.maxAttempts !== null) {
            const sends = Math.max(...model.groupOf(row).map((r) => r.sends));
            if (sends < view.maxAttempts)
              throw new Violation(
                "dead-letters",
                `host ${view.index} dead-lettered wid ${row.wid} after ${sends} sends, max_attempts ${view.maxAttempts}`,
              );
          } else if (letter.reason !== "skipped" && letter.reason !== "max_attempts")
            throw new Violation("dead-letters", `host ${view.index} dead-lettered wid ${row.wid}: ${letter.reason}`);
          if (row.state === "queued" && letter.replayed === null) {
            row.state = "dead";
            row.deadBy = letter.reason === "skipped" ? "operator" : "drain";
          }
          this.#says(row, letter, view.index);
        }
      }
    }
  }

  /**
   * What a letter of `row` says of the remote is true as far as the world knows: applied as the
   * letter's seq → not "not applied"; "applied" → applied as that seq. The model keeps what its
   * current letter says.
   */
  #says(row: RowModel, letter: { seq: number; replayed: string | null; remote: Remote }, host: number): void {
    const appliedAsThis = row.applied > 0 && row.appliedSeq === letter.seq;
    if (letter.remote === "not applied" && appliedAsThis)
      throw new Violation(
        "dead-letters",
        `host ${host}'s letter ${row.table} seq ${letter.seq} (wid ${row.wid}) says not applied, but tx ${row.appliedTx} applied it as that seq: a replay would apply it twice`,
      );
    if (letter.remote === "applied" && !appliedAsThis && !row.lost)
      throw new Violation(
        "dead-letters",
        `host ${host}'s letter ${row.table} seq ${letter.seq} (wid ${row.wid}) says applied, but the remote never applied it as that seq${row.applied > 0 ? ` (tx ${row.appliedTx} applied it as seq ${row.appliedSeq})` : ""}`,
      );
    if (row.seq === letter.seq && row.state === "dead" && letter.replayed === null) row.remote = letter.remote;
  }

  /** What the letter of a dead row says now, read from its file. */
  #remoteOf(row: RowModel): Remote | null {
    const host = this.world.hosts[row.host]!;
    return (
      host
        .read(host.fileOf(row.table))
        .query<{ remote: Remote }, [number, string]>(
          "SELECT coalesce(remote, 'not applied') AS remote FROM outbox_dead_log WHERE seq = ? AND namespace = ?",
        )
        .get(row.seq, row.table)?.remote ?? null
    );
  }

  /**
   * The operator replayed letters of `host` (`namespace` and old seq each): none of a row the
   * remote applied as that seq — a replay applies it a second time.
   */
  replayed(host: number, letters: ReadonlyArray<{ namespace: string; seq: number }>): void {
    for (const letter of letters) {
      const row = this.#letters.get(`${host}/${letter.namespace}/${letter.seq}`);
      this.counts["dead-letters"]++;
      if (row !== undefined && row.applied > 0 && row.appliedSeq === letter.seq)
        throw new Violation(
          "dead-letters",
          `host ${host}'s letter ${letter.namespace} seq ${letter.seq} (wid ${row.wid}) was replayed, but tx ${row.appliedTx} applied it as that seq`,
        );
    }
  }

  /**
   * While a lane is held, the others advance: a group free to go — every row the first still
   * queued of each lane it is in, none poisoned, not backing off, its host's drain up and
   * undisturbed — is applied within a bound that grows with the rows ahead of it.
   */
  #freeLanes(): void {
    const { model, now } = this.world;
    const free = new Set<number>();
    for (const group of model.groups.values()) {
      if (!this.#free(group)) continue;
      free.add(group.gid);
      if (!this.#freeSince.has(group.gid)) this.#freeSince.set(group.gid, now);
    }
    for (const gid of this.#freeSince.keys()) if (!free.has(gid)) this.#freeSince.delete(gid);
    for (const gid of free) {
      const group = model.groups.get(gid)!;
      const view = this.world.hosts[group.host]!;
      const tenant = model.rows.get(group.wids[0]!)!.tenant;
      const since = Math.max(
        this.#freeSince.get(gid)!,
        view.calmSince,
        tenant === null ? 0 : this.world.tenantCalmSince(tenant)!,
      );
      this.counts["free-lanes-advance"]++;
      if (now - since <= this.#bound(group, view)) continue;
      const until = this.#backoffUntil(view, group);
      if (until !== null && until > since) {
        this.#freeSince.set(gid, until); // backing off: free from then on
        continue;
      }
      throw new Violation(
        "free-lanes-advance",
        `group ${gid} of host ${group.host} (wids ${group.wids.join(",")}, tables ${[...group.tables].join(",")}) free to go for ${now - since} ms, not applied`,
      );
    }
  }

  /** Whether a group is free to go now, as far as the model knows (backoffs are read only when it matters). */
  #free(group: GroupModel): boolean {
    const { model, remotes } = this.world;
    const view = this.world.hosts[group.host]!;
    if (!view.live) return false;
    const rows = group.wids.map((w) => model.rows.get(w)!);
    if (rows.some((r) => r.state !== "queued" || r.applied > 0 || r.lost || remotes.isPoisoned(r.wid))) return false;
    const tenant = rows[0]!.tenant;
    if (tenant !== null && this.world.tenantCalmSince(tenant) === null) return false;
    return rows.every((row) => this.#heads(row, group));
  }

  /** Whether no row of another group is still queued before `row` in a lane it meets. */
  #heads(row: RowModel, group: GroupModel): boolean {
    for (const other of this.world.model.rowsOf(row.host, row.table)) {
      if (other.gid === group.gid || other.seq > row.seq || other.applied > 0 || other.state !== "queued") continue;
      if (other.lost) continue; // delivered to a dropped database: it may go again first, or not at all
      if (rowsMeet(other, row)) return false;
    }
    return true;
  }

  /** How long a free group may wait: a few rounds, plus a round per batch of rows queued ahead of it in its tables. */
  #bound(group: GroupModel, view: HostView): number {
    const { model } = this.world;
    let ahead = 0;
    for (const table of group.tables) {
      const first = Math.min(
        ...group.wids
          .map((w) => model.rows.get(w)!)
          .filter((r) => r.table === table)
          .map((r) => r.seq),
      );
      for (const row of model.rowsOf(group.host, table))
        if (row.seq < first && row.applied === 0 && row.state === "queued") ahead++;
    }
    const round = this.world.roundTripMs;
    return 1_000 + round * (4 + Math.ceil(ahead / view.batchSize));
  }

  // ── at the end ────────────────────────────────────────────────────────────────────────────

  /**
   * Every row applied exactly once, except those the operator gave up (never) and those whose
   * letter is left in doubt (once or never: a replay is refused, the operator decides).
   */
  end(): void {
    this.deadLetters();
    for (const row of this.world.model.rows.values()) {
      this.counts["exactly-once"]++;
      const expected = expectedApplied(row);
      if (expected === null ? row.applied > 1 : row.applied !== expected)
        throw new Violation(
          "exactly-once",
          `wid ${row.wid} (host ${row.host} ${row.table} seq ${row.seq}, ${row.state}${row.remote === null ? "" : `, letter ${row.remote}`}) applied ${row.applied} times at the end, expected ${expected ?? "at most once"}`,
        );
    }
  }
}
