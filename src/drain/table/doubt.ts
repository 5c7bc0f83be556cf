import { describeError } from "../../errors.ts";
import type { Logger } from "../../logger.ts";
import type { DrainQueue } from "../../outbox/drain-queue.ts";
import type { OutboxRow } from "../../outbox/outbox.ts";
import type { LaneMap } from "./lane-map.ts";
import type { LedgerMove } from "./progress.ts";

/** What a table's doubt works with: who it is (for its log lines), its lanes' ledger rows, its open queue. */
export interface DoubtParts {
  table: string;
  target: string;
  logger: Logger;
  map: LaneMap;
  /** The table's queue, or null while it is not open. */
  queue: () => DrainQueue | null;
}

/**
 * A move of one ledger row by a batch of this drain still without an answer (in flight, or lost:
 * a timeout, a connection dropped, an outage): from the through its fence expects to its last row
 * there, and the rows of that ledger row it carries. `open` counts the batches that made the very
 * same move (a batch retried after an outage makes it again).
 */
interface OpenMove {
  from: number;
  to: number;
  seqs: ReadonlySet<number>;
  open: number;
}

/**
 * What this drain knows of one ledger row (of one tenant's): the highest through it saw there, its moves
 * without an answer.
 */
interface LedgerRowDoubt {
  seen: number | null;
  moves: Map<string, OpenMove>;
}

/** A slice's moves as registered when it was sent, found again at its answer. */
interface SentMove {
  key: string;
  ledgerRow: string;
  moveKey: string;
  move: OpenMove;
}

/** Unfenced slices (a target without a ledger) have one pseudo ledger row of their own: no through, no settlement. */
const UNFENCED = "\0unfenced";

/**
 * Whether a batch of this drain that carried a row may still commit, or did unanswered, and what
 * that means for the table's dead letters the remote may have applied (see LetterRemote). A letter
 * in doubt is settled from what only this drain sees:
 * - an answer that says a batch carrying it committed: the remote applied it;
 * - a committed fence of ours that moved its ledger row from below it to at or above it without
 *   carrying it: the remote had not applied it, and no batch that carries it (each expects a through
 *   below it) can commit any more — not applied;
 * - a settlement that finds its ledger row moved past it while every batch of ours that could have
 *   made that move (no answer, from below it to at or above it) carries it: applied. Only for a
 *   letter above the sent mark this drain found (the batches of an earlier process are unknown).
 * A row the drain dead-letters itself is in doubt when it was sent before this process started
 * (at or below that mark) or a batch of ours without an answer carries it. What cannot be settled
 * stays in doubt: safe, and the operator sees it (status, dead-letter list).
 */
export class TableDoubt {
  /**
   * The sent mark when this process first opened the queue: rows at or below it may be in a batch of an
   * earlier process.
   */
  #startMark: number | null = null;
  /** By tenant and ledger row (see #key). */
  readonly #rows = new Map<string, LedgerRowDoubt>();
  /** The moves each slice without an answer made: a slice lost is forgotten with it, its moves stay open. */
  readonly #sent = new WeakMap<object, SentMove[]>();

  constructor(private readonly parts: DoubtParts) {}

