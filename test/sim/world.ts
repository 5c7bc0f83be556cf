// One simulated world, built and run from a seed: hosts with their queues, producers and drains, a
// shared remote, a fault plan, crashes and an operator — all on virtual time. A run is a number of
// steps (each a workload, fault, crash or operator action at a seeded moment), checked as it goes;
// then the faults end, the operator replays what is dead, and everything must drain within a bound,
// stop cleanly and verify clean.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { closeSharedOutboxes } from "../../src/outbox/middleware.ts";
import { verifyFile } from "../../src/outbox/inspect.ts";
import { Checkers, type Invariant, Violation } from "./checkers.ts";
import { DirWatches, type DrainProcess, Host, type HostWorld, type Tuning } from "./host.ts";
import { appliedAsExpected, Model } from "./model.ts";
import type { Profile } from "./profiles.ts";
import { Random } from "./random.ts";
import { type Commit, SimRemotes } from "./remote.ts";
import { EPOCH_MS, SimTime, SpinError } from "./time.ts";
import { Trace } from "./trace.ts";
import { Workload } from "./workload.ts";
import type { Fate, FaultRates, RemoteGate } from "./writer.ts";
import type { Statement } from "../../src/writers/writer.ts";

/** What one seed did. */
export interface RunResult {
  seed: number;
  profile: string;
  steps: number;
  hash: string;
  events: number;
  virtualMs: number;
  faults: Record<string, number>;
  crashes: number;
  checks: Record<Invariant, number>;
  /**
   * The rows left dead at the end, by what their letters say of the remote ("applied", or "in doubt"
   * and what the remote did; those "not applied" were replayed), and the replays refused on the way.
   */
  letters: Record<string, number>;
  known: Record<string, number>;
  failure: { invariant: string; message: string; trace: string[] } | null;
}

/** How long after the last step everything must have drained (virtual ms). */
const DRAIN_BOUND_MS = 120_000;
/** The checkers' tick (virtual ms). */
const TICK_MS = 200;
/**
 * How long a tenant's database is disturbed once back up (its outage backoff, capped at 0.6 s here),
 * or made anew (a hold for its missing ledger: 2 s, doubling with each batch that met it).
 */
const TENANT_UP_MS = 1_000;
const TENANT_REMADE_MS = 10_000;

export interface RunOptions {
  seed: number;
  profile: Profile;
  steps?: number;
  /** Print every trace line as it happens. */
  echo?: boolean;
  /** Known issues fail too (see KNOWN in checkers.ts). */
  strict?: boolean;
}

/** Where seeds keep their files: a tmpfs where there is one (a seed creates and fsyncs dozens of SQLite files). */
function simTmpdir(): string {
  const given = process.env.SQLOUTBOX_SIM_TMPDIR;
  if (given) return given;
  try {
    fs.accessSync("/dev/shm", fs.constants.W_OK);
    return "/dev/shm";
  } catch {
    return os.tmpdir();
  }
}

export async function runSeed(options: RunOptions): Promise<RunResult> {
  const world = new World(options);
  try {
    return await world.run();
  } finally {
    world.close();
  }
}

class World implements HostWorld {
  readonly random: Random;
  readonly time: SimTime;
  readonly trace: Trace;
  readonly model = new Model();
  readonly remotes: SimRemotes;
  readonly hosts: Host[] = [];
  readonly gate: RemoteGate = { down: false };
  readonly rates: FaultRates;
  readonly watches = new DirWatches();
  readonly locks = new Map<string, DrainProcess>();
  readonly checkers: Checkers;
  readonly dir: string;
  readonly faults: Record<string, number> = {};
  crashes = 0;
  #calls = 0;
  #streams = 0;
  #failure: Violation | Error | null = null;
  readonly #profile: Profile;
  readonly #steps: number;
  readonly #workload: Workload;
  readonly #plan: Random;
  readonly #watchRandom: Random;

