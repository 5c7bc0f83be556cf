// Where the outbox files are: from `--db-dir DIR` or `--db-file FILE`, or every app's db_dir or
// db_file in `--config FILE` (default ./outbox.toml). Read-only: the config is inspected
// (config/load.ts), writers are never constructed.
import fs from "node:fs";
import path from "node:path";
import type { AppLayout } from "../config/layout.ts";
import { inspectConfigToml, type InspectedConfig } from "../config/load.ts";
import { NotFoundError, UsageError } from "../errors.ts";
import { queueFilesOf, tableFile } from "../outbox/files.ts";
import { fileHealth } from "../outbox/health.ts";
import { tableNameProblem } from "../outbox/table-name.ts";
import { configFile, DEFAULT_CONFIG } from "./args.ts";
import { log } from "./cli-logger.ts";

/** One db_dir or db_file to inspect, with the tuning that matters for display. */
export interface Location {
  /** The app name, or null with --db-dir / --db-file. */
  app: string | null;
  /** The db_dir — or, with `dbFile`, the directory of that file. */
  dbDir: string;
  /** The one file holding every table (db_file), or null for a db_dir. */
  dbFile: string | null;
  maxPending: number | null;
}

/** The resolved locations plus the secret values to mask in anything printed. */
export interface Locations {
  dirs: Location[];
  secrets: string[];
  configFile: string | null;
}

/** Resolves `--config` / `--db-dir` / `--db-file` (at most one; ./outbox.toml when none is given). */
export async function resolveLocations(args: {
  config?: string;
  "db-dir"?: string;
  "db-file"?: string;
}): Promise<Locations> {
  const dbDir = args["db-dir"];
  const dbFile = args["db-file"];
  const given = [
    args.config !== undefined && "--config FILE",
    dbDir !== undefined && "--db-dir DIR",
    dbFile !== undefined && "--db-file FILE",
  ].filter(Boolean);
  if (given.length > 1)
    throw new UsageError(`give one of --config FILE, --db-dir DIR and --db-file FILE, not ${given.join(" and ")}`);
  if (dbDir !== undefined) {
    const abs = path.resolve(dbDir);
    if (!isDir(abs)) {
      throw new NotFoundError(
        fs.existsSync(abs)
          ? `--db-dir ${abs} is a file, not a directory (give the directory that holds the {table}.db files, or --db-file ${abs})`
          : `db_dir ${abs} does not exist`,
      );
    }
    return { dirs: [{ app: null, dbDir: abs, dbFile: null, maxPending: null }], secrets: [], configFile: null };
  }
  if (dbFile !== undefined) {
    const abs = path.resolve(dbFile);
    if (!fs.existsSync(abs)) throw new NotFoundError(`db_file ${abs} does not exist`);
    if (isDir(abs)) throw new NotFoundError(`--db-file ${abs} is a directory (give the file, or --db-dir ${abs})`);
    return {
      dirs: [{ app: null, dbDir: path.dirname(abs), dbFile: abs, maxPending: null }],
      secrets: [],
      configFile: null,
    };
  }
  const file = configFile(args.config, {
    usage: `no ${DEFAULT_CONFIG} in ${process.cwd()}: give --config FILE, --db-dir DIR or --db-file FILE`,
  });
  const { apps, secrets, layoutOnly } = inspectConfigToml(file);
  if (layoutOnly) log().warn(layoutOnlyWarning(layoutOnly, file));
  return { dirs: locationsOf(apps), secrets, configFile: file };
}

/**
 * Why only the queue locations are read: the variables this shell lacks, else the drain's own complaint about
 * the file.
 */
function layoutOnlyWarning(
  { problem, unsetVariables }: NonNullable<InspectedConfig["layoutOnly"]>,
  file: string,
): string {
  if (unsetVariables.length > 0)
    return `${unsetVariables.map((v) => `\${${v}}`).join(", ")} not set in this shell: reading only the db_dirs and db_files of ${file}`;
  return `${(problem as Error).message}\n  (the drain refuses this config; reading only the db_dirs and db_files of ${file})`;
}

/** Every app's location (an app listed twice with one location is inspected once). */
export function locationsOf(apps: readonly AppLayout[]): Location[] {
  const seen = new Set<string>();
  const out: Location[] = [];
  for (const app of apps) {
    const key = app.dbFile ?? app.dbDir;
    if (seen.has(key)) continue;
    seen.add(key);
    out.push({ app: app.name, dbDir: app.dbDir, dbFile: app.dbFile, maxPending: app.maxPending });
  }
  return out;
}

/** Whether the location exists yet: the db_dir, or the db_file (producers create them). */
export function locationExists(loc: Location): boolean {
  return loc.dbFile === null ? isDir(loc.dbDir) : fs.existsSync(loc.dbFile);
}

/** The location as messages name it: `db_dir DIR` or `db_file FILE`. */
export function describeLocation(loc: Location): string {
  return loc.dbFile === null ? `db_dir ${loc.dbDir}` : `db_file ${loc.dbFile}`;
}

/** The queue files of a location that exists (see queueFilesOf). */
export function filesOf(loc: Location): string[] {
  return queueFilesOf(loc);
}

/**
 * The file that holds a namespace: `{db_dir}/{namespace}.db`, or the db_file when it holds that
 * namespace; it must exist (nothing is created). The name must pass the producer's own check
 * (`tableNameProblem`), so no name the producer refuses can point outside the location.
 */
export function namespaceFile(
  locations: Locations,
  namespace: string,
  app?: string,
): { location: Location; file: string } {
  const problem = tableNameProblem(namespace);
  if (problem !== null) throw new UsageError(`--namespace must be a table name: ${problem}`);
  const dirs = appDirs(locations, app);
  const holds = (location: Location, file: string) =>
    location.dbFile === null
      ? fs.existsSync(file)
      : fs.existsSync(file) && fileHealth(file).some((h) => h.namespace === namespace);
  const hits = dirs
    .map((location) => ({ location, file: tableFile(location, namespace) }))
    .filter((hit) => holds(hit.location, hit.file));
  if (hits.length === 0) {
    throw new NotFoundError(
      `namespace "${namespace}": ${dirs.map((d) => (d.dbFile === null ? `no ${namespace}.db in ${d.dbDir}` : `not in ${d.dbFile}`)).join(", ")}`,
    );
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
    throw new NotFoundError(
      `namespace "${namespace}" is not in ${file} (it holds: ${namespaces.join(", ") || "none"})`,
    );
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
