// `skip --tenant T`: a tenant whose database is gone for good holds its rows forever; this moves
// them aside into the dead letters (reason tenant_gone), whole groups, so nothing is lost — a replay
// brings them back if the tenant returns, `dead-letter purge` deletes them — and the queue no longer
// carries them. Counted first, as `dead-letter discard` is: a dry run prints the count, the real run
// needs it back (`--expect`), and each file's transaction checks its rows are still those.
import { drainHome } from "../../drain/home.ts";
import { lockHolder } from "../../drain/lock.ts";
import { OutboxError, UsageError } from "../../errors.ts";
import { planTenantSkip, TENANT_GONE, type TenantRowsAside, withTenantQueue } from "../../outbox/tenant-actions.ts";
import { tenantNameProblem } from "../../tenant.ts";
import { appDirs, locationExists, resolveLocations } from "../locations.ts";
import { tenantFilesOf } from "../tenant-report.ts";
import { print, renderTable, shellWord } from "../text-output.ts";
import { type FileFailure, failIf, recorder } from "./dead-letter/letters.ts";
import { expectOf } from "./dead-letter/selection.ts";

/** The flags `skip --tenant` reads. */
export interface SkipTenantArgs {
  config?: string;
  "db-dir"?: string;
  "db-file"?: string;
  app?: string;
  tenant: string;
  expect?: string;
  "dry-run"?: boolean;
  json?: boolean;
}

/** One file's rows of the tenant, moved (or, in a dry run, to move), per namespace. */
interface FileRows {
  app: string | null;
  file: string;
  rows: TenantRowsAside[];
}

/**
 * `skip --tenant T --json`: what moved (with `dryRun`, would move), the drains asked to look again, and the
 * files that failed.
 */
interface SkipTenantReport {
  action: "skip";
  tenant: string;
  dryRun: boolean;
  /** Rows of the tenant counted before acting. */
  selected: number;
  expect?: number;
  moved: Array<{ app: string | null; namespace: string; file: string } & Omit<TenantRowsAside, "namespace">>;
  drains: Array<{ app: string | null; dbDir: string; dbFile: string | null; pid: number }>;
  failed: FileFailure[];
  refused?: { code: "E_CONFLICT"; message: string };
}

/** Runs `skip --tenant`: counts, then (with the count back) moves, then asks each drain to read its queues again. */
export async function skipTenant(args: SkipTenantArgs): Promise<void> {
  const tenant = args.tenant;
  const problem = tenantNameProblem(tenant);
  if (problem !== null) throw new UsageError(`--tenant: ${problem}`);
  const dryRun = args["dry-run"] === true;
  const expect = expectOf(args.expect);
  if (!dryRun && expect === undefined)
    throw new UsageError(
      "skip --tenant moves a tenant's whole backlog aside: run it with --dry-run first, then again with --expect N, N the count it printed",
    );
  const failed: FileFailure[] = [];
  const fail = recorder(failed);
  const dirs = appDirs(await resolveLocations(args), args.app).filter(locationExists);
  const planned: FileRows[] = [];
  for (const loc of dirs)
    for (const file of tenantFilesOf(loc)) {
      try {
        const rows = planTenantSkip(file, tenant);
        if (rows.length > 0) planned.push({ app: loc.app, file, rows });
      } catch (error) {
        fail(file, error as Error);
      }
    }
  const selected = planned.reduce((n, f) => n + f.rows.reduce((m, r) => m + r.rows, 0), 0);
  const report: SkipTenantReport = {
    action: "skip",
    tenant,
    dryRun,
    selected,
    ...(expect === undefined ? {} : { expect }),
    moved: [],
    drains: [],
    failed,
  };
  if (!dryRun && selected !== expect)
    report.refused = {
      code: "E_CONFLICT",
      message: `tenant ${tenant} has ${selected} row(s) queued now, not the ${expect} expected: nothing was moved; look again with --dry-run (rows still arriving mean the application still writes for this tenant)`,
    };
  else
    for (const f of planned) {
      try {
        const rows = dryRun ? f.rows : withTenantQueue(f.file, f.rows[0]!.namespace, (q) => q.skip(tenant, f.rows));
        for (const { namespace, ...r } of rows) report.moved.push({ app: f.app, namespace, file: f.file, ...r });
      } catch (error) {
        if (!(error instanceof OutboxError)) throw error;
        fail(f.file, error);
      }
    }
  // Its reads start at the head again (SIGUSR2, as kick): the other tenants' rows that waited
  // applied behind the ones moved are confirmed at once. It also retries every held tenant now.
  if (!dryRun && report.moved.length > 0)
    for (const loc of dirs) {
      const pid = lockHolder(drainHome(loc).lockFile);
      if (pid === null) continue;
      process.kill(pid, "SIGUSR2");
      report.drains.push({ app: loc.app, dbDir: loc.dbDir, dbFile: loc.dbFile, pid });
    }
  print(args.json ? JSON.stringify(report, null, 2) : renderSkipTenant(report, args));
  if (report.refused) throw new OutboxError("E_CONFLICT", `skip --tenant: ${report.refused.message}`);
  failIf(failed, "skip --tenant failed in");
}

function renderSkipTenant(r: SkipTenantReport, args: SkipTenantArgs): string {
  if (r.refused) return `refused: ${r.refused.message}`;
  const total = r.moved.reduce((n, m) => n + m.rows, 0);
  if (r.selected === 0)
    return `tenant ${r.tenant} has no rows queued${r.failed.length > 0 ? " in the readable files" : ""}: nothing to move`;
  const withApp = r.moved.some((m) => m.app !== null);
  const table = renderTable(
    [
      ...(withApp ? [{ header: "app" }] : []),
      { header: "table" },
      { header: r.dryRun ? "to move" : "moved", right: true },
      { header: "groups", right: true },
      { header: "seqs" },
      { header: "file" },
    ],
    r.moved.map((m) => [
      ...(withApp ? [m.app ?? "-"] : []),
      m.namespace,
      String(m.rows),
      String(m.groups),
      m.first === m.last ? String(m.first) : `${m.first}-${m.last}`,
      m.file,
    ]),
  );
  const what = `row(s) of tenant ${r.tenant} aside into the dead letters (reason ${TENANT_GONE}), whole groups`;
  const where = locationFlags(args);
  if (r.dryRun)
    return `${table}\n\ndry run: would move ${total} ${what}; nothing changed\nto move them: ${["sqloutbox", "skip", ...where, "--tenant", r.tenant, "--expect", String(r.selected)].join(" ")}`;
  const drains = r.drains.map(
    (d) => `asked the drain (pid ${d.pid}) on ${d.dbFile ?? d.dbDir} to read its queues again`,
  );
  return [
    table,
    "",
    `moved ${total} ${what}`,
    ...drains,
    `if the tenant comes back: ${["sqloutbox", "dead-letter", "replay", ...where, "--tenant", r.tenant, "--reason", TENANT_GONE].join(" ")}`,
    `to delete them for good: ${["sqloutbox", "dead-letter", "purge", ...where, "--tenant", r.tenant, "--unreplayed", "--older-than", "0s"].join(" ")}`,
  ].join("\n");
}

/** The location flags of this command line, so a printed command can be pasted as is. */
function locationFlags(args: SkipTenantArgs): string[] {
  const flags: string[] = [];
  for (const name of ["config", "db-dir", "db-file", "app"] as const) {
    const value = args[name];
    if (value !== undefined) flags.push(`--${name}`, shellWord(value));
  }
  return flags;
}
