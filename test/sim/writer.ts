// The writer one drain process talks to the simulated remote through: each call goes out on one of
// its connections, reaches the remote after a latency (in order on its connection, in any order
// across them) and is applied there at that instant, whole or not at all per unit; its answer comes
// back after another latency. The fault plan, drawn from the seed per call, decides what goes wrong:
// refused before sending, an answer that is slow (past write_timeout: the batch commits late), a
// connection dropped mid-batch (committed or not), a commit whose answer is lost.
import { WriteError } from "../../src/errors.ts";
import type { OutboxWriter, Statement, TenantWriters, WriteOptions, WriteResult } from "../../src/writers/writer.ts";
import type { Random } from "./random.ts";
import type { SimRemotes } from "./remote.ts";
import type { Owner, SimTime } from "./time.ts";

/** How often each fault strikes a call (0 … 1), and how slow slow is. */
export interface FaultRates {
  refused: number;
  slow: number;
  dropped: number;
  ambiguous: number;
  /** Latency of a healthy call each way (ms). */
  latencyMs: [number, number];
  /** A slow call's extra delay (ms): beyond write_timeout, so the drain gives up on it. */
  slowMs: [number, number];
}

/** What the world learns of a call as it happens. */
export interface CallObserver {
  /**
   * A batch went out (before the remote has it), to meet `fate`; its answer (or its loss) comes at
   * `answerAt` at the latest: the checks of what a drain may send. `tenant`: refused because that
   * tenant's database is down or dropped (it disturbs that tenant alone).
   */
  sent(host: number, call: number, stmts: readonly Statement[], fate: Fate, answerAt: number, tenant?: string): void;
  /** What became of it, in words, for the trace; `crash`: rolled back with the process that sent it. */
  fate(host: number, call: number, what: string, crash?: boolean): void;
}

/** The fault a call meets: none, or one of FaultRates'. */
export type Fate = "ok" | "refused" | "slow" | "dropped" | "ambiguous";

/** A call on its way: the remote applies it at `arrive` unless the process died before and it was not committing yet. */
interface InFlight {
  call: number;
  arrived: boolean;
  cancel: () => void;
  /** A crash of the process decides: the batch's COMMIT had gone out (it lands) or not (rolled back). */
  committing: boolean;
}

/** Whether the remote is reachable right now, for everyone: an outage window refuses every call. */
export interface RemoteGate {
  down: boolean;
}

/** What a writer reaches of its world. */
export interface WriterWorld {
  time: SimTime;
  remotes: SimRemotes;
  /** The fault rates now (the end of a run sets them to none). */
  rates: FaultRates;
  gate: RemoteGate;
  observer: CallObserver;
  /** The next call's number, across every writer of the world. */
  nextCall(): number;
}

/**
 * One drain process's writer (of the one remote, or of one tenant's database): `connections`
 * connections, each carrying one call (two when `pipelined`). `concurrent` and `pipelined` are what
 * the drain reads to keep batches in flight.
 */
export class SimWriter implements OutboxWriter {
  readonly dialect = "sqlite" as const;
  readonly concurrent: boolean;
  readonly pipelined: boolean;
  /** When the last call sent on each connection reaches the remote: a connection delivers in order. */
  readonly #lastArrival: number[];
  readonly #inFlight = new Set<InFlight>();
  #closed = false;

  readonly #world: WriterWorld;

  constructor(
    world: WriterWorld,
    private readonly process: Owner,
    private readonly host: number,
    private readonly random: Random,
    options: { connections: number; concurrent: boolean; pipelined: boolean },
    private readonly tenant: string | null = null,
  ) {
    this.#world = world;
    this.concurrent = options.concurrent;
    this.pipelined = options.pipelined;
    this.#lastArrival = new Array<number>(options.connections).fill(0);
  }

