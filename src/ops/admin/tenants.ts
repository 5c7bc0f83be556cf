// The admin API's tenants (SPEC §4c): a tenant's name checked as a push checks it, and its rows'
// backoff ended in every app's queue files (`kick --tenant`). Looking one tenant up — its rows and
// its hold, as `status --tenant T` has them — is the runservice's `tenant` source.
import fs from "node:fs";
import { queueFilesOf } from "../../outbox/files.ts";
import { backedOffTenantRows, withTenantQueue } from "../../outbox/tenant-actions.ts";
import { mayHoldTenantRows } from "../../outbox/tenant-backlog.ts";
import { tenantNameProblem } from "../../tenant.ts";
import type { AdminApp } from "./locations.ts";
import { RequestError } from "./requests.ts";
import { headView, type RetriedHeadView } from "./tables.ts";

/** `value` as a tenant name, or a 400: a name no push accepts names no tenant, and never reaches a query. */
export function tenantName(value: string): string {
  const problem = tenantNameProblem(value);
  if (problem !== null) throw new RequestError(400, "E_USAGE", `tenant: ${problem}`);
  return value;
}

/**
 * Ends the backoff of `tenant`'s rows in every app's files that may hold them (read-only first:
 * the others are not opened for writing), in place, with their attempts. Files that cannot be read
 * are listed, not fatal. The caller then ends the drain's holds (retryNow).
 */
export function retryTenant(
  apps: readonly AdminApp[],
  tenant: string,
): { heads: RetriedHeadView[]; unreadable: Array<{ file: string; error: string }> } {
  const heads: RetriedHeadView[] = [];
  const unreadable: Array<{ file: string; error: string }> = [];
  for (const app of apps) {
    if (!fs.existsSync(app.dbFile ?? app.dbDir)) continue;
    for (const file of queueFilesOf(app).filter(mayHoldTenantRows)) {
      try {
        const backedOff = backedOffTenantRows(file, tenant);
        if (backedOff.length === 0) continue;
        for (const { namespace, ...row } of withTenantQueue(file, backedOff[0]!.namespace, (q) => q.retry(tenant)))
          heads.push(headView(app.name, namespace, row));
      } catch (error) {
        unreadable.push({ file, error: (error as Error).message });
      }
    }
  }
  return { heads, unreadable };
}
