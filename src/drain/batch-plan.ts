import type { AppConfig, TargetConfig } from "../config/types.ts";
import type { OutboxRow } from "../outbox/outbox.ts";
import { decodeArgs } from "../outbox/payload.ts";
import type { Dialect } from "../vocabulary.ts";
import type { Statement, WriteResult } from "../writers/writer.ts";
import { type GoneFrom, linkDrafts, type WaitsIn } from "./linked-groups.ts";
import { RewriteCache } from "./rewrite-cache.ts";
import { minWake } from "./schedule.ts";
import type { DrainTable, GroupAttempts, OpenContext, PlanContext, SliceDraft, TableSlice } from "./table/table.ts";
import { TraceComments } from "./trace-comments.ts";

/**
 * What planning a cycle's batches reports: rows charged and dead-lettered, more ready, the next wake (see
 * TargetCycle).
 */
export interface PlanReport {
  failed: number;
  deadLettered: number;
  more: boolean;
  /** A table's next read starts further on though nothing was sent (see TableOutcome.readOn). */
  readOn?: boolean;
  wakeAt: number | null;
}

/** A batch as sent: its slices, the statements in the order sent, and where each slice's statements went. */
export interface SentBatch {
  slices: TableSlice[];
  stmts: Statement[];
  /** Per slice, the index in `stmts` of each of its statements (its fence first), in the slice's order. */
  positions: Map<TableSlice, number[]>;
  /** The slices each unit of linked tables (a transaction across them) holds, when more than one. */
  units: TableSlice[][];
}

/** A batch whose rows carry more than this (characters) is followed by a garbage collection, and goes alone. */
export const LARGE_BATCH_BYTES = 4 * 1024 * 1024;

/** The rows' bytes a batch carries (as batch_max_bytes counts them). */
export const batchBytes = (batch: SentBatch): number => batch.slices.reduce((n, sl) => n + sl.bytes, 0);

/**
 * How a cycle's first batches share the tables: at most `tables` drafts each, a table looked at by one batch
 * (`tried`), carried by one (`busy`).
 */
interface Share {
  tables: number;
  tried: Set<DrainTable>;
  busy: Set<DrainTable>;
}

/** What one target's batch planner works with. */
export interface BatchPlanParts {
  app: AppConfig;
  target: TargetConfig;
  dialect: Dialect;
  tables: DrainTable[];
  /** The fence that opens each table's slice, moving its ledger rows; null without a ledger. */
  fence: OpenContext["fence"];
  /** Another table's rows moved (a dead-lettered group that spans tables): the next cycle looks at it. */
  changed(tables: DrainTable[]): void;
  /** The target is a tenant template: each row must name its tenant (see prepare). */
  tenanted?: boolean;
}

/**
 * One target's batches as planned: over its ready tables (whole groups; a transaction across tables
 * as one unit, see linkDrafts), each row converted for the target's dialect, each table's draft
 * opened as a slice behind its fence, laid out in one batch — and the batch behind one in flight.
 */
export class BatchPlanner {
  /** The tables this target serves by name (linking ignores tables another target serves). */
  readonly #served: ReadonlySet<string>;
  readonly #byName: ReadonlyMap<string, DrainTable>;
  readonly #rewrites: RewriteCache;
  /** Sqlcommenter comments on the statements sent (trace_comments), or null when off. */
  readonly #comments: TraceComments | null;

  constructor(private readonly parts: BatchPlanParts) {
    this.#served = new Set(parts.tables.map((t) => t.name));
    this.#byName = new Map(parts.tables.map((t) => [t.name, t]));
    this.#rewrites = new RewriteCache(parts.dialect, parts.target.compat);
    this.#comments = parts.target.traceComments ? new TraceComments(parts.dialect) : null;
  }

  /**
   * The cycle's first batches, at most `count`: one over every ready table; with more, each over
   * its share of the tables — a table in one batch only — and a transaction across tables in the
   * batch of its tables. Tables no batch looked at go in the next cycle, at once.
   */
  first(now: number, count: number, out: PlanReport, only: ReadonlySet<DrainTable> | null): SentBatch[] {
    if (count === 1) {
      const batch = this.#batch(now, out, only, null);
      return batch === null ? [] : [batch];
    }
    const { tables } = this.parts;
    const share: Share = { tables: Math.ceil(tables.length / count), tried: new Set(), busy: new Set() };
    const wanted = (t: DrainTable) => only === null || only.has(t);
    const batches: SentBatch[] = [];
    while (batches.length < count && tables.some((t) => wanted(t) && !share.tried.has(t))) {
      const batch = this.#batch(now, out, only, share);
      if (batch === null) continue; // the tables it looked at had nothing to send: the next looks at the rest
      for (const slice of batch.slices) share.busy.add(slice.table);
      batches.push(batch);
      // Large rows: one batch at a time, so the drain's peak stays one batch_max_bytes as with one connection.
      if (batchBytes(batch) > LARGE_BATCH_BYTES) break;
    }
    if (tables.some((t) => wanted(t) && !share.tried.has(t))) out.more = true;
    return batches;
  }

