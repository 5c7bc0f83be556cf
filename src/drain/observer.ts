import type { OutboxRow } from "../outbox/rows.ts";
import type { Dialect } from "../vocabulary.ts";
import type { HoldReason } from "./views.ts";

/** A row as an observer sees it: the drain's own object, to read during the call, never to keep or change. */
export type ObservedRow = Pick<OutboxRow, "seq" | "grp" | "createdAt" | "attempts" | "traceparent" | "tracestate">;

/** One table's part of a batch, its rows in seq order. */
export interface ObservedSlice {
  table: string;
  rows: readonly ObservedRow[];
}

/** A batch as it goes to a target. Times are epoch ms (the drain's clock). */
export interface ObservedBatch {
  app: string;
  target: string;
  /** The built-in writer (`postgres`, …), or the `writer_class` for a custom one. */
  engine: string;
  dialect: Dialect;
  slices: readonly ObservedSlice[];
  /** Statements sent: the rows' plus one ledger fence per table. */
  statements: number;
  /** Characters of SQL text and encoded arguments of its rows. */
  bytes: number;
  /** Which attempt of its head rows this is: 1 for a first try, the largest over its slices. */
  attempt: number;
  sentAt: number;
}

/** Something that happened to the group a row heads (a failure, a dead letter), on a target. */
export interface RowEvent {
  target: string;
  table: string;
  /** The head of the group (or the row alone): its trace context is the group's. */
  head: ObservedRow;
  /** The driver's code or the error's class (`23505`, `UnsupportedStatementError`), as the log's error_class. */
  errorClass: string;
  message: string;
  at: number;
}

/**
 * What the drain tells an observer about its deliveries (tracing implements it: src/ops/tracing/).
 * Calls are synchronous, on the drain's thread, in the order things happen on each target: a
 * batch's `batchSent`, then — after its answer — the `failed`, `deadLettered` and `held` its
 * answer caused, then `batchAnswered` (or `batchLost`). Rows a table dead-letters while planning
 * (undecodable, unsupported) are told before the batch they were left out of. An observer must
 * return at once and never throw: the drain does not catch, and time spent here is delivery's.
 */
export interface DeliveryObserver {
  batchSent(batch: ObservedBatch): void;
  /** The target answered `batch`: per slice, in order, how many of its rows, from the head on, are applied. */
  batchAnswered(batch: ObservedBatch, applied: readonly number[], at: number): void;
  /**
   * `batch` got no answer (the target is down, or write_timeout passed): its rows stay queued and are settled
   * or sent again.
   */
  batchLost(batch: ObservedBatch, error: { message: string; errorClass: string }, at: number): void;
  /**
   * The group `head` heads failed attempt `attempt`; it is retried at `retryAt`, or dead-lettered (then
   * `deadLettered` follows).
   */
  failed(event: RowEvent & { attempt: number; retryAt: number }): void;
  /** The group `head` heads moved to the dead-letter log (`rows` of them). */
  deadLettered(event: RowEvent & { reason: string; rows: number }): void;
  /** A table is held back: nothing of it is sent until `until` (epoch ms; Infinity: until released). */
  held(event: { target: string; table: string; reason: HoldReason; message: string; at: number; until: number }): void;
}