  constructor(private readonly options: RunOptions) {
    const { seed, profile } = options;
    this.#profile = profile;
    this.#steps = options.steps ?? profile.steps;
    this.random = new Random(seed);
    this.time = new SimTime(this.random.fork(1));
    this.dir = fs.mkdtempSync(path.join(simTmpdir(), "sqloutbox-sim-"));
    const origins = new Map<string, string>();
    const mask = (line: string) =>
      line
        .replaceAll(this.dir, "<dir>")
        .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g, (o) => {
          if (!origins.has(o)) origins.set(o, `origin${origins.size + 1}`);
          return origins.get(o)!;
        });
    this.trace = new Trace(this.time, mask, options.echo ?? false);
    this.#plan = this.random.fork(2);
    this.#watchRandom = this.random.fork(3);
    this.#workload = new Workload(this, this.random.fork(4), profile.workload);
    this.rates = { ...profile.faults };
    const build = this.random.fork(5);
    const hostCount = build.int(...profile.hosts);
    const tableCount = build.int(...profile.tables);
    const names = Array.from({ length: tableCount }, (_, i) => `t${i}`);
    const tenants =
      profile.tenants[1] === 0 ? [] : Array.from({ length: build.int(...profile.tenants) }, (_, i) => `tenant-${i}`);
    this.remotes = new SimRemotes(this.dir, tenants, names, (commit) => this.#committed(commit), build.chance(0.5));
    for (let h = 0; h < hostCount; h++) {
      const tables = names.map((name) => ({ name, lanes: build.pick(profile.lanes) }));
      const concurrent = build.chance(profile.concurrent);
      const tuning: Tuning = {
        batchSize: build.int(2, 10),
        flushInterval: build.int(5, 50) / 1000,
        tableFlushThreshold: build.int(1, 3),
        maxAttempts: build.pick(profile.maxAttempts),
        backoffUnitSeconds: build.int(20, 200) / 1000,
        backoffCapMinutes: 0.02,
        outageBackoffCapMinutes: 0.01,
        writeTimeout: build.int(5, 20) / 10,
        cleanupEvery: build.int(4, 16),
        connections: build.pick(profile.connections),
        concurrent,
        pipelined: concurrent && build.chance(profile.pipelined),
        ...(tenants.length > 0 && { maxOpenTenants: build.pick(profile.maxOpenTenants) }),
      };
      this.hosts.push(new Host(h, this.dir, build.chance(profile.dbFile), tables, tuning, tenants));
    }
    this.checkers = new Checkers({
      model: this.model,
      remotes: this.remotes,
      hosts: this.hosts,
      get now() {
        return world.time.now;
      },
      tenantCalmSince: (tenant) =>
        this.remotes.unreachable(tenant) === null ? (this.#tenantCalm.get(tenant) ?? 0) : null,
      roundTripMs: 50 + 2 * profile.faults.latencyMs[1],
    });
    const world = this;
    for (const host of this.hosts)
      this.trace.add(
        `h${host.index}: ${host.dbFile ? "db_file" : "db_dir"}, ${host.tables.map((t) => `${t.name}/${t.lanes}`).join(" ")}, ${JSON.stringify(host.tuning)}${tenants.length > 0 ? `, tenants ${tenants.join(" ")}` : ""}`,
      );
  }

  get now(): number {
    return this.time.now;
  }

  stream(): Random {
    return this.random.fork(100 + this.#streams++);
  }

  nextCall(): number {
    return ++this.#calls;
  }

  readonly observer = {
    sent: (host: number, call: number, stmts: readonly Statement[], fate: Fate, answerAt: number, tenant?: string) => {
      const rows = stmts.filter((s) => s.seq > 0).map((s) => `${s.namespace}#${s.seq}`);
      const own = stmts.filter((s) => s.seq === 0 && !s.fence).length;
      this.trace.add(
        `h${host} call ${call}: ${rows.join(" ")}${own ? ` +${own} own` : ""}${fate === "ok" ? "" : ` (${fate})`}`,
      );
      if (tenant !== undefined) {
        // Refused by a tenant's database that is down or gone: that tenant alone is disturbed.
        this.faults["tenant refused"] = (this.faults["tenant refused"] ?? 0) + 1;
        this.#tenantDisturbed(tenant, answerAt);
      } else if (fate !== "ok") {
        this.faults[fate] = (this.faults[fate] ?? 0) + 1;
        // A refusal, a lost or slow answer (and the calls queued behind it on its connection): the
        // drain backs off, times out, settles — no lane is stalled meanwhile.
        const h = this.hosts[host]!;
        h.disturbed(answerAt);
      }
      this.#guard(() => this.checkers.sent(host, call, stmts));
    },
    fate: (host: number, call: number, what: string, crash = false) => {
      this.trace.add(`h${host} call ${call} ${what}`);
      this.checkers.landed(call);
      if (crash) this.faults["rolled back by a crash"] = (this.faults["rolled back by a crash"] ?? 0) + 1;
    },
  };

  beforeOperator(): void {
    this.#guard(() => this.checkers.deadLetters());
  }

  /** Replays refused (letters in doubt or applied): counted, not failed — the operator cannot know better. */
  refused = 0;

  replayed(host: number, letters: ReadonlyArray<{ namespace: string; seq: number }>, refused: number): void {
    this.refused += refused;
    this.#guard(() => this.checkers.replayed(host, letters));
  }

  /** A producer or the operator committed to `file`: the drains' watchers hear of it (or not). */
  committed(file: string): void {
    this.watches.committed(file, this.time, this.#watchRandom, this.#profile.watchDrop);
  }

  async run(): Promise<RunResult> {
    try {
      for (const host of this.hosts) host.start(this);
      this.#planSteps();
      this.#tick();
      this.#stepsLeft = this.#steps;
      await this.#runUntil(() => this.#stepsLeft === 0, this.now + 3_600_000);
      await this.#drainAll();
      this.#guard(() => this.checkers.end());
      this.#throwFailure();
      this.#countLetters();
    } catch (error) {
      // Anything else thrown out of the world (the drain threw where it never may, the simulator
      // broke) fails the seed too: a green run is one where nothing did.
      this.#failure ??= error instanceof Error ? error : new Error(String(error));
    }
    let failure = this.#failure;
    // The end of a failure's trace says where things stood: every queue, and each drain's view.
    if (failure !== null) for (const host of this.hosts) for (const line of host.describe()) this.trace.add(line, true);
    const known: Record<string, number> = {};
    if (failure instanceof Violation && failure.known !== null && !this.options.strict) {
      known[failure.known] = 1;
      failure = null;
    }
    return {
      seed: this.options.seed,
      profile: this.#profile.name,
      steps: this.#steps,
      hash: this.trace.hash,
      events: this.time.fired,
      virtualMs: this.now - EPOCH_MS,
      faults: this.faults,
      crashes: this.crashes,
      checks: this.checkers.counts,
      letters: this.#letters,
      known,
      failure:
        failure === null
          ? null
          : {
              invariant:
                failure instanceof Violation ? failure.invariant : failure instanceof SpinError ? "spin" : "error",
              message: failure.message,
              trace: this.trace.tail(),
            },
    };
  }

  #stepsLeft = 0;
  #letters: Record<string, number> = {};

  /** The rows left dead at the end, by what their letters say (see RunResult.letters). */
  #countLetters(): void {
    const letters: Record<string, number> = this.refused > 0 ? { "replays refused": this.refused } : {};
    for (const row of this.model.rows.values()) {
      if (row.remote === null || row.remote === "not applied") continue;
      // In doubt: applied after all (the drain could not tell), or not (a row an operator must --force)?
      const what = row.remote === "applied" ? "applied" : `in doubt, ${row.applied > 0 ? "applied" : "not applied"}`;
      letters[what] = (letters[what] ?? 0) + 1;
    }
    this.#letters = letters;
  }

  /** Schedules every step at its seeded moment. */
  #planSteps(): void {
    const plan = this.#plan;
    let at = this.now;
    for (let i = 0; i < this.#steps; i++) {
      at += plan.int(...this.#profile.gapMs);
      const action = plan.next();
      this.time.at(at, () => {
        this.#step(action);
        this.#stepsLeft -= 1;
      });
    }
  }

  /** One step: `x` in [0, 1) picks a fault, a crash, an operator action, or (most often) the workload. */
  #step(x: number): void {
    const p = this.#profile;
    const random = this.#plan;
    const host = random.pick(this.hosts);
    let edge = p.outage;
    if (x < edge) this.#outage(random.int(100, 3_000));
    else if (x < (edge += p.tenantFault)) this.#tenantFault(random);
    else if (x < (edge += p.poison)) this.#poison(random);
    else if (x < (edge += p.crash)) this.#crash(host, random.int(0, 400));
    else if (x < (edge += p.operator)) this.#workload.operate(host);
    else this.#workload.produce(host);
  }

  /** The remote refuses every call for `ms`. */
  #outage(ms: number): void {
    if (this.gate.down) return;
    this.gate.down = true;
    this.faults.outage = (this.faults.outage ?? 0) + 1;
    this.trace.add(`remote down for ${ms} ms`);
    for (const h of this.hosts) h.disturbed(this.now);
    this.time.after(ms, () => {
      this.gate.down = false;
      this.trace.add("remote up");
      for (const h of this.hosts) h.disturbed(this.now);
    });
  }

