import { defineCommand } from "citty";
import { drainHome } from "../../drain/home.ts";
import { lockHolder } from "../../drain/lock.ts";
import { NotFoundError, UsageError } from "../../errors.ts";
import { retryBackedOffHeads } from "../../outbox/outbox.ts";
import { backedOffTenantRows, withTenantQueue } from "../../outbox/tenant-actions.ts";
import { tenantNameProblem } from "../../tenant.ts";
import { tenantFilesOf } from "../tenant-report.ts";
import { appArg, jsonArg, locationArgs, logArgs, namespaceFilterArg } from "../args.ts";
import { print } from "../text-output.ts";
import { appDirs, filesOf, locationExists, namespaceFile, resolveLocations, type Location } from "../locations.ts";

/** A head whose backoff this kick ended. */
interface RetriedHeadEntry {
  app: string | null;
  namespace: string;
  file: string;
  seq: number;
  attempts: number;
  /** When it was due before the kick (null: its group's backoff was on another table's head). */
  nextAttemptAt: string | null;
}

/**
 * `sqloutbox kick`: retry now. Ends the backoff of every backed-off head (of every namespace, or
 * of `--app`/`--namespace`; with `--tenant T`, of that tenant's rows, SPEC §4c) in its queue file
 * — in place, with its attempts, unlike `skip` — then asks the drain of each location to look at
 * once by sending it SIGUSR2, which also ends every target's backoff, every timed table hold and
 * every held tenant's hold. For the operator who just fixed the cause and should not wait out a
 * backoff. Only a drain that holds the location's lock is signalled (a PID left in a lock file
 * nobody holds is never signalled); exit 1 when no drain runs on any of them (the heads' backoff
 * is ended all the same: the next drain retries them at once).
 */
export const kick = defineCommand({
  meta: {
    name: "kick",
    description:
      "Retry now: end the backoff of stuck heads, backed-off targets and held tables (then SIGUSR2 the drain)",
  },
  args: {
    ...locationArgs,
    ...appArg,
    ...namespaceFilterArg,
    key: {
      type: "string",
      valueHint: "K",
      description: "With --namespace, in a table with lanes: only the head of that key's lane (the key status shows)",
    },
    tenant: {
      type: "string",
      valueHint: "T",
      description:
        "Only that tenant's rows (every table); the drain is still signalled, which retries every held tenant now",
    },
    ...jsonArg,
    ...logArgs,
  },
  async run({ args }) {
    const locations = await resolveLocations(args);
    const only = args.namespace;
    if (args.key !== undefined && only === undefined)
      throw new UsageError("--key K needs --namespace N: a key is a key of one table");
    if (args.key === "") throw new UsageError("--key needs a key");
    const tenant = args.tenant;
    if (tenant !== undefined) {
      const problem = tenantNameProblem(tenant);
      if (problem !== null) throw new UsageError(`--tenant: ${problem}`);
      if (only !== undefined || args.key !== undefined)
        throw new UsageError(
          "--tenant ends the backoff of that tenant's rows in every table: not with --namespace or --key",
        );
    }
    // A named namespace must exist (and be a table name): a typo is an error, not a kick of nothing.
    const dirs =
      only === undefined ? appDirs(locations, args.app) : [namespaceFile(locations, only, args.app).location];
    const heads: RetriedHeadEntry[] = [];
    const drains: Array<{ app: string | null; dbDir: string; dbFile: string | null; pid: number | null }> = [];
    for (const loc of dirs) {
      if (locationExists(loc))
        heads.push(...(tenant === undefined ? retryHeads(loc, only, args.key) : retryTenant(loc, tenant)));
      const pid = locationExists(loc) ? lockHolder(drainHome(loc).lockFile) : null;
      if (pid !== null) process.kill(pid, "SIGUSR2");
      drains.push({ app: loc.app, dbDir: loc.dbDir, dbFile: loc.dbFile, pid });
    }
    const where = (d: (typeof drains)[number]) => d.dbFile ?? d.dbDir;
    if (args.json) print(JSON.stringify({ action: "kick", ...(tenant && { tenant }), heads, drains }, null, 2));
    else {
      if (tenant !== undefined && heads.length === 0) print(`no row of tenant ${tenant} was backing off`);
      for (const h of heads)
        print(
          `ended the backoff of ${h.app === null ? "" : `${h.app}/`}${h.namespace} head seq ${h.seq} (${h.attempts} attempt${h.attempts === 1 ? "" : "s"}), ${h.file}`,
        );
      for (const d of drains)
        print(
          d.pid === null
            ? `no drain is running on ${where(d)}`
            : `asked the drain (pid ${d.pid}) on ${where(d)} to retry now`,
        );
    }
    if (drains.every((d) => d.pid === null))
      throw new NotFoundError(`no drain is running on ${drains.map(where).join(", ")}`);
  },
});

/** Ends the backoff of each backed-off head of a location (of namespace `only`, when given), in its file. */
function retryHeads(loc: Location, only: string | undefined, key: string | undefined): RetriedHeadEntry[] {
  const retried: RetriedHeadEntry[] = [];
  for (const file of filesOf(loc))
    for (const head of retryBackedOffHeads(file, { namespace: only, key }))
      retried.push({ app: loc.app, file, ...head });
  return retried;
}

/**
 * Ends the backoff of `tenant`'s rows in each file of a location that holds any (read-only first: other files
 * are not opened for writing).
 */
function retryTenant(loc: Location, tenant: string): RetriedHeadEntry[] {
  const retried: RetriedHeadEntry[] = [];
  for (const file of tenantFilesOf(loc)) {
    const backedOff = backedOffTenantRows(file, tenant);
    if (backedOff.length === 0) continue;
    for (const row of withTenantQueue(file, backedOff[0]!.namespace, (q) => q.retry(tenant)))
      retried.push({ app: loc.app, file, ...row });
  }
  return retried;
}