  /** The queue is open: the first time, its sent mark says which rows an earlier process may have sent. */
  opened(queue: DrainQueue): void {
    if (this.#startMark !== null) return;
    try {
      this.#startMark = queue.sentMark();
    } catch {
      // Unknown: every row the drain dead-letters is in doubt until a later open reads it.
    }
  }

  /** A slice of `rows` goes out (fenced: moving `moves`, each row in the ledger row of its slot in `slots`). */
  sent(
    slice: object,
    rows: readonly OutboxRow[],
    moves: readonly LedgerMove[] | null,
    slots?: readonly number[],
  ): void {
    const tenant = rows[0]!.tenant;
    const made: SentMove[] = [];
    if (moves === null) {
      made.push(this.#open(tenant, UNFENCED, -1, rows[rows.length - 1]!.seq, new Set(rows.map((r) => r.seq))));
    } else {
      const { map } = this.parts;
      const byRow = new Map<string, Set<number>>();
      rows.forEach((row, i) => {
        const ledgerRow = map.ledgerRow(slots?.[i] ?? map.slotOf(row));
        const seqs = byRow.get(ledgerRow) ?? new Set<number>();
        byRow.set(ledgerRow, seqs.add(row.seq));
      });
      for (const m of moves) made.push(this.#open(tenant, m.ledgerRow, m.through, m.last, byRow.get(m.ledgerRow)!));
    }
    this.#sent.set(slice, made);
  }

  #open(tenant: string | null, ledgerRow: string, from: number, to: number, seqs: Set<number>): SentMove {
    const key = this.#key(tenant, ledgerRow);
    let row = this.#rows.get(key);
    if (row === undefined) this.#rows.set(key, (row = { seen: null, moves: new Map() }));
    const moveKey = `${from}:${to}:${seqs.size}`;
    let move = row.moves.get(moveKey);
    if (move === undefined) row.moves.set(moveKey, (move = { from, to, seqs, open: 0 }));
    move.open += 1;
    return { key, ledgerRow, moveKey, move };
  }

  /**
   * A slice's answer: its first `applied` rows committed (fenced: all or none), or — null — what
   * it did is unknown (its moves stay open). Settles the letters in doubt the answer explains.
   */
  answered(slice: object, applied: number | null): void {
    const made = this.#sent.get(slice);
    if (made === undefined || applied === null) return;
    this.#sent.delete(slice);
    for (const m of made) {
      const row = this.#rows.get(m.key);
      if (row === undefined) continue;
      if (--m.move.open === 0) row.moves.delete(m.moveKey);
      if (applied > 0 && m.ledgerRow !== UNFENCED) row.seen = Math.max(row.seen ?? 0, m.move.to);
    }
    if (applied > 0) this.#settleAnswered(made, applied);
    for (const m of made) this.#prune(m.key);
  }

  /** The letters a committed slice explains: those it carried were applied; those its fences passed over, not. */
  #settleAnswered(made: readonly SentMove[], applied: number): void {
    const unfenced = made[0]!.ledgerRow === UNFENCED;
    let low = Number.POSITIVE_INFINITY;
    let high = 0;
    for (const { move } of made) {
      low = Math.min(low, unfenced ? Math.min(...move.seqs) - 1 : move.from);
      high = Math.max(high, move.to);
    }
    const tenant = this.#tenantOf(made[0]!.key);
    // Without a ledger a writer may commit a slice's first rows only (the rows are in slice order).
    const prefix = unfenced ? new Set([...made[0]!.move.seqs].slice(0, applied)) : null;
    const verdicts = this.#read(low, high, tenant, (letter, ledgerRow) => {
      if (prefix !== null) return prefix.has(letter) ? "applied" : null;
      const move = made.find((m) => m.ledgerRow === ledgerRow)?.move;
      if (move === undefined || !(move.from < letter && letter <= move.to)) return null;
      return move.seqs.has(letter) ? "applied" : "not applied";
    });
    this.#record(verdicts, "an answer");
  }

  /**
   * Settlement read the ledger rows of `tenant` (`throughs` by name; a row it lacks is at 0): a
   * move past a letter in doubt that only a batch of ours carrying it can have made says it was
   * applied. Moves that can no longer commit (their ledger row is past where they expect it) close.
   */
  settled(throughs: ReadonlyMap<string, number>, tenant: string | null = null): void {
    const start = this.#startMark;
    const prefix = `${tenant ?? ""}\0`;
    const ranges = new Map<string, { after: number; through: number }>();
    for (const [key, row] of this.#rows) {
      if (!key.startsWith(prefix) || key.endsWith(UNFENCED)) continue;
      const through = throughs.get(key.slice(prefix.length)) ?? 0;
      if (start !== null) {
        const after = Math.max(row.seen ?? start, start);
        if (through > after && row.moves.size > 0) ranges.set(key.slice(prefix.length), { after, through });
      }
      row.seen = Math.max(row.seen ?? 0, through);
    }
    if (ranges.size > 0) {
      let low = Number.POSITIVE_INFINITY;
      let high = 0;
      for (const r of ranges.values()) {
        low = Math.min(low, r.after);
        high = Math.max(high, r.through);
      }
      const verdicts = this.#read(low, high, tenant, (letter, ledgerRow) => {
        const range = ranges.get(ledgerRow);
        if (range === undefined || letter <= range.after || letter > range.through) return null;
        const movers = [...this.#rows.get(this.#key(tenant, ledgerRow))!.moves.values()].filter(
          (m) => m.from < letter && letter <= m.to,
        );
        return movers.length > 0 && movers.every((m) => m.seqs.has(letter)) ? "applied" : null;
      });
      this.#record(verdicts, "the ledger");
    }
    for (const key of [...this.#rows.keys()]) if (key.startsWith(prefix)) this.#prune(key);
  }

  /**
   * Whether a batch carrying `row` may still commit, or did unanswered: the drain dead-letters it
   * "in doubt" then. True when it may have been sent before this process (or that is unknown).
   */
  inDoubt(row: Pick<OutboxRow, "seq" | "tenant">): boolean {
    if (this.#startMark === null || row.seq <= this.#startMark) return true;
    const prefix = `${row.tenant ?? ""}\0`;
    for (const [key, ledgerRow] of this.#rows) {
      if (!key.startsWith(prefix)) continue;
      for (const move of ledgerRow.moves.values()) if (move.seqs.has(row.seq)) return true;
    }
    return false;
  }

  /**
   * Closes the moves of a ledger row that can no longer commit (it is past where they expect it); forgets a
   * row with none left.
   */
  #prune(key: string): void {
    const row = this.#rows.get(key);
    if (row === undefined) return;
    if (row.seen !== null) for (const [k, m] of row.moves) if (m.from < row.seen) row.moves.delete(k);
    if (row.moves.size === 0) this.#rows.delete(key);
  }

  /**
   * The letters in doubt of `tenant` in `(after, through]`, each with what `verdict` says of it (null:
   * nothing yet).
   */
  #read(
    after: number,
    through: number,
    tenant: string | null,
    verdict: (seq: number, ledgerRow: string) => "applied" | "not applied" | null,
  ): Map<"applied" | "not applied", number[]> {
    const out = new Map<"applied" | "not applied", number[]>([
      ["applied", []],
      ["not applied", []],
    ]);
    const queue = this.parts.queue();
    if (queue === null || through <= after) return out;
    try {
      const { map } = this.parts;
      for (const letter of queue.lettersInDoubt(after, through)) {
        if (letter.tenant !== tenant) continue;
        const said = verdict(letter.seq, map.ledgerRow(map.slotOf(letter)));
        if (said !== null) out.get(said)!.push(letter.seq);
      }
    } catch (error) {
      this.#failed(error);
    }
    return out;
  }

  /** Writes what was learnt of letters in doubt, and says so. */
  #record(verdicts: Map<"applied" | "not applied", number[]>, from: string): void {
    const queue = this.parts.queue();
    if (queue === null) return;
    const { table, target, logger } = this.parts;
    for (const [remote, seqs] of verdicts) {
      if (seqs.length === 0) continue;
      try {
        if (queue.settleLetters(seqs, remote) === 0) continue;
      } catch (error) {
        this.#failed(error);
        continue;
      }
      const which = `dead letter${seqs.length > 1 ? "s" : ""} ${seqs.join(", ")} of "${table}"`;
      logger.info(
        remote === "applied"
          ? `drain: ${which} on ${target}: applied by the remote after they were dead-lettered (${from} says so); they are never replayed (discard them)`
          : `drain: ${which} on ${target}: settled, the remote never applied them (${from} says so); they may be replayed`,
        { target, namespace: table, seq: seqs[0]!, rows: seqs.length },
      );
    }
  }

  #failed(error: unknown): void {
    const { table, target, logger } = this.parts;
    logger.warn(
      `drain: reading or settling the dead letters in doubt of "${table}" failed; they stay in doubt: ${describeError(error).message}`,
      { target, namespace: table },
    );
  }

  #key(tenant: string | null, ledgerRow: string): string {
    return `${tenant ?? ""}\0${ledgerRow}`;
  }

  #tenantOf(key: string): string | null {
    const tenant = key.slice(0, key.indexOf("\0"));
    return tenant === "" ? null : tenant;
  }
}
