import type { AppConfig, TableConfig, TargetConfig } from "../config/types.ts";
import type { Logger } from "../logger.ts";
import type { Outbox } from "../outbox/outbox.ts";
import type { Dialect, OutboxWriter } from "../writers/writer.ts";
import type { RewriteCache } from "./rewrite-cache.ts";

/** One table a target drains: its config, its long-lived Outbox and its local-error hold. */
export interface ServedTable {
  config: TableConfig;
  outbox: Outbox;
  /** Absolute path of `{db_dir}/{table}.db`. */
  file: string;
  /** Epoch ms before which this table is left alone after a local SQLite error. */
  holdUntil: number;
  /** Consecutive local errors, for the hold's exponential growth. */
  localErrors: number;
  /** The chain gap last reported for this table, so a held gap is logged once, not every cycle. */
  reportedGap: number | null;
  /**
   * The remote's `MAX(outbox_seq)` as last read once this drain's own sent rows were settled
   * (startup, reconcile): a pending head at or below it was never applied by us and must be
   * moved above it before delivery (resequenceAboveRemote). 0 = nothing known.
   */
  remoteMark: number;
  /**
   * The queue had no history when the drain opened it (nothing delivered or dead-lettered, head
   * not linked back): only then can rows at or below `remoteMark` be another queue's seqs rather
   * than rows an earlier drain applied without recording `sent_through` (the reference's drain).
   */
  freshQueue: boolean;
  /** The mark last reported as "not resequenced" for a queue with history (logged once). */
  reportedMark: number;
  /** A timed-out batch carrying this (non-injected) table may still commit: not planned until it answers. */
  awaitingLateAnswer: boolean;
}

/** Everything one target's loop needs; `dialect` is resolved once at construction. */
export interface TargetContext {
  target: TargetConfig;
  app: AppConfig;
  writer: OutboxWriter;
  dialect: Dialect;
  tables: ServedTable[];
  logger: Logger;
  now: () => number;
  /** Memoised statement rewriting for this target's dialect and compat setting. */
  rewrites: RewriteCache;
}

/** The dialect a target's statements are written in: the config's, else the writer's, else sqlite. */
export function targetDialect(target: TargetConfig, writer: OutboxWriter): Dialect {
  return target.dialect ?? writer.dialect ?? "sqlite";
}

/** Holds a table after a local SQLite error: 100 ms doubling to 30 s, so a broken file is retried, not spun on. */
export function holdAfterLocalError(table: ServedTable, now: number): number {
  table.localErrors += 1;
  const ms = Math.min(100 * 2 ** Math.min(table.localErrors - 1, 20), 30_000);
  table.holdUntil = now + ms;
  return ms;
}

/** Clears a table's local-error hold after a clean pass. */
export function clearLocalHold(table: ServedTable): void {
  table.localErrors = 0;
  table.holdUntil = 0;
}

/** A short, credential-free description of anything thrown. */
export function describeError(error: unknown): { message: string; errorClass: string } {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return { message: error.message, errorClass: typeof code === "string" && code ? code : error.name };
  }
  return { message: String(error), errorClass: typeof error };
}
