import type { TargetConfig } from "../config/types.ts";
import type { WriteResult } from "../writers/writer.ts";
import { answersOf, BatchPlanner, batchBytes, LARGE_BATCH_BYTES, type SentBatch } from "./batch-plan.ts";
import {
  type AnswerParts,
  applyAnswered,
  batchLost,
  type DeliveryHooks,
  observeSent,
  type TargetCycle,
} from "./batch-answer.ts";
import { type BoundedWriter, resultShapeProblem } from "./bounded-writer.ts";
import type { DeliveryObserver, ObservedBatch } from "./observer.ts";
import type { DrainTable, TableSlice } from "./table/table.ts";
import type { RemoteParts } from "./target-parts.ts";

export type { AnsweredBatch, DeliveryHooks, TargetCycle } from "./batch-answer.ts";

/** One answered batch, for metrics: how many rows it carried and how long the target took. */
export interface BatchEvent {
  app: string;
  target: string;
  rows: number;
  durationMs: number;
}

/** What one target's delivery works with. */
export interface DeliveryParts extends RemoteParts {
  writer: BoundedWriter;
  target: TargetConfig;
  observer: DeliveryObserver | null;
  hooks: DeliveryHooks;
}

/**
 * A batch on its way: its call to the writer, what the observer was told, and when it was sent (the
 * scheduler's elapsed()).
 */
interface InFlightBatch {
  batch: SentBatch;
  call: Promise<WriteResult[]>;
  observed: ObservedBatch | null;
  started: number;
  /** Resolves once the writer has it on its connection (WriteOptions.onSent), or answered. */
  onWire: Promise<void>;
}

/**
 * The most batches one chain sends in a cycle (see Delivery.deliver): the cycle's other work —
 * settling, the fleet view, tables that became ready — waits no longer than this many batches.
 */
const CHAIN_BATCHES = 8;

/**
 * One target's batches on their way: planned (BatchPlanner), sent through its bounded writer, and
 * the answer applied per table — with the local work that overlaps a batch in flight (the previous
 * confirmation, the next rows read ahead, the batch behind it), and the late answer of a batch given up.
 */
export class Delivery {
  readonly #planner: BatchPlanner;
  /** When a batch was last answered (epoch ms). */
  #lastSuccessAt: number | null = null;
  /**
   * How long the last answered batch took from being sent to its answer (ms): the target's round trip, as the
   * drain meets it.
   */
  #lastRoundTripMs: number | null = null;
  /** The background loop runs: a batch's local confirmation may wait for the next batch to be in flight. */
  #pipelining = false;
  /** Batches sent and not answered yet. */
  #inFlight = 0;
  /** The rows' bytes (as batch_max_bytes counts them) of the batches sent and not answered yet. */
  #inFlightBytes = 0;
  /**
   * How many batches may be in flight at once: when its writer takes concurrent calls and a ledger fences
   * them, the target's `connections` (twice that when the writer pipelines them), else 1.
   */
  readonly #parallel: number;

  readonly #parts: DeliveryParts;
  /** What an answered or lost batch is told to. */
  readonly #answerParts: AnswerParts;