  writeBatch(stmts: Statement[], options?: WriteOptions): Promise<WriteResult[]> {
    if (this.#closed) return Promise.reject(new WriteError("sim writer: closed"));
    const { time, rates, gate, observer, remotes } = this.#world;
    const call = this.#world.nextCall();
    const { random } = this;
    const answer = Promise.withResolvers<WriteResult[]>();
    const unreachable = remotes.unreachable(this.tenant);
    if (unreachable !== null) {
      // The tenant's database is down or gone: refused at once, that tenant's fault alone.
      const at = time.now + random.int(0, 2);
      observer.sent(this.host, call, stmts, "refused", at, this.tenant!);
      time.at(at, () => answer.reject(new WriteError(`sim remote: ${unreachable}`)), this.process);
      observer.fate(this.host, call, `refused: ${unreachable}`);
      return answer.promise;
    }
    const fate: Fate = gate.down
      ? "refused"
      : random.weighted({
          ok: Math.max(0, 1 - rates.refused - rates.slow - rates.dropped - rates.ambiguous),
          refused: rates.refused,
          slow: rates.slow,
          dropped: rates.dropped,
          ambiguous: rates.ambiguous,
        });
    const fail = (what: string) => answer.reject(new WriteError(`sim remote: ${what}`));
    if (fate === "refused") {
      // Refused before anything was sent: the connection could not be had.
      const at = time.now + random.int(0, 2);
      observer.sent(this.host, call, stmts, fate, at);
      time.at(at, () => fail("connection refused"), this.process);
      observer.fate(this.host, call, "refused");
      return answer.promise;
    }
    const lat = () => random.int(rates.latencyMs[0], rates.latencyMs[1]);
    const slow = () => random.int(rates.slowMs[0], rates.slowMs[1]);
    // A slow call is slow on its way out or on its way back.
    const late = fate === "slow" ? (random.chance(0.5) ? "out" : "back") : null;
    // The least loaded connection takes it; it reaches the remote after the calls before it there.
    const conn = this.#lastArrival.indexOf(Math.min(...this.#lastArrival));
    const arriveAt = Math.max(time.now + lat() + (late === "out" ? slow() : 0), this.#lastArrival[conn]! + 1);
    const answerMs = lat() + (late === "back" ? slow() : 0);
    this.#lastArrival[conn] = arriveAt;
    observer.sent(this.host, call, stmts, fate, arriveAt + answerMs);
    // On its connection, every statement issued: what a concurrent writer tells the drain (WriteOptions.onSent).
    if (options?.onSent) time.after(random.int(0, 1), options.onSent, this.process);
    const flight: InFlight = { call, arrived: false, cancel: () => {}, committing: random.chance(0.5) };
    this.#inFlight.add(flight);
    flight.cancel = time.at(arriveAt, () => {
      flight.arrived = true;
      this.#inFlight.delete(flight);
      void this.#arrive(stmts, call, fate, answer, answerMs);
    });
    return answer.promise;
  }

  close(): void {
    this.#closed = true;
  }

  /**
   * The process died: a call still on its way reaches the remote only if its COMMIT had gone out
   * (seeded per call); the others are rolled back with the dead connection. Answers die with the process.
   */
  crashed(): void {
    for (const flight of this.#inFlight) {
      if (flight.committing) continue;
      flight.cancel();
      this.#world.observer.fate(this.host, flight.call, "rolled back by the crash", true);
    }
    this.#inFlight.clear();
  }

  async #arrive(
    stmts: Statement[],
    call: number,
    fate: Fate,
    answer: PromiseWithResolvers<WriteResult[]>,
    answerMs: number,
  ): Promise<void> {
    const { time, remotes, observer } = this.#world;
    const { random } = this;
    const applied = fate !== "dropped" || random.chance(0.5);
    let results: WriteResult[] | null = null;
    let error: unknown = null;
    // A tenant's database dropped while the call was on its way: nothing there to apply it.
    const remote = remotes.of(this.tenant);
    if (remote === null) error = new WriteError(`sim remote: ${remotes.unreachable(this.tenant)}`);
    else if (applied) {
      try {
        results = await remote.apply(stmts, this.host, call, time.now);
      } catch (e) {
        error = e;
      }
    }
    const what =
      fate === "dropped"
        ? `dropped mid-batch (${applied ? "committed" : "rolled back"})`
        : fate === "ambiguous"
          ? "committed, answer lost"
          : error !== null
            ? `failed: ${(error as Error).message}`
            : fate === "slow"
              ? `applied, slow answer in ${answerMs} ms`
              : "applied";
    observer.fate(this.host, call, what);
    time.after(
      answerMs,
      () => {
        if (fate === "dropped") answer.reject(new WriteError("sim remote: connection reset mid-batch"));
        else if (fate === "ambiguous") answer.reject(new WriteError("sim remote: connection lost after COMMIT"));
        else if (error !== null) answer.reject(error);
        else answer.resolve(results!);
      },
      this.process,
    );
  }
}

/**
 * A tenant template's writers in one drain process: each tenant's SimWriter, made as the drain opens
 * the tenant's database — refused while that database is down or dropped.
 */
export class SimTenantWriters implements TenantWriters {
  readonly tenantTemplate = true as const;
  readonly dialect = "sqlite" as const;
  readonly concurrent: boolean;
  readonly #made: SimWriter[] = [];

  constructor(
    private readonly world: WriterWorld,
    private readonly process: Owner,
    private readonly host: number,
    private readonly random: Random,
    private readonly options: { connections: number; concurrent: boolean; pipelined: boolean },
  ) {
    this.concurrent = options.concurrent;
  }

  async open(tenant: string): Promise<OutboxWriter> {
    const unreachable = this.world.remotes.unreachable(tenant);
    if (unreachable !== null) throw new WriteError(`sim remote: ${unreachable}`);
    const random = this.random.fork(this.#made.length + 1);
    const writer = new SimWriter(this.world, this.process, this.host, random, this.options, tenant);
    this.#made.push(writer);
    return writer;
  }

  describe(): string {
    return "sim remote-{tenant}.db";
  }

  /** The process died: every tenant's writer it made (see SimWriter.crashed). */
  crashed(): void {
    for (const writer of this.#made) writer.crashed();
  }
}
