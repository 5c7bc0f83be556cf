import type { AppConfig } from "../../config/types.ts";
import type { Logger } from "../../logger.ts";
import type { DrainQueue } from "../../outbox/drain-queue.ts";
import type { OutboxRow } from "../../outbox/outbox.ts";
import type { Statement } from "../../writers/writer.ts";
import type { Scheduler } from "../../scheduler.ts";
import type { DeliveryObserver } from "../observer.ts";
import type { PlannedSlice } from "./planning.ts";
import type { LedgerMove } from "./progress.ts";

export type { LedgerMove } from "./progress.ts";

/*
 * What a table and the runner of its target say to each other: the drafts and slices of a batch,
 * and what the runner lends the table to plan and open them. `T` is the table (DrainTable, which
 * re-exports each of these with it filled in): the runner gets it back from the draft it carries.
 */

/**
 * A table's rows read and converted for a batch, before its fence and its head's charge: whole
 * groups only, of which the runner may still hold some back (a group that spans tables goes only
 * when it heads every table it touches: see DrainTable.holdBack). The rows keep their bookkeeping
 * only; SQL text and payload live on in `stmts` alone, so a large row is held in memory once.
 */
export interface SliceDraftOf<T> extends PlannedSlice {
  table: T;
}

/** One table's part of a target's batch: the fence (when the target keeps a ledger), then its rows. */
export interface TableSliceOf<T> extends SliceDraftOf<T> {
  /** Its first statement is the fence that moves every ledger row its rows move (the target keeps a ledger). */
  fenced: boolean;
  /**
   * Sent behind another slice of this table still in flight (see DrainTable.openBehind): the
   * through its fence expects, where that one moves the ledger — with lanes, every slot's (see
   * LaneMap), where the ledger is once that one is applied.
   */
  behind?: number | readonly number[];
}

/** What the runner lends a table to plan its slice. */
export interface PlanContextOf<T> {
  now: number;
  /** Bytes of SQL text and payload this table may still add to the batch. */
  maxBytes: number;
  /**
   * Decodes and converts one row into the statement sent for it; throws InvalidArgumentError (undecodable) or
   * UnsupportedStatementError.
   */
  prepare(table: T, row: OutboxRow): Statement;
  /**
   * Deliver whatever is pending, threshold and wait or not (a group that spans tables waits at this table's
   * head); a backoff still holds it.
   */
  force?: boolean;
  /**
   * A tenant template's: the tenants whose rows this plan reads (null: the rows without one), each planned on
   * its own.
   */
  tenants?: ReadonlyArray<string | null>;
}

/** What the runner lends a table to open its slice: the fence, or null without a ledger. */
export interface OpenContextOf<T> {
  now: number;
  /** The fence statement that opens this table's slice, moving each of its ledger rows. */
  fence: ((table: T, moves: readonly LedgerMove[]) => Statement) | null;
}

/** What the runner of the target that serves a table gives it. */
export interface TablePartsOf<T> {
  app: AppConfig;
  /** The target's name. */
  target: string;
  logger: Logger;
  /** Opens the table's queue: its own file (db_dir), or its namespace of the app's db_file. */
  opener: (table: T) => DrainQueue;
  /** Told of failures, dead letters and holds (tracing); null: nobody listens. */
  observer: DeliveryObserver | null;
  /** The drain's clock (epoch ms): every time a table stores (a head's retry time) or compares is from it. */
  now: () => number;
  /** Where the background prune's pauses come from. */
  scheduler: Scheduler;
  /** The target is a tenant template: each row goes to its tenant's database, each tenant its own lanes (SPEC §4c). */
  tenanted?: boolean;
  /**
   * A tenant template's: `tenant`'s database lacks what a statement needs (a table, the ledger): that tenant
   * is held, not the table.
   */
  tenantFault?: (tenant: string, message: string) => void;
}

/**
 * The attempts each group that spans tables has had, by group: the most any of its heads carries
 * (before this batch's charge). A failure is charged to the head in the table whose row failed;
 * when that is not always the same table, the count still goes on from the group's, not restart
 * from that head's own.
 */
export type GroupAttempts = ReadonlyMap<number, number>;

/**
 * A group of a draft that waits for a group of another table (see linkDrafts): its rows `[start, end)`, and
 * until when.
 */
export interface WaitingGroup {
  start: number;
  end: number;
  /** When it may go at the earliest (epoch ms), if the tables that hold it know; null: read it again. */
  until: number | null;
  /** The tables whose part of a group holds it back (its own, or one before it in its lanes). */
  waitsOn: string[];
}
