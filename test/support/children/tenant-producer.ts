// A producer process for the tenant kill oracle (argv JSON: { dbFile, seed, tenants, stopFile,
// recreatedFile, recreated }): pushes the TenantMix stream, a random tenant's next group at a time,
// into its db_file until `stopFile` exists, then prints one JSON line: the last group pushed of each
// tenant, and `firstAfter` — the first group of tenant `recreated` pushed after this process saw
// `recreatedFile` (its database dropped and made anew by then), or null if it never did.
import fs from "node:fs";
import { SQLMiddleware } from "../../../src/outbox/middleware.ts";
import { rng, tenantGroup } from "../tenant-mix.ts";

const spec = JSON.parse(process.argv[2]!) as {
  dbFile: string;
  seed: number;
  tenants: string[];
  stopFile: string;
  recreatedFile: string;
  recreated: string;
};
const mw = new SQLMiddleware({ dbFile: spec.dbFile, source: "tenant-producer" });
const next = rng(spec.seed);
const last: Record<string, number> = Object.fromEntries(spec.tenants.map((t) => [t, 0]));
let firstAfter: number | null = null;
let n = 0;
while (!fs.existsSync(spec.stopFile)) {
  // Looked at before the group is pushed: a group numbered firstAfter or later was pushed after the recreate.
  if (firstAfter === null && fs.existsSync(spec.recreatedFile)) firstAfter = last[spec.recreated]! + 1;
  const tenant = spec.tenants[Math.floor(next() * spec.tenants.length)]!;
  const group = tenantGroup(spec.seed, tenant, ++last[tenant]!);
  if (group.length === 1) mw.push(group[0]!.table, group[0]!.sql, group[0]!.args, { tenant });
  else
    mw.transaction(
      () => {
        for (const s of group) mw.push(s.table, s.sql, s.args);
      },
      { tenant },
    );
  n += 1;
  if (n % 2 === 0) await Bun.sleep(10);
}
process.stdout.write(`${JSON.stringify({ last, firstAfter })}\n`);
