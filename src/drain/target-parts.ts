import type { AppConfig } from "../config/types.ts";
import type { Logger } from "../logger.ts";
import type { Scheduler } from "../scheduler.ts";
import type { Dialect } from "../vocabulary.ts";
import type { BoundedWriter } from "./bounded-writer.ts";
import type { TargetLedger } from "./ledger.ts";
import type { Reachability } from "./reachability.ts";
import type { DrainTable } from "./table/table.ts";

/**
 * What every part of one target's runner (its setup, its loop, its delivery) is given: the target's own
 * things, built once by TargetRunner.
 */
export interface TargetParts {
  name: string;
  app: AppConfig;
  tables: DrainTable[];
  reachability: Reachability;
  logger: Logger;
  /** The drain's clock (epoch ms; tests may shift it). */
  now: () => number;
  /** Where every sleep, timer and timeout of the drain comes from (see Scheduler). */
  scheduler: Scheduler;
}

/**
 * What the parts that talk to the remote add: its dialect, its writer (bounded by write_timeout;
 * null for a tenant template, whose tenants' databases have theirs) and its ledger, if it keeps one.
 */
export interface RemoteParts extends TargetParts {
  dialect: Dialect;
  writer: BoundedWriter | null;
  ledger: TargetLedger | null;
}