  /**
   * Plans one batch: every ready table's draft within the byte budget; the tables a group that
   * spans tables waits on, ready or not; then the groups that cannot go whole yet held back with
   * their lanes (linkDrafts); then each draft opened as a slice (fence, head charged). Tables a
   * transaction links are one unit, sent in commit order behind their fences. Null: nothing to send.
   */
  #batch(now: number, out: PlanReport, only: ReadonlySet<DrainTable> | null, share: Share | null): SentBatch | null {
    const drafts: SliceDraft[] = [];
    let budget = this.parts.app.batchMaxBytes;
    /** The tables planned for this batch: only their plans say, now, how long a group that spans tables waits there. */
    const planned = new Map<string, DrainTable>();
    const plan = (table: DrainTable, force: boolean) => {
      share?.tried.add(table);
      planned.set(table.name, table);
      const { drafts: made, outcome } = table.plan({
        now,
        maxBytes: budget,
        prepare: (t, row) => this.prepare(t, row),
        force,
      });
      out.deadLettered += outcome.deadLettered;
      out.failed += outcome.failed;
      out.more ||= outcome.more;
      if (outcome.readOn) out.readOn = true;
      out.wakeAt = minWake(out.wakeAt, outcome.wakeAt);
      this.forgetReadAhead(outcome.touched);
      for (const draft of made) {
        drafts.push(draft);
        budget -= draft.bytes;
      }
    };
    for (const table of this.parts.tables) {
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
    // ready by its own measure (threshold, max wait) is planned anyway — unless another batch carries it.
    // Those tables' drafts may hold groups that span further tables: looked at until none is new.
    const looked = new Set(planned.keys());
    for (let next = awaitedBy(this.parts.tables, drafts, looked); next.length > 0; ) {
      for (const table of next) {
        looked.add(table.name);
        if (budget > 0 && !share?.busy.has(table)) plan(table, true);
      }
      next = awaitedBy(this.parts.tables, drafts, looked);
    }
    if (drafts.length === 0) return null;
    const waitsIn = (t: string, grp: number) => planned.get(t)?.waitOf(grp) ?? null;
    return openLinked(drafts, this.#served, waitsIn, this.goneFrom, { now, fence: this.parts.fence }, out);
  }

  /** Whether a group's part in a table of this target is gone (see GoneFrom): confirmed, nothing of it pending. */
  readonly goneFrom: GoneFrom = (table, grp) => this.#byName.get(table)?.groupGone(grp) === true;

  /**
   * The batch behind `ahead`, sent before `ahead` is answered: for each table alone in its unit
   * there, the rows that follow its slice, read now and fenced behind it (DrainTable.openBehind),
   * within `budget` bytes. Tables a transaction links, and batches of large rows, wait for the
   * answer. Null when nothing follows.
   */
  behind(ahead: SentBatch, now: number, budget: number): SentBatch | null {
    const { fence } = this.parts;
    if (fence === null || batchBytes(ahead) > LARGE_BATCH_BYTES) return null;
    const linked = new Set(ahead.units.flat());
    const units: TableSlice[][] = [];
    for (const slice of ahead.slices) {
      if (linked.has(slice) || budget <= 0) continue;
      const plan: PlanContext = { now, maxBytes: budget, prepare: (t, row) => this.prepare(t, row) };
      const next = slice.table.openBehind(slice, plan, { now, fence });
      if (next === null) continue;
      budget -= next.bytes;
      units.push([next]);
    }
    return layOut(units);
  }

  /**
   * Decodes one row and converts it for the target's dialect (and, in compatibility mode, injects
   * outbox_seq). A row whose tenant does not fit the target — none for a tenant template, one for a
   * single database — is refused: its fault, charged and held like any row's, never sent.
   */
  prepare(table: DrainTable, row: OutboxRow): Statement {
    if ((row.tenant === null) === (this.parts.tenanted === true)) throw tenantMismatch(table, row, this.parts.target);
    const args = decodeArgs(row.payload);
    const { sql, args: sent } = this.#rewrites.rewrite(row.tag, args, row.seq, table.config.injectOutboxSeq);
    const text = this.#comments === null || row.traceparent === null ? sql : this.#comments.add(sql, row.traceparent);
    return { sql: text, args: sent, namespace: table.name, seq: row.seq };
  }

  /**
   * Another table's rows moved (a dead-lettered group spanning tables): what it read ahead is stale, and the
   * next cycle looks at it.
   */
  forgetReadAhead(tables: string[] | undefined): void {
    if (!tables) return;
    const moved = this.parts.tables.filter((t) => tables.includes(t.name));
    for (const table of moved) table.forgetReadAhead();
    if (moved.length > 0) this.parts.changed(moved);
  }
}

/** The tables (of `tables`) a group that spans tables in `drafts` touches, not looked at yet (`looked`, by name). */
export function awaitedBy(
  tables: readonly DrainTable[],
  drafts: readonly SliceDraft[],
  looked: ReadonlySet<string>,
): DrainTable[] {
  const names = new Set<string>();
  for (const draft of drafts) for (const spanned of draft.spans.values()) for (const t of spanned) names.add(t);
  return names.size === 0 ? [] : tables.filter((t) => names.has(t.name) && !looked.has(t.name));
}

/** Why a row's tenant does not fit its target: it names none for a tenant template, or one for a single database. */
function tenantMismatch(table: DrainTable, row: OutboxRow, target: TargetConfig): Error {
  const where = `seq ${row.seq} of table "${table.name}"`;
  return new Error(
    row.tenant === null
      ? `${where} names no tenant, but target ${target.name} delivers each row to its tenant's database ({tenant} in its connection): push it with { tenant } (a row without one is never sent there)`
      : `${where} is for tenant "${row.tenant}", but target ${target.name} is one database, not a tenant template: deliver tenant "${row.tenant}"'s rows to a target whose connection names {tenant}, or push the table's rows without a tenant`,
  );
}

/**
 * A batch of these units: a unit of one table as it is, one of tables a transaction links behind their
 * fences, in commit order. Null when empty.
 */
/**
 * One batch of `drafts`: the groups that wait for their part in another table held back with their
 * lanes (linkDrafts; `waitsIn` says until when a table holds one), the rest opened behind the fence
 * of `open` and laid out in units of the tables a transaction links; null when nothing goes. `out`
 * learns when to look again, and whether a read moved on past what waits.
 */
export function openLinked(
  drafts: SliceDraft[],
  served: ReadonlySet<string>,
  waitsIn: WaitsIn,
  goneFrom: GoneFrom,
  open: OpenContext,
  out: Pick<PlanReport, "more" | "readOn" | "wakeAt">,
): SentBatch | null {
  const { held, units } = linkDrafts(drafts, served, waitsIn, goneFrom);
  const opened = new Map<SliceDraft, TableSlice>();
  for (const draft of drafts) {
    const waiting = held.get(draft);
    if (waiting !== undefined) {
      // Its groups that wait for another table hold their lanes; a known end is when to look again.
      for (const g of waiting) out.wakeAt = minWake(out.wakeAt, g.until);
      const left = draft.table.holdBack(draft, waiting);
      if (left === "read on") out.more = out.readOn = true;
      if (left !== "send") continue;
    }
    opened.set(draft, draft.table.openSlice(draft, open));
  }
  return layOut(units.map((unit) => unit.flatMap((d) => (opened.has(d) ? [opened.get(d)!] : []))));
}

export function layOut(units: TableSlice[][]): SentBatch | null {
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

/** The attempts of each group heading a unit's slices: the most any of its heads carries (see GroupAttempts). */
export function attemptsOfGroups(units: TableSlice[][]): GroupAttempts {
  const attempts = new Map<number, number>();
  for (const unit of units)
    for (const { rows } of unit) {
      const { grp, attempts: n } = rows[0]!;
      if (grp !== null) attempts.set(grp, Math.max(attempts.get(grp) ?? 0, n));
    }
  return attempts;
}

/** The answers of one slice of a batch, in the slice's order (its fence first). */
export function answersOf(batch: SentBatch, slice: TableSlice, results: WriteResult[]): WriteResult[] {
  return batch.positions.get(slice)!.map((i) => results[i]!);
}
