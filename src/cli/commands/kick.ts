import { defineCommand } from "citty";
import { drainHome } from "../../drain/home.ts";
import { lockHolder } from "../../drain/lock.ts";
import { NotFoundError } from "../../errors.ts";
import { jsonArg, locationArgs, logArgs } from "../args.ts";
import { print } from "../text-output.ts";
import { locationExists, resolveLocations } from "../locations.ts";

/**
 * `sqloutbox kick`: asks the drain of each db_dir to retry now — every backed-off target and
 * every held table — by sending it SIGUSR2. For the operator who just fixed the remote and should
 * not wait out a backoff. Only a drain that holds the db_dir's lock is signalled (a PID left in a
 * lock file nobody holds is never signalled); exit 1 when no drain runs on any of them.
 */
export const kick = defineCommand({
  meta: {
    name: "kick",
    description: "Make the running drain retry now: backed-off targets and held tables (sends it SIGUSR2)",
  },
  args: { ...locationArgs, ...jsonArg, ...logArgs },
  async run({ args }) {
    const locations = await resolveLocations(args);
    const kicked: Array<{ app: string | null; dbDir: string; dbFile: string | null; pid: number | null }> = [];
    for (const loc of locations.dirs) {
      const pid = locationExists(loc) ? lockHolder(drainHome(loc).lockFile) : null;
      if (pid !== null) process.kill(pid, "SIGUSR2");
      kicked.push({ app: loc.app, dbDir: loc.dbDir, dbFile: loc.dbFile, pid });
    }
    const where = (k: (typeof kicked)[number]) => k.dbFile ?? k.dbDir;
    if (args.json) print(JSON.stringify({ action: "kick", drains: kicked }, null, 2));
    else
      for (const k of kicked)
        print(
          k.pid === null
            ? `no drain is running on ${where(k)}`
            : `asked the drain (pid ${k.pid}) on ${where(k)} to retry now`,
        );
    if (kicked.every((k) => k.pid === null))
      throw new NotFoundError(`no drain is running on ${kicked.map(where).join(", ")}`);
  },
});
