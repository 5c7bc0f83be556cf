// Where the outbox files are: from `--db-dir DIR`, or every app's db_dir in `--config FILE`
// (default ./outbox.toml). Read-only: the config is inspected (config/load.ts), writers are never constructed.
import fs from "node:fs";
import path from "node:path";
import type { AppLayout } from "../config/layout.ts";
import { inspectConfigToml, type InspectedConfig } from "../config/load.ts";
import { NotFoundError, UsageError } from "../errors.ts";
import { fileHealth } from "../outbox/health.ts";
import { configFile, DEFAULT_CONFIG } from "./args.ts";
import { log } from "./cli-logger.ts";

/** One db_dir to inspect, with the tuning that matters for display. */
export interface Location {
  /** The app name, or null with --db-dir. */
  app: string | null;
  dbDir: string;
  maxPending: number | null;
}

/** The resolved locations plus the secret values to mask in anything printed. */
export interface Locations {
  dirs: Location[];
  secrets: string[];
  configFile: string | null;
}

/** Resolves `--config` / `--db-dir` (exactly one, or ./outbox.toml when neither is given). */
export async function resolveLocations(args: { config?: string; "db-dir"?: string }): Promise<Locations> {
  const dbDir = args["db-dir"];
  if (args.config !== undefined && dbDir !== undefined) {
    throw new UsageError("give either --config FILE or --db-dir DIR, not both");
  }
  if (dbDir !== undefined) {
    const abs = path.resolve(dbDir);
    if (!isDir(abs)) {
      throw new NotFoundError(fs.existsSync(abs) ? `--db-dir ${abs} is a file, not a directory (give the directory that holds the {table}.db files)` : `db_dir ${abs} does not exist`);
    }
    return { dirs: [{ app: null, dbDir: abs, maxPending: null }], secrets: [], configFile: null };
  }
  const file = configFile(args.config, { usage: `no ${DEFAULT_CONFIG} in ${process.cwd()}: give --config FILE or --db-dir DIR` });
  const { apps, secrets, layoutOnly } = inspectConfigToml(file);
  if (layoutOnly) log().warn(layoutOnlyWarning(layoutOnly, file));
  return { dirs: locationsOf(apps), secrets, configFile: file };
}

/** Why only the db_dirs are read: the variables this shell lacks, else the drain's own complaint about the file. */
function layoutOnlyWarning({ problem, unsetVariables }: NonNullable<InspectedConfig["layoutOnly"]>, file: string): string {
  if (unsetVariables.length > 0) return `${unsetVariables.map((v) => `\${${v}}`).join(", ")} not set in this shell: reading only the db_dirs of ${file}`;
  return `${(problem as Error).message}\n  (the drain refuses this config; reading only the db_dirs of ${file})`;
}

/** Every app's db_dir (an app listed twice with one db_dir is inspected once). */
function locationsOf(apps: AppLayout[]): Location[] {
  const seen = new Set<string>();
  const out: Location[] = [];
  for (const app of apps) {
    if (seen.has(app.dbDir)) continue;
    seen.add(app.dbDir);
    out.push({ app: app.name, dbDir: app.dbDir, maxPending: app.maxPending });
  }
  return out;
}

/** The file `{db_dir}/{namespace}.db` that holds a namespace; it must exist (nothing is created). */
export function namespaceFile(locations: Locations, namespace: string, app?: string): { location: Location; file: string } {
  if (!namespace || namespace.includes("/") || namespace.includes("\\") || namespace.startsWith(".")) {
    throw new UsageError(`--namespace must be a table name, got "${namespace}"`);
  }
  const dirs = appDirs(locations, app);
  const hits = dirs
    .map((location) => ({ location, file: path.join(location.dbDir, `${namespace}.db`) }))
    .filter((hit) => fs.existsSync(hit.file));
  if (hits.length === 0) {
    throw new NotFoundError(`namespace "${namespace}": no ${namespace}.db in ${dirs.map((d) => d.dbDir).join(", ")}`);
  }
  if (hits.length > 1) {
    throw new UsageError(
      `namespace "${namespace}" exists in several apps (${hits.map((h) => h.location.app).join(", ")}): add --app APP`,
    );
  }
  return hits[0]!;
}

/** The locations to work on: all, or the one app `--app` names (a usage error when the config has no such app). */
export function appDirs(locations: Locations, app: string | undefined): Location[] {
  if (app === undefined) return locations.dirs;
  const dirs = locations.dirs.filter((d) => d.app === app);
  if (dirs.length === 0) throw new UsageError(`--app ${app}: no such app in ${locations.configFile ?? "the config"}`);
  return dirs;
}

/** True when `p` is an existing directory. */
export function isDir(p: string): boolean {
  try {
    return fs.statSync(p).isDirectory();
  } catch {
    return false;
  }
}

/**
 * Checks, read-only, that `file` is an outbox file holding `namespace` before a repair command
 * opens it for writing: opening for writing creates the outbox schema, which must never happen to
 * a foreign database that a mistyped --db-dir or --namespace pointed at.
 */
export function requireOutboxNamespace(file: string, namespace: string): void {
  const namespaces = fileHealth(file).map((h) => h.namespace); // StorageError: not an outbox file
  if (!namespaces.includes(namespace)) {
    throw new NotFoundError(`namespace "${namespace}" is not in ${file} (it holds: ${namespaces.join(", ") || "none"})`);
  }
}

/**
 * SQLite reports a file this user may not read as "unable to open database file"; say why.
 * Returns `message` with a hint appended when `file` (or its directory) is not readable.
 */
export function withAccessHint(message: string, file: string): string {
  try {
    fs.accessSync(file, fs.constants.R_OK);
    fs.accessSync(path.dirname(file), fs.constants.R_OK | fs.constants.X_OK);
    return message;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EACCES") return message;
    return `${message} (permission denied for this user: run as the drain's user, e.g. sudo -u sqloutbox)`;
  }
}
