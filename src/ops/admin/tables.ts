// The admin API's actions on tables: retry a head now, skip a head to the dead letters, kick.
// Each is the operator's Outbox method the CLI uses (retryHead, skipHead): one IMMEDIATE
// transaction in the table's file, safe while the drain runs; kick also ends the drain's backoffs.
import fs from "node:fs";
import { InvalidArgumentError } from "../../errors.ts";
import { queueFilesOf } from "../../outbox/files.ts";
import { retryBackedOffHeads, withOutbox } from "../../outbox/outbox.ts";
import type { AdminApp, AdminTable } from "./locations.ts";
import { RequestError } from "./requests.ts";

/** A head whose backoff was ended: where, its seq and attempts, and when it was due before. */
export interface RetriedHeadView {
  id: string;
  app: string;
  namespace: string;
  seq: number;
  attempts: number;
  next_attempt_at: string | null;
}

/**
 * Ends the backoff of the table's head (and its group's, in every table) — with `key`, of that
 * key's lane's head — tried at the drain's next look, in place. Null: it was not backing off.
 */
export function retryTable(table: AdminTable, key?: string | number): RetriedHeadView | null {
  const head = withOutbox(table.file, table.namespace, (outbox) => outbox.retryHead(key));
  return head === null ? null : headView(table.app.name, table.namespace, head);
}

/**
 * Moves the table's head `seq` to the dead letters (reason "skipped"), with its group, so the
 * table flows again; `seq` is the head the operator saw: a head that moved on meanwhile is a 409
 * and nothing moves.
 */
export function skipTableHead(table: AdminTable, seq: number): { moved: number[]; also_in: string[] } {
  if (table.health.headSeq !== seq)
    throw new RequestError(
      409,
      "E_CONFLICT",
      `seq ${seq} is not the head of ${table.app.name}/${table.namespace} (the head is ${table.health.headSeq ?? "none: the table is empty"}): nothing was moved`,
    );
  try {
    const moved = withOutbox(table.file, table.namespace, (outbox) => outbox.skipHead(seq));
    return { moved: moved.seqs, also_in: moved.others };
  } catch (error) {
    // Between the read and the transaction the drain delivered it or another operator moved it.
    if (error instanceof InvalidArgumentError) throw new RequestError(409, "E_CONFLICT", error.message);
    throw error;
  }
}

/**
 * Ends the backoff of every backed-off head of every app's files (read-only first: only tables
 * with a backoff are opened for writing), then `retryNow` (every target's backoff and every timed
 * table hold, as SIGUSR2). Files that cannot be read are listed, not fatal.
 */
export function kickAll(
  apps: readonly AdminApp[],
  retryNow: () => void,
): { heads: RetriedHeadView[]; unreadable: Array<{ file: string; error: string }> } {
  const heads: RetriedHeadView[] = [];
  const unreadable: Array<{ file: string; error: string }> = [];
  for (const app of apps) {
    if (!fs.existsSync(app.dbFile ?? app.dbDir)) continue;
    for (const file of queueFilesOf(app)) {
      try {
        for (const { namespace, ...head } of retryBackedOffHeads(file)) heads.push(headView(app.name, namespace, head));
      } catch (error) {
        unreadable.push({ file, error: (error as Error).message });
      }
    }
  }
  retryNow();
  return { heads, unreadable };
}

/** A row whose backoff was ended, as the API names it (`id` is `app/namespace/seq`). */
export function headView(
  app: string,
  namespace: string,
  head: { seq: number; attempts: number; nextAttemptAt: string | null },
): RetriedHeadView {
  return {
    id: `${app}/${namespace}/${head.seq}`,
    app,
    namespace,
    seq: head.seq,
    attempts: head.attempts,
    next_attempt_at: head.nextAttemptAt,
  };
}