  constructor(parts: DeliveryParts) {
    this.#parts = parts;
    const { target, ledger, writer, logger, name } = parts;
    const fence = ledger === null ? null : ledger.fence.bind(ledger);
    this.#planner = new BatchPlanner({ ...parts, fence, changed: (tables) => parts.hooks.changed(tables) });
    this.#answerParts = { ...parts, forgetReadAhead: (tables) => this.#planner.forgetReadAhead(tables) };
    const { connections } = target;
    const { concurrent, pipelined } = writer.writer;
    this.#parallel = concurrent === true && fence !== null ? connections * (pipelined === true ? 2 : 1) : 1;
    if (connections > 1 && this.#parallel < connections)
      logger.warn(
        `drain: ${name} has connections = ${connections}, but ${fence === null ? "without a ledger nothing orders batches in flight" : "its writer takes one batch at a time"}: one batch is in flight (docs/writers.md)`,
        { target: name },
      );
  }

  /** When a batch was last answered (epoch ms). */
  get lastSuccessAt(): number | null {
    return this.#lastSuccessAt;
  }

  /** How long the last answered batch took, sent to answered (ms); null before one was. */
  get lastRoundTripMs(): number | null {
    return this.#lastRoundTripMs;
  }

  /** Batches sent and not answered yet. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** Whether a confirmation may wait for the next batch (the background loop runs). */
  get pipelining(): boolean {
    return this.#pipelining;
  }

  /** The background loop starts (true) or stops (false). */
  pipeline(on: boolean): void {
    this.#pipelining = on;
  }

  /**
   * Plans this cycle's batches over every ready table (of `only`, when given), sends them, and
   * applies each answer. One batch when one may be in flight. With more (a writer that takes
   * concurrent calls, a ledger: `connections`, twice that when the writer pipelines batches on a
   * connection) the tables are shared out over half as many chains, and each chain keeps a second
   * batch in flight behind its first: the rows that follow each of its tables, fenced behind it
   * (see DrainTable.openBehind), so the remote commits the two in order, whatever order they
   * arrive in, or not at all. When a chain's first batch is answered cleanly, the next goes behind
   * the one still in flight, up to CHAIN_BATCHES a cycle, so the link is not idle between cycles.
   * Two deep, no more: when a transaction ends, PostgreSQL wakes every transaction waiting on its
   * rows at once, so a third on another connection could take a ledger row before the second and
   * fail its fence.
   */
  async deliver(now: number, out: TargetCycle, only: ReadonlySet<DrainTable> | null): Promise<TargetCycle> {
    const firsts = this.#planner.first(now, Math.max(1, Math.floor(this.#parallel / 2)), out, only);
    if (firsts.length === 0) return out;
    const chains = firsts.map((batch) => [this.#send(batch)]);
    try {
      await this.confirmApplied(() => this.#parts.scheduler.sleep(0));
      if (this.#parallel > 1) for (const chain of chains) await this.#sendBehind(chain);
      for (const chain of chains) await this.#readAhead(chain[chain.length - 1]!.batch);
      const losses = await Promise.all(chains.map((chain) => this.#answered(chain, out)));
      const lost = losses.find((l) => l !== null) ?? null;
      if (lost === null) return out;
      // Other batches of the cycle may have been answered: the target is down all the same.
      const { reachability, now: clock } = this.#parts;
      reachability.outage(lost.error, `a batch of ${lost.batch.stmts.length} statements`, clock());
      return { ...out, outage: true, more: false, wakeAt: reachability.backoffUntil };
    } finally {
      this.#inFlight -= chains.reduce((n, c) => n + c.length, 0);
    }
  }

  /**
   * Sends the batch behind the chain's last, once that one is on its connection (the one ahead reaches the
   * remote first).
   */
  async #sendBehind(chain: InFlightBatch[]): Promise<void> {
    const last = chain[chain.length - 1]!;
    await last.onWire;
    // Within what the batches in flight leave of batch_max_bytes per connection.
    const { app, target } = this.#parts;
    const budget = Math.min(app.batchMaxBytes, app.batchMaxBytes * target.connections - this.#inFlightBytes);
    const behind = this.#planner.behind(last.batch, this.#parts.now(), budget);
    if (behind !== null) chain.push(this.#send(behind));
  }

  /**
   * Applies a chain's answers in order; a batch behind one that got no answer counts as lost too.
   * After a batch applied whole with one behind it still in flight, the chain goes on behind that
   * one (see deliver). Returns the first loss, if any.
   */
  async #answered(chain: InFlightBatch[], out: TargetCycle): Promise<{ error: unknown; batch: SentBatch } | null> {
    let lost: { error: unknown; batch: SentBatch } | null = null;
    for (let i = 0; i < chain.length; i++) {
      const { batch, call, observed, started } = chain[i]!;
      let results: WriteResult[];
      try {
        results = await call;
      } catch (error) {
        lost ??= { error, batch };
        batchLost(batch, observed, error, this.#answerParts);
        continue;
      }
      if (lost !== null) {
        // Behind a batch that got no answer: it committed only if that one did; the ledger says.
        batchLost(batch, observed, lost.error, this.#answerParts);
        continue;
      }
      this.#lastRoundTripMs = this.#parts.scheduler.elapsed() - started;
      this.#parts.reachability.recovered();
      this.#lastSuccessAt = this.#parts.now();
      applyAnswered(batch, results, observed, started, out, this.#answerParts);
      if (chain.length === i + 1) continue;
      // The batch behind confirms from what its tables read: this one's rows go first, every part.
      for (const slice of batch.slices) await this.#confirmWhole(slice.table);
      if (chain.length === i + 2 && chain.length < CHAIN_BATCHES && results.every((r) => r.ok)) {
        const sent = chain.length;
        await this.#sendBehind(chain);
        // What follows the batch just sent, read while it is on its way: for the next behind it, or the next cycle.
        if (chain.length > sent) await this.#readAhead(chain[chain.length - 1]!.batch);
      }
    }
    return lost;
  }

  /** Sends a batch (the observer told first); its call is awaited by deliver, after the local work that overlaps it. */
  #send(batch: SentBatch): InFlightBatch {
    const observed = observeSent(batch, this.#answerParts);
    const started = this.#parts.scheduler.elapsed();
    this.#inFlight += 1; // until deliver has its answer
    const bytes = batchBytes(batch);
    this.#inFlightBytes += bytes;
    let wired = () => {};
    const onWire = new Promise<void>((resolve) => (wired = resolve));
    const late = (abandoned: Promise<WriteResult[]>) => this.#awaitLateAnswer(batch, abandoned);
    const call = this.#parts.writer.send(batch.stmts, late, { onSent: () => wired() });
    call.then(wired, wired); // a writer that never says so: its answer will do
    void call.finally(() => (this.#inFlightBytes -= bytes)).catch(() => {});
    return { batch, call, observed, started, onWire };
  }

  /**
   * Confirms locally the rows the target applied (see DrainTable.confirmApplied): the one place the
   * runner has rows confirmed. With `turn`, it runs before each table's confirmation (the event loop
   * turns while a batch is in flight). A confirmation in parts (the application's own database,
   * whose writes wait for each) lets the event loop turn between them: the application's code, in
   * this process, writes meanwhile.
   */
  async confirmApplied(turn: (() => Promise<unknown>) | null = null): Promise<void> {
    for (const table of this.#parts.tables) {
      if (!table.hasApplied) continue;
      if (turn) await turn();
      await this.#confirmWhole(table);
    }
  }

  /** Confirms every part of what `table` has applied, letting the event loop turn between parts. */
  async #confirmWhole(table: DrainTable): Promise<void> {
    while (table.confirmApplied(this.#parts.now())) await this.#parts.scheduler.sleep(0);
  }

  /**
   * Under load, while the last batch of a cycle is in flight, reads and converts the rows that
   * follow its slices (see DrainTable.readAhead), so the next cycle need not. Before each table's
   * turn the event loop turns, so the batch goes on the wire and the remote's answers keep its
   * pipeline moving while SQLite holds the thread.
   */
  async #readAhead(batch: SentBatch): Promise<void> {
    const bytes = batchBytes(batch);
    // Large rows: two batches in memory at once would double the drain's peak; their cost is the wire, not
    // the local work.
    if (!this.#pipelining || bytes > LARGE_BATCH_BYTES) return;
    for (const slice of batch.slices) {
      if (!slice.more || !slice.fenced) continue;
      await this.#parts.scheduler.sleep(0);
      slice.table.readAhead(slice, {
        now: this.#parts.now(),
        maxBytes: this.#parts.app.batchMaxBytes - (bytes - slice.bytes),
        prepare: (t, row) => this.#planner.prepare(t, row),
      });
    }
  }

  /**
   * A batch given up after `write_timeout` may still commit. With a ledger that is harmless: its
   * fence moved the ledger row, so the next fence fails and settlement (which waits on that row)
   * confirms what it applied. Without one, nothing would stop a late commit from landing after newer
   * rows (an old UPDATE overwriting a newer one), so those tables are held until the call answers;
   * a late well-formed answer confirms the ok prefix it reports per table.
   */
  #awaitLateAnswer(batch: SentBatch, call: Promise<WriteResult[]>): void {
    const held: TableSlice[] = batch.slices.filter((s) => !s.fenced);
    if (held.length === 0) return;
    const { name, logger, now, hooks } = this.#parts;
    for (const s of held) s.table.awaitLateAnswer(now());
    const names = held.map((s) => `"${s.table.name}"`).join(", ");
    logger.warn(
      `drain: ${names} on ${name} held until the timed-out batch answers: without a ledger a late commit must not land after newer rows`,
      { target: name },
    );
    const settle = (results: unknown) => {
      if (resultShapeProblem(results, batch.stmts.length) !== null) return;
      for (const s of held) s.table.applyLateAnswer(s, answersOf(batch, s, results as WriteResult[]));
      logger.info(`drain: the timed-out batch to ${name} answered late; what it committed of ${names} is confirmed`, {
        target: name,
      });
    };
    const failed = () =>
      logger.info(`drain: the timed-out batch to ${name} failed late; ${names} are redelivered`, { target: name });
    call.then(settle, failed).finally(() => {
      for (const s of held) s.table.lateAnswerCame();
      hooks.lateAnswered();
    });
  }
}
