import type { AppConfig, TargetConfig } from "../config/types.ts";
import { describeError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import type { OutboxRow } from "../outbox/outbox.ts";
import { decodeArgs } from "../outbox/payload.ts";
import type { Dialect } from "../vocabulary.ts";
import type { Statement, WriteResult } from "../writers/writer.ts";
import { resultShapeProblem, type BoundedWriter } from "./bounded-writer.ts";
import type { FleetView } from "./fleet-view.ts";
import type { TargetLedger } from "./ledger.ts";
import { linkDrafts } from "./linked-groups.ts";
import type { DeliveryObserver, ObservedBatch } from "./observer.ts";
import type { Reachability } from "./reachability.ts";
import { RewriteCache } from "./rewrite-cache.ts";
import {
  minWake,
  trimDraft,
  type DrainTable,
  type GroupAttempts,
  type OpenContext,
  type SliceDraft,
  type TableSlice,
} from "./table.ts";
import type { RemoteParts } from "./target-parts.ts";
import { TraceComments } from "./trace-comments.ts";

/** What one cycle of one target did. */
export interface TargetCycle {
  target: string;
  delivered: number;
  failed: number;
  deadLettered: number;
  /** The target was down this cycle (or is still backing off from an outage). */
  outage: boolean;
  /** More rows are ready right now. */
  more: boolean;
  /** When something becomes ready next (epoch ms), if known. */
  wakeAt: number | null;
}

/** One answered batch, for metrics: how many rows it carried and how long the target took. */
export interface BatchEvent {
  app: string;
  target: string;
  rows: number;
  durationMs: number;
}

/** A batch whose rows carry more than this (characters) is followed by a garbage collection. */
const LARGE_BATCH_BYTES = 4 * 1024 * 1024;

/**
 * The most batches one chain sends in a cycle (see Delivery.deliver): the cycle's other work —
 * settling, the fleet view, tables that became ready — waits no longer than this many batches.
 */
const CHAIN_BATCHES = 8;

/** What a batch's answer means beyond its tables, for whoever runs the loop and the setup. */
export interface DeliveryHooks {
  /** The next cycle looks at these tables (an answer changed them, or their rows moved). */
  changed(tables: DrainTable[]): void;
  /** Nothing moved: commits do not wake the loop before this (epoch ms, the drain's clock). */
  quiet(until: number): void;
  /** A fence found the ledger missing: setup runs again before the next batch. */
  ledgerMissing(): void;
  /** A timed-out batch answered or failed late: its tables may go again, at once. */
  lateAnswered(): void;
}

/** What one target's delivery works with. */
export interface DeliveryParts extends RemoteParts {
  target: TargetConfig;
  fleetView: FleetView;
  observer: DeliveryObserver | null;
  onBatch?: (event: BatchEvent) => void;
  hooks: DeliveryHooks;
}

/** How a cycle's first batches share the tables: at most `tables` drafts each, a table looked at by one batch (`tried`), carried by one (`busy`). */
interface Share {
  tables: number;
  tried: Set<DrainTable>;
  busy: Set<DrainTable>;
}

/** A batch on its way: its call to the writer, what the observer was told, and when it was sent (the scheduler's elapsed()). */
interface InFlightBatch {
  batch: SentBatch;
  call: Promise<WriteResult[]>;
  observed: ObservedBatch | null;
  started: number;
  /** Resolves once the writer has it on its connection (WriteOptions.onSent), or answered. */
  onWire: Promise<void>;
}

/** A batch as sent: its slices, the statements in the order sent, and where each slice's statements went. */
interface SentBatch {
  slices: TableSlice[];
  stmts: Statement[];
  /** Per slice, the index in `stmts` of each of its statements (its fence first), in the slice's order. */
  positions: Map<TableSlice, number[]>;
  /** The slices each unit of linked tables (a transaction across them) holds, when more than one. */
  units: TableSlice[][];
}

/**
 * One target's batches: planned over its ready tables (whole groups; a transaction across tables
 * as one unit), converted for its dialect, sent through its bounded writer, and the answer applied
 * per table — with the local work that overlaps a batch in flight (the previous confirmation, the
 * next rows read ahead), the late answer of a batch given up, and the periodic prune.
 */
export class Delivery {
  /** When a batch was last answered (epoch ms). */
  #lastSuccessAt: number | null = null;
  /** How long the last answered batch took from being sent to its answer (ms): the target's round trip, as the drain meets it. */
  #lastRoundTripMs: number | null = null;
  /** The background loop runs: a batch's local confirmation may wait for the next batch to be in flight. */
  #pipelining = false;
  #batches = 0;
  /** Batches sent and not answered yet. */
  #inFlight = 0;
  /** The rows' bytes (as batch_max_bytes counts them) of the batches sent and not answered yet. */
  #inFlightBytes = 0;
  /** The most bytes in flight at once: batch_max_bytes per connection, however many batches share one. */
  readonly #maxInFlightBytes: number;
  /** How many batches may be in flight at once: when its writer takes concurrent calls and a ledger fences them, the target's `connections` (twice that when the writer pipelines them), else 1. */
  readonly #parallel: number;
  /** The fence that opens each table's slice, moving its ledger rows; null without a ledger. */
  private readonly fence: OpenContext["fence"];
  private readonly name: string;
  private readonly app: AppConfig;
  private readonly dialect: Dialect;
  private readonly writer: BoundedWriter;
  private readonly ledger: TargetLedger | null;
  private readonly tables: DrainTable[];
  /** The tables this target serves by name (linking ignores tables another target serves). */
  private readonly served: ReadonlySet<string>;
  private readonly reachability: Reachability;
  private readonly fleetView: FleetView;
  private readonly logger: Logger;
  private readonly now: () => number;
  private readonly observer: DeliveryObserver | null;
  private readonly hooks: DeliveryHooks;
  private readonly rewrites: RewriteCache;
  /** Sqlcommenter comments on the statements sent (trace_comments), or null when off. */
  private readonly comments: TraceComments | null;

  constructor(private readonly parts: DeliveryParts) {
    ({
      name: this.name,
      app: this.app,
      dialect: this.dialect,
      writer: this.writer,
      ledger: this.ledger,
      tables: this.tables,
    } = parts);
    ({
      reachability: this.reachability,
      fleetView: this.fleetView,
      logger: this.logger,
      now: this.now,
      observer: this.observer,
      hooks: this.hooks,
    } = parts);
    this.served = new Set(parts.tables.map((t) => t.name));
    this.fence = parts.ledger ? (table, moves) => parts.ledger!.fence(table, moves) : null;
    const { connections } = parts.target;
    this.#maxInFlightBytes = parts.app.batchMaxBytes * connections;
    const { concurrent, pipelined } = parts.writer.writer;
    this.#parallel = concurrent === true && this.fence !== null ? connections * (pipelined === true ? 2 : 1) : 1;
    if (connections > 1 && this.#parallel < connections)
      this.logger.warn(
        `drain: ${this.name} has connections = ${connections}, but ${this.fence === null ? "no ledger (ledger = false) orders batches in flight" : "its writer takes one batch at a time (sqlite, libsql, a custom writer without concurrent = true)"}: one batch is in flight`,
        { target: this.name },
      );
    this.rewrites = new RewriteCache(parts.dialect, parts.target.compat);
    this.comments = parts.target.traceComments ? new TraceComments(parts.dialect) : null;
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
   * connection) the tables are shared out over half as many chains, and
   * each chain keeps a second batch in flight behind its first: the rows that follow each of its
   * tables, fenced behind it (see DrainTable.openBehind), so the remote commits the two in order,
   * whatever order they arrive in, or not at all. When a chain's first batch is answered cleanly,
   * the next goes behind the one still in flight, up to CHAIN_BATCHES a cycle, so the link is not
   * idle between cycles. Two deep, no more: when a transaction ends, PostgreSQL wakes every
   * transaction waiting on its rows at once, so a third on another connection could take a ledger
   * row before the second and fail its fence.
   */
  async deliver(now: number, out: TargetCycle, only: ReadonlySet<DrainTable> | null): Promise<TargetCycle> {
    const firsts = this.planBatches(now, out, only);
    if (firsts.length === 0) return out;
    const chains = firsts.map((batch) => [this.send(batch)]);
    try {
      await this.confirmApplied(() => this.parts.scheduler.sleep(0));
      if (this.#parallel > 1) for (const chain of chains) await this.sendBehind(chain);
      for (const chain of chains) await this.readAhead(chain[chain.length - 1]!.batch);
      const losses = await Promise.all(chains.map((chain) => this.answered(chain, out)));
      const lost = losses.find((l) => l !== null) ?? null;
      if (lost === null) return out;
      // Other batches of the cycle may have been answered: the target is down all the same.
      this.reachability.outage(lost.error, `a batch of ${lost.batch.stmts.length} statements`, this.now());
      return { ...out, outage: true, more: false, wakeAt: this.reachability.backoffUntil };
    } finally {
      this.#inFlight -= chains.reduce((n, c) => n + c.length, 0);
    }
  }

  /** Sends the batch behind the chain's last, once that one is on its connection (the one ahead reaches the remote first). */
  private async sendBehind(chain: InFlightBatch[]): Promise<void> {
    const last = chain[chain.length - 1]!;
    await last.onWire;
    const behind = this.planBehind(last.batch);
    if (behind !== null) chain.push(this.send(behind));
  }

  /**
   * Applies a chain's answers in order; a batch behind one that got no answer counts as lost too.
   * After a batch applied whole with one behind it still in flight, the chain goes on behind that
   * one (see deliver). Returns the first loss, if any.
   */
  private async answered(
    chain: InFlightBatch[],
    out: TargetCycle,
  ): Promise<{ error: unknown; batch: SentBatch } | null> {
    let lost: { error: unknown; batch: SentBatch } | null = null;
    for (let i = 0; i < chain.length; i++) {
      const { batch, call, observed, started } = chain[i]!;
      let results: WriteResult[];
      try {
        results = await call;
      } catch (error) {
        lost ??= { error, batch };
        this.lost(batch, observed, error);
        continue;
      }
      if (lost !== null) {
        // Behind a batch that got no answer: it committed only if that one did; the ledger says.
        this.lost(batch, observed, lost.error);
        continue;
      }
      this.#lastRoundTripMs = this.parts.scheduler.elapsed() - started;
      this.applyBatch(batch, results, observed, started, out);
      if (chain.length === i + 1) continue;
      // The batch behind confirms from what its tables read: this one's rows go first, every part.
      for (const slice of batch.slices) await this.confirmWhole(slice.table);
      if (chain.length === i + 2 && chain.length < CHAIN_BATCHES && results.every((r) => r.ok)) {
        const sent = chain.length;
        await this.sendBehind(chain);
        // What follows the batch just sent, read while it is on its way: for the next behind it, or the next cycle.
        if (chain.length > sent) await this.readAhead(chain[chain.length - 1]!.batch);
      }
    }
    return lost;
  }

  /**
   * The cycle's first batches: one over every ready table; with more than two batches allowed in
   * flight, up to half as many, each over its share of the tables — a table in one batch only — and
   * a transaction across tables in the batch of its tables.
   */
  private planBatches(now: number, out: TargetCycle, only: ReadonlySet<DrainTable> | null): SentBatch[] {
    const count = Math.max(1, Math.floor(this.#parallel / 2));
    if (count === 1) {
      const batch = this.planBatch(now, out, only, null);
      return batch === null ? [] : [batch];
    }
    const share: Share = { tables: Math.ceil(this.tables.length / count), tried: new Set(), busy: new Set() };
    const wanted = (t: DrainTable) => only === null || only.has(t);
    const batches: SentBatch[] = [];
    while (batches.length < count && this.tables.some((t) => wanted(t) && !share.tried.has(t))) {
      const batch = this.planBatch(now, out, only, share);
      if (batch === null) continue; // the tables it looked at had nothing to send: the next looks at the rest
      for (const slice of batch.slices) share.busy.add(slice.table);
      batches.push(batch);
      // Large rows: one batch at a time, so the drain's peak stays one batch_max_bytes as with one connection.
      if (batch.slices.reduce((n, sl) => n + sl.bytes, 0) > LARGE_BATCH_BYTES) break;
    }
    // Tables no batch of this cycle looked at go in the next cycle, at once.
    if (this.tables.some((t) => wanted(t) && !share.tried.has(t))) out.more = true;
    return batches;
  }

  /** Sends a batch (the observer told first); its call is awaited by deliver, after the local work that overlaps it. */
  private send(batch: SentBatch): InFlightBatch {
    const observed = this.observer === null ? null : this.observed(batch);
    const started = this.parts.scheduler.elapsed();
    this.#inFlight += 1; // until deliver has its answer
    const bytes = batch.slices.reduce((n, sl) => n + sl.bytes, 0);
    this.#inFlightBytes += bytes;
    let wired = () => {};
    const onWire = new Promise<void>((resolve) => (wired = resolve));
    const call = this.writer.send(batch.stmts, (abandoned) => this.awaitLateAnswer(batch, abandoned), {
      onSent: () => wired(),
    });
    call.then(wired, wired); // a writer that never says so: its answer will do
    void call.finally(() => (this.#inFlightBytes -= bytes)).catch(() => {});
    return { batch, call, observed, started, onWire };
  }

  /** A batch that got no answer: its heads are refunded, and fenced tables settle from the ledger (it may have committed). */
  private lost(batch: SentBatch, observed: ObservedBatch | null, error: unknown): void {
    for (const slice of batch.slices) {
      slice.table.refundOutage(slice);
      if (slice.fenced) slice.table.unsettle(); // it may have committed: the ledger will say
    }
    if (observed !== null) {
      const { message, errorClass } = describeError(error);
      this.observer!.batchLost(observed, { message, errorClass }, this.now());
    }
  }

  /** Applies a batch's answer to each of its tables, and what follows from it (units checked, metrics, the prune). */
  private applyBatch(
    batch: SentBatch,
    results: WriteResult[],
    observed: ObservedBatch | null,
    started: number,
    out: TargetCycle,
  ): void {
    const { slices } = batch;
    this.reachability.recovered();
    this.#lastSuccessAt = this.now();
    // What an answer did (a cut, a hold, a charge, a confirmation) shows at the table's next plan: the next cycle looks at these.
    this.hooks.changed(slices.map((sl) => sl.table));
    let moved = 0;
    const applied: number[] = [];
    const groupAttempts = attemptsOfGroups(batch.units);
    for (const slice of slices) {
      const answer = slice.table.applyAnswer(slice, answersOf(batch, slice, results), this.now(), groupAttempts);
      applied.push(answer.delivered);
      if (slice.fenced && answer.delivered > 0) this.fleetView.noteThrough(slice.table, this.now());
      out.delivered += answer.delivered;
      out.failed += answer.failed;
      out.deadLettered += answer.deadLettered;
      out.more ||= answer.more;
      moved += answer.delivered + answer.failed + answer.deadLettered;
      if (answer.ledgerMissing) this.hooks.ledgerMissing();
      this.forgetReadAhead(answer.touched);
    }
    this.checkUnits(batch, results);
    if (observed !== null) this.observer!.batchAnswered(observed, applied, this.now());
    const durationMs = this.parts.scheduler.elapsed() - started;
    const rows = slices.reduce((n, sl) => n + sl.rows.length, 0);
    this.parts.onBatch?.({ app: this.app.name, target: this.name, rows, durationMs });
    this.logger.debug(`drain: batch to ${this.name}: ${rows} rows, ${moved} settled in ${Math.round(durationMs)} ms`, {
      app: this.app.name,
      target: this.name,
      rows,
      duration_ms: Math.round(durationMs),
    });
    if (moved === 0) {
      // The remote answered but nothing moved (every head "skipped"): our own bookkeeping
      // commits would wake the watcher at once, so wait a full flush_interval instead.
      this.hooks.quiet(this.now() + this.app.flushIntervalMs);
    }
    this.#batches += 1;
    if (this.#batches % this.app.cleanupEvery === 0) for (const table of this.tables) void table.prune(); // in the background
    // Large rows: give their strings back now, so the next batch does not stack on this one's
    // garbage and the drain's memory stays bounded by batch_max_bytes, not by the backlog. A full
    // collection: strings that large live in the old generation, which a minor one leaves alone.
    if (slices.reduce((n, sl) => n + sl.bytes, 0) > LARGE_BATCH_BYTES) Bun.gc(true);
  }

  /** The batch as an observer sees it (told just before it is sent). */
  private observed(batch: SentBatch): ObservedBatch {
    const { target } = this.parts;
    let bytes = 0;
    let attempt = 1;
    for (const slice of batch.slices) {
      bytes += slice.bytes;
      // The head was charged when its slice was opened: its stored count is the attempts before this one.
      attempt = Math.max(attempt, slice.rows[0]!.attempts + 1);
    }
    const observed: ObservedBatch = {
      app: this.app.name,
      target: this.name,
      engine: target.writer ?? target.writerClass ?? "custom",
      dialect: this.dialect,
      slices: batch.slices.map((s) => ({ table: s.table.name, rows: s.rows })),
      statements: batch.stmts.length,
      bytes,
      attempt,
      sentAt: this.now(),
    };
    this.observer!.batchSent(observed);
    return observed;
  }

  /**
   * Plans one batch: every ready table's draft within the byte budget; the tables a group that
   * spans tables waits on, ready or not; then the cut of groups that cannot go whole yet
   * (linkDrafts); then each draft opened as a slice (fence, head charged). Tables a transaction
   * links are one unit, sent in commit order (seq order: a file allocates seqs in commit order)
   * behind their fences. Null when nothing is to be sent.
   */
  private planBatch(
    now: number,
    out: TargetCycle,
    only: ReadonlySet<DrainTable> | null,
    share: Share | null,
  ): SentBatch | null {
    const drafts: SliceDraft[] = [];
    let budget = this.app.batchMaxBytes;
    const plan = (table: DrainTable, force: boolean) => {
      share?.tried.add(table);
      const { draft, outcome } = table.plan({
        now,
        maxBytes: budget,
        prepare: (t, row) => this.prepareRow(t, row),
        force,
      });
      out.deadLettered += outcome.deadLettered;
      out.failed += outcome.failed;
      out.more ||= outcome.more;
      out.wakeAt = minWake(out.wakeAt, outcome.wakeAt);
      this.forgetReadAhead(outcome.touched);
      if (!draft) return;
      drafts.push(draft);
      budget -= draft.bytes;
    };
    for (const table of this.tables) {
      if (only !== null && !only.has(table)) continue;
      if (share?.tried.has(table)) continue; // an earlier batch of the cycle looked at it
      if (share !== null && drafts.length >= share.tables) break; // the next batch takes the rest
      if (budget <= 0) {
        out.more = true; // the batch is full: the rest goes in the next cycle, at once
        break;
      }
      plan(table, false);
    }
    // A group that spans tables goes when it heads all of them: a table it waits on that is not
    // ready by its own measure (threshold, max wait) is planned anyway.
    const planned = new Set(drafts.map((d) => d.table));
    for (const table of this.awaitedBy(drafts))
      if (!planned.has(table) && budget > 0 && !share?.busy.has(table)) plan(table, true); // a table another batch carries: the group waits
    if (drafts.length === 0) return null;
    const { keep, units } = linkDrafts(drafts, this.served);
    const opened = new Map<SliceDraft, TableSlice>();
    for (const draft of drafts) {
      const kept = keep.get(draft)!;
      if (kept === 0) continue; // its head group waits for the tables it spans
      trimDraft(draft, kept);
      opened.set(draft, draft.table.openSlice(draft, { now, fence: this.fence }));
    }
    return this.layOut(units.map((unit) => unit.map((d) => opened.get(d)!)));
  }

  /**
   * The batch behind `ahead`, sent before `ahead` is answered: for each table alone in its unit
   * there, the rows that follow its slice, read now and fenced behind it (DrainTable.openBehind),
   * within what the batches in flight leave of batch_max_bytes per connection. Tables a transaction
   * links, and batches of large rows, wait for the answer. Null when nothing follows.
   */
  private planBehind(ahead: SentBatch): SentBatch | null {
    if (this.fence === null || ahead.slices.reduce((n, sl) => n + sl.bytes, 0) > LARGE_BATCH_BYTES) return null;
    const linked = new Set(ahead.units.flat());
    let budget = Math.min(this.app.batchMaxBytes, this.#maxInFlightBytes - this.#inFlightBytes);
    const units: TableSlice[][] = [];
    for (const slice of ahead.slices) {
      if (linked.has(slice) || budget <= 0) continue;
      const plan = {
        now: this.now(),
        maxBytes: budget,
        prepare: (t: DrainTable, row: OutboxRow) => this.prepareRow(t, row),
      };
      const behind = slice.table.openBehind(slice, plan, { now: plan.now, fence: this.fence });
      if (behind === null) continue;
      budget -= behind.bytes;
      units.push([behind]);
    }
    return this.layOut(units);
  }

  /** A batch of these units: a unit of one table as it is, one of tables a transaction links behind their fences, in commit order. Null when empty. */
  private layOut(units: TableSlice[][]): SentBatch | null {
    const batch: SentBatch = { slices: [], stmts: [], positions: new Map(), units: [] };
    for (const slices of units) {
      batch.slices.push(...slices);
      if (slices.length === 1) {
        const slice = slices[0]!;
        batch.positions.set(
          slice,
          slice.stmts.map((_, i) => batch.stmts.length + i),
        );
        batch.stmts.push(...slice.stmts);
        continue;
      }
      batch.units.push(slices);
      sendTogether(batch, slices);
    }
    return batch.stmts.length === 0 ? null : batch;
  }

  /** Tables of this target that a draft's group spanning tables waits on, and that have no draft. */
  private awaitedBy(drafts: SliceDraft[]): DrainTable[] {
    const names = new Set<string>();
    for (const draft of drafts) for (const tables of draft.spans.values()) for (const t of tables) names.add(t);
    if (names.size === 0) return [];
    const drafted = new Set(drafts.map((d) => d.table.name));
    return this.tables.filter((t) => names.has(t.name) && !drafted.has(t.name));
  }

  /** Another table's rows moved (a dead-lettered group spanning tables): what it read ahead is stale. */
  private forgetReadAhead(tables: string[] | undefined): void {
    if (!tables) return;
    for (const table of this.tables) {
      if (!tables.includes(table.name)) continue;
      table.forgetReadAhead();
      this.hooks.changed([table]); // its rows moved: the next cycle looks at it
    }
  }

  /**
   * A unit of linked tables must have been applied all together or not at all. A writer that
   * applied part of one (one table's slice whole, another's not) broke the contract (Statement.unit):
   * half a transaction is on the remote, and every table of the unit is held, loudly.
   */
  private checkUnits(batch: SentBatch, results: WriteResult[]): void {
    for (const unit of batch.units) {
      const applied = unit.map((slice) => answersOf(batch, slice, results).every((r) => r.ok));
      if (applied.every((a) => a) || applied.every((a) => !a)) continue;
      const names = unit.map((s) => `"${s.table.name}"`).join(", ");
      for (const slice of unit) {
        const message = `the writer of ${this.name} applied part of a transaction spanning ${names}: with ledger = true a writer must apply statements that share a unit (Statement.unit) all together or not at all`;
        slice.table.hold({ reason: "writer contract", message }, this.now());
      }
    }
  }

  /**
   * Confirms locally the rows the target applied (see DrainTable.confirmApplied): the one place the
   * runner has rows confirmed. With `turn`, it runs before each table's confirmation (the event loop
   * turns while a batch is in flight). A confirmation in parts (the application's own database,
   * whose writes wait for each) lets the event loop turn between them: the application's code, in
   * this process, writes meanwhile.
   */
  async confirmApplied(turn: (() => Promise<unknown>) | null = null): Promise<void> {
    for (const table of this.tables) {
      if (!table.hasApplied) continue;
      if (turn) await turn();
      await this.confirmWhole(table);
    }
  }

  /** Confirms every part of what `table` has applied, letting the event loop turn between parts. */
  private async confirmWhole(table: DrainTable): Promise<void> {
    while (table.confirmApplied(this.now())) await this.parts.scheduler.sleep(0);
  }

  /**
   * Under load, while the last batch of a cycle is in flight, reads and converts the rows that
   * follow its slices (see DrainTable.readAhead), so the next cycle need not. Before each table's
   * turn the event loop turns, so the batch goes on the wire and the remote's answers keep its
   * pipeline moving while SQLite holds the thread.
   */
  private async readAhead(batch: SentBatch): Promise<void> {
    const bytes = batch.slices.reduce((n, s) => n + s.bytes, 0);
    // Large rows: two batches in memory at once would double the drain's peak; their cost is the wire, not the local work.
    if (!this.#pipelining || bytes > LARGE_BATCH_BYTES) return;
    for (const slice of batch.slices) {
      if (!slice.more || !slice.fenced) continue;
      await this.parts.scheduler.sleep(0);
      slice.table.readAhead(slice, {
        now: this.now(),
        maxBytes: this.app.batchMaxBytes - (bytes - slice.bytes),
        prepare: (t, row) => this.prepareRow(t, row),
      });
    }
  }

  /** Decodes one row and converts it for the target's dialect (and, in compatibility mode, injects outbox_seq). */
  private prepareRow(table: DrainTable, row: OutboxRow): Statement {
    const args = decodeArgs(row.payload);
    const { sql, args: sent } = this.rewrites.rewrite(row.tag, args, row.seq, table.config.injectOutboxSeq);
    const text = this.comments === null || row.traceparent === null ? sql : this.comments.add(sql, row.traceparent);
    return { sql: text, args: sent, namespace: table.name, seq: row.seq };
  }

  /**
   * A batch given up after `write_timeout` may still commit. With a ledger that is harmless: its
   * fence moved the ledger row, so the next fence fails and settlement (which waits on that row)
   * confirms what it applied. Without one, nothing would stop a late commit from landing after newer
   * rows (an old UPDATE overwriting a newer one), so those tables are held until the call answers;
   * a late well-formed answer confirms the ok prefix it reports per table.
   */
  private awaitLateAnswer(batch: SentBatch, call: Promise<WriteResult[]>): void {
    const { slices } = batch;
    const held = slices.filter((s) => !s.fenced);
    if (held.length === 0) return;
    for (const s of held) s.table.awaitLateAnswer(this.now());
    const names = held.map((s) => `"${s.table.name}"`).join(", ");
    this.logger.warn(
      `drain: ${names} on ${this.name} held until the timed-out batch answers: without a ledger a late commit must not land after newer rows`,
      { target: this.name },
    );
    const settle = (results: unknown) => {
      if (resultShapeProblem(results, batch.stmts.length) !== null) return;
      for (const s of held) s.table.applyLateAnswer(s, answersOf(batch, s, results as WriteResult[]));
      this.logger.info(
        `drain: the timed-out batch to ${this.name} answered late; what it committed of ${names} is confirmed`,
        { target: this.name },
      );
    };
    call
      .then(settle, () =>
        this.logger.info(`drain: the timed-out batch to ${this.name} failed late; ${names} are redelivered`, {
          target: this.name,
        }),
      )
      .finally(() => {
        for (const s of held) s.table.lateAnswerCame();
        this.hooks.lateAnswered();
      });
  }
}

/** The attempts of each group heading a unit's slices: the most any of its heads carries (see GroupAttempts). */
function attemptsOfGroups(units: TableSlice[][]): GroupAttempts {
  const attempts = new Map<number, number>();
  for (const unit of units)
    for (const { rows } of unit) {
      const { grp, attempts: n } = rows[0]!;
      if (grp !== null) attempts.set(grp, Math.max(attempts.get(grp) ?? 0, n));
    }
  return attempts;
}

/** The answers of one slice of a batch, in the slice's order (its fence first). */
function answersOf(batch: SentBatch, slice: TableSlice, results: WriteResult[]): WriteResult[] {
  return batch.positions.get(slice)!.map((i) => results[i]!);
}

/**
 * Adds the slices of tables a transaction links as one unit: every fence first (each takes its
 * ledger row before any row is applied), then every row in seq order — the order the application
 * committed them in — each statement marked with the unit, so the writer applies them together.
 */
function sendTogether(batch: SentBatch, slices: TableSlice[]): void {
  const unit = slices
    .map((s) => s.table.name)
    .sort()
    .join("+");
  const mark = (stmt: Statement): Statement => ({ ...stmt, unit });
  const entries: Array<{ slice: TableSlice; index: number; seq: number }> = [];
  for (const slice of slices) {
    slice.rows.forEach((row, i) => {
      entries.push({ slice, index: i + (slice.fenced ? 1 : 0), seq: row.seq });
    });
    batch.positions.set(slice, new Array<number>(slice.stmts.length));
  }
  for (const slice of slices) {
    if (!slice.fenced) continue;
    batch.positions.get(slice)![0] = batch.stmts.length;
    batch.stmts.push(mark(slice.stmts[0]!));
  }
  entries.sort((a, b) => a.seq - b.seq);
  for (const { slice, index } of entries) {
    batch.positions.get(slice)![index] = batch.stmts.length;
    batch.stmts.push(mark(slice.stmts[index]!));
  }
}