  /** When each tenant's database was last disturbed, or will be undisturbed again (see WorldView.tenantCalmSince). */
  readonly #tenantCalm = new Map<string, number>();

  #tenantDisturbed(tenant: string, until: number): void {
    this.#tenantCalm.set(tenant, Math.max(this.#tenantCalm.get(tenant) ?? 0, until));
  }

  /**
   * A tenant's database goes down for a while (every call and open refused), or is dropped — what it
   * applied lost with it — and made anew a while later, without the ledger.
   */
  #tenantFault(random: Random): void {
    const tenant = random.pick(this.remotes.tenants);
    if (this.remotes.unreachable(tenant) !== null) return;
    const ms = random.int(100, 3_000);
    if (random.chance(0.5)) {
      this.remotes.down(tenant, true);
      this.faults["tenant down"] = (this.faults["tenant down"] ?? 0) + 1;
      this.trace.add(`${tenant} down for ${ms} ms`);
      this.time.after(ms, () => this.#tenantUp(tenant));
      return;
    }
    this.remotes.drop(tenant);
    this.model.dropped(tenant);
    this.faults["tenant dropped"] = (this.faults["tenant dropped"] ?? 0) + 1;
    this.trace.add(`${tenant} dropped, made anew in ${ms} ms`);
    this.time.after(ms, () => this.#tenantUp(tenant));
  }

  /**
   * A tenant's database is back: up, or made anew. Its drain finds out when its backoff ends — after a
   * database made anew, a hold for its missing ledger too (doubling from 2 s): disturbed till then.
   */
  #tenantUp(tenant: string): void {
    const recreated = this.remotes.of(tenant) === null;
    if (recreated) this.remotes.recreate(tenant);
    this.remotes.down(tenant, false);
    this.trace.add(`${tenant} ${recreated ? "made anew" : "up"}`);
    this.#tenantDisturbed(tenant, this.now + (recreated ? TENANT_REMADE_MS : TENANT_UP_MS));
  }

  /**
   * A row the remote refuses for a while (its statement fails: the row's fault), or until the end:
   * one queued now, or the next one a producer makes (most rows are delivered within milliseconds,
   * so the queued ones are few).
   */
  #poison(random: Random): void {
    const queued = [...this.model.rows.values()].filter((r) => r.state === "queued" && r.applied === 0 && !r.lost);
    if (queued.length === 0 || random.chance(0.5)) {
      this.#poisonNext += 1;
      return;
    }
    this.poison(random.pick(queued).wid, random);
  }

  #poisonNext = 0;

  /** The workload made a row: poison it if a poison step asked for the next one. */
  made(wid: number): void {
    if (this.#poisonNext === 0) return;
    this.#poisonNext -= 1;
    this.poison(wid, this.#plan);
  }

  poison(wid: number, random: Random): void {
    if (this.remotes.isPoisoned(wid)) return;
    this.remotes.poison(wid);
    this.faults.poison = (this.faults.poison ?? 0) + 1;
    const ms = random.chance(0.3) ? null : random.int(200, 6_000);
    this.trace.add(`poison w${wid} ${ms === null ? "until the end" : `for ${ms} ms`}`);
    if (ms !== null)
      this.time.after(ms, () => {
        this.remotes.cure(wid);
        this.trace.add(`cure w${wid}`);
      });
  }

  /** The host's drain dies; a new one starts `restartMs` later. */
  #crash(host: Host, restartMs: number): void {
    const proc = host.process;
    if (proc === null || !proc.alive) return;
    proc.crash();
    this.crashes += 1;
    host.disturbed(this.now);
    this.time.after(restartMs, () => {
      if (host.process === proc) host.start(this);
    });
  }

  /** The checkers' tick, every TICK_MS while the world runs. */
  #tick(): void {
    this.time.after(TICK_MS, () => {
      this.#guard(() => this.checkers.tick());
      this.#tick();
    });
  }

  /**
   * The faults end: the remote is up and cures every row, calls go well; each host runs a drain;
   * the operator replays every dead letter (again and again: rows may still die of an earlier
   * failure) and kicks. Everything must then be applied and every queue empty within DRAIN_BOUND_MS.
   * Then each drain stops cleanly, and every file must verify.
   */
  async #drainAll(): Promise<void> {
    this.trace.add("faults end");
    Object.assign(this.rates, { refused: 0, slow: 0, dropped: 0, ambiguous: 0 });
    this.gate.down = false;
    for (const wid of [...this.remotes.poisoned]) this.remotes.cure(wid);
    for (const tenant of this.remotes.tenants) if (this.remotes.unreachable(tenant) !== null) this.#tenantUp(tenant);
    for (const host of this.hosts) if (!host.live) host.start(this);
    const deadline = this.now + DRAIN_BOUND_MS;
    const settle = () => {
      for (const host of this.hosts) {
        const count = (sql: string) =>
          host.files.reduce((n, f) => n + host.read(f).query<{ n: number }, []>(sql).get()!.n, 0);
        if (count("SELECT count(*) AS n FROM outbox_dead_log WHERE replayed_at IS NULL") > 0)
          this.#workload.replay(host, true);
        if (count("SELECT count(*) AS n FROM outbox_queue WHERE next_attempt_at IS NOT NULL") > 0)
          this.#workload.kick(host);
      }
    };
    settle();
    let every = 500;
    let cancel = () => {};
    const again = () => {
      cancel = this.time.after(every, () => {
        this.#guard(() => this.checkers.deadLetters());
        settle();
        every = Math.min(every * 2, 8_000);
        again();
      });
    };
    again();
    const settled = () => [...this.model.rows.values()].every(appliedAsExpected);
    const drained = () => {
      if (!settled() || !this.hosts.every((h) => h.tables.every((t) => h.pending(t.name) === 0))) return false;
      // What each letter says now (the drain may have settled one in doubt since the last look: it is replayed then).
      this.#guard(() => this.checkers.deadLetters());
      return settled();
    };
    const why = await this.#runUntil(drained, deadline);
    cancel();
    if (why !== "done") {
      const left = [...this.model.rows.values()].filter((r) => !appliedAsExpected(r));
      throw new Violation(
        "drained",
        `not drained ${DRAIN_BOUND_MS} ms after the faults ended (${why}): ${left.length} rows not applied as expected (${left
          .slice(0, 8)
          .map((r) => `w${r.wid} ${r.table}#${r.seq} ${r.state} applied ${r.applied}`)
          .join(", ")}), pending ${this.hosts.map((h) => h.tables.map((t) => h.pending(t.name)).join("/")).join(" ")}`,
      );
    }
    this.trace.add("drained");
    const stops = this.hosts.map((h) => h.process!.stop());
    let stopped = false;
    void Promise.all(stops).then(() => (stopped = true));
    if ((await this.#runUntil(() => stopped, this.now + 60_000)) !== "done")
      throw new Violation("drained", "a drain did not stop within 60 s");
    for (const host of this.hosts) {
      for (const t of host.tables) {
        this.checkers.counts.drained++;
        const pending = host.pending(t.name);
        if (pending !== 0)
          throw new Violation("drained", `h${host.index} ${t.name}: ${pending} rows still pending after stop`);
      }
      for (const file of host.files) {
        this.checkers.counts.drained++;
        const verified = verifyFile(file);
        if (!verified.ok)
          throw new Violation(
            "drained",
            `verify ${file.replace(this.dir, "<dir>")}: ${[...verified.problems, ...verified.namespaces.flatMap((n) => [...n.problems, ...n.gaps.map((g) => `gap ${g.seq}->${g.prevSeq}`)])].join("; ")}`,
          );
      }
    }
  }

  async #runUntil(done: () => boolean, deadline: number): Promise<"done" | "idle" | "deadline"> {
    const why = await this.time.run(
      () => this.#failure !== null || done(),
      deadline,
      () => {},
    );
    this.#throwFailure();
    return why;
  }

  #committed(commit: Commit): void {
    this.trace.add(`h${commit.host} call ${commit.call} tx ${commit.tx}: ${commit.wids.map((w) => `w${w}`).join(" ")}`);
    this.#guard(() => this.checkers.commit(commit));
  }

  /** Runs a check; the first violation stops the run (a check called from inside the drain must not throw into it). */
  #guard(check: () => void): void {
    if (this.#failure !== null) return;
    try {
      check();
    } catch (error) {
      this.#failure = error instanceof Error ? error : new Error(String(error));
    }
  }

  #throwFailure(): void {
    if (this.#failure !== null) throw this.#failure;
  }

  close(): void {
    for (const host of this.hosts) {
      if (host.process?.alive) host.process.crash();
      host.close();
    }
    closeSharedOutboxes();
    this.remotes.close();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
