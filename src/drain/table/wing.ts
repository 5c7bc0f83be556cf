import type { TableConfig } from "../../config/types.ts";
import type { DrainQueue } from "../../outbox/drain-queue.ts";
import { HeadCharges } from "./charges.ts";
import { TableDoubt } from "./doubt.ts";
import { TableFile } from "./file.ts";
import { TableHolds } from "./holds.ts";
import { TableLanes } from "./lanes.ts";
import { HeadPlanning } from "./planning.ts";
import { TableProgress } from "./progress.ts";
import { BackgroundPrune } from "./prune.ts";
import { ReadAhead } from "./read-ahead.ts";
import type { TablePartsOf } from "./slice.ts";
import type { AnsweredParts } from "./answered.ts";
import { TableTenants, type TableTenantsParts } from "./tenants.ts";

/** The parts of one table's wing: each the one writer of its own state, wired to the others it asks. */
export interface TableWing {
  file: TableFile;
  holds: TableHolds;
  lanes: TableLanes;
  progress: TableProgress;
  planning: HeadPlanning;
  ahead: ReadAhead;
  charges: HeadCharges;
  prune: BackgroundPrune;
  doubt: TableDoubt;
  /** What applying an answer works with (see applyTableAnswer). */
  answerParts: AnsweredParts;
  tenants: TableTenants;
}

/** What the wing asks of the table it serves. */
export interface TableFace extends Pick<TableTenantsParts, "held" | "settled"> {
  unsettle(tenant: string | null): void;
}

/**
 * Builds the wing of the table `config` names, whose file is `path`, served by the runner that
 * gave `parts`; `open` opens its queue. In compatibility mode nothing is sent before the setup
 * is done (compat.ts): the table starts waiting for it.
 */
export function tableWing(
  config: TableConfig,
  path: string,
  parts: Omit<TablePartsOf<unknown>, "opener">,
  open: () => DrainQueue,
  face: TableFace,
): TableWing {
  const { app, target, logger, now, scheduler } = parts;
  const table = config.name;
  const lanes = new TableLanes(table, config.lanes, parts.tenanted === true);
  const holds = new TableHolds({ table, target, file: path }, logger, parts.observer);
  const file = new TableFile({ table, path, shared: app.dbFile !== null, open, holds, lanes, config });
  const doubt = new TableDoubt({ table, target, logger, map: lanes.map, queue: () => file.queue });
  const charges = new HeadCharges({ ...parts, table, inDoubt: (row) => doubt.inDoubt(row) });
  const queue = () => file.queue;
  const progress = new TableProgress({
    table,
    target,
    logger,
    lanes,
    queue: () => file.queue!,
    batchMaxBytes: app.batchMaxBytes,
  });
  const planning = new HeadPlanning({ app, lanes, progress, holds, charges, now });
  const ahead = new ReadAhead({ app, lanes, progress, queue });
  const retain = { retainLogDays: config.retainLogDays, retainReplayedDays: app.retainReplayedDays };
  const prune = new BackgroundPrune({ table, file: path, ...retain, logger, now, scheduler, queue });
  if (config.injectOutboxSeq) holds.wait("compat setup", now());
  const answerParts: AnsweredParts = {
    queue: () => file.queue!,
    progress,
    lanes,
    charges,
    holds,
    doubt,
    now,
    unsettle: (tenant) => face.unsettle(tenant),
    ...(parts.tenantFault ? { tenantFault: parts.tenantFault } : {}),
  };
  const tenants = new TableTenants({ file, holds, lanes, progress, now, held: face.held, settled: face.settled });
  return { file, holds, lanes, progress, planning, ahead, charges, prune, doubt, answerParts, tenants };
}
