import { dirname, resolve } from "node:path";
import { type ConfigError, ConfigIssuesError } from "../errors.ts";
import type { EnvMap } from "./interpolate.ts";
import { parseListenAddress, type ListenAddress } from "./listen-address.ts";
import { keyLocator } from "./locate.ts";
import { readKeys } from "./declaration.ts";
import { APP_KEYS, TOP_KEYS } from "./keys.ts";
import { isTable, join, Reader, typeName, type KeyStyle, type Table } from "./reader.ts";
import { buildTarget } from "./target.ts";
import { readTracing } from "./tracing.ts";
import { readAdmin } from "./admin.ts";
import type { AppConfig, OutboxConfig } from "./types.ts";

/** Where a config document came from and how to read it. */
export interface BuildOptions {
  file?: string;
  /** Relative paths resolve against this directory. */
  baseDir: string;
  /** `${VAR}` lookups; null disables interpolation (programmatic input). */
  env: EnvMap | null;
  style: KeyStyle;
  /** The source text, so problems carry the line/column of their key. */
  text?: string;
}

/** App and db names become target names `app.db` and log labels. */
const NAME = /^[A-Za-z0-9_-]+$/;

/**
 * Validates a parsed config document and returns the resolved `OutboxConfig` (defaults applied,
 * paths absolute) plus the values of `${VAR}`s used in `[connection]` tables (secrets).
 * Throws one `ConfigError`, or a `ConfigIssuesError` listing every problem.
 */
export function buildConfig(
  doc: unknown,
  options: BuildOptions,
): { config: OutboxConfig; interpolatedSecrets: string[] } {
  const r = new Reader(
    options.file,
    options.style,
    options.env,
    options.text === undefined ? undefined : keyLocator(options.text),
  );
  const apps: AppConfig[] = [];
  let metricsAddr: ListenAddress | null = null;
  let tracing = readTracing(r, {});
  let admin = readAdmin(r, {});
  if (!isTable(doc)) {
    r.fail("", `expected a table at the top level, got ${typeName(doc)}`);
  } else {
    r.checkKeys(doc, Object.keys(TOP_KEYS), "");
    metricsAddr = readMetricsAddr(r, doc);
    tracing = readTracing(r, doc);
    admin = readAdmin(r, doc);
    const appsRaw = r.raw(doc, "app");
    if (appsRaw !== undefined && !isTable(appsRaw)) {
      r.fail("app", `expected a table of apps ([app.NAME]), got ${typeName(appsRaw)}`);
    } else if (appsRaw === undefined || Object.keys(appsRaw).length === 0) {
      r.fail("app", "no apps configured: add an [app.NAME] table with db_dir and at least one [app.NAME.db.DB] target");
    } else {
      for (const [name, raw] of Object.entries(appsRaw)) {
        const app = buildApp(r, name, raw, options.baseDir);
        if (app) apps.push(app);
      }
      checkSharedDbDirs(r, apps);
    }
  }
  throwIssues(r.issues);
  return {
    config: { file: options.file, baseDir: options.baseDir, metricsAddr, tracing, admin, apps },
    interpolatedSecrets: [...r.secretValues],
  };
}

/** Throws the single problem as is, or all of them in one `ConfigIssuesError`. */
function throwIssues(issues: ConfigError[]): void {
  if (issues.length === 1) throw issues[0];
  if (issues.length > 1) throw new ConfigIssuesError(issues);
}

function buildApp(r: Reader, name: string, raw: unknown, baseDir: string): AppConfig | undefined {
  const path = join("app", name);
  if (!NAME.test(name)) return r.fail(path, `app name "${name}" may only contain letters, digits, "_" and "-"`);
  if (!isTable(raw)) return r.fail(path, `expected a table ([${path}]), got ${typeName(raw)}`);
  r.checkKeys(raw, Object.keys(APP_KEYS), path);
  const app: AppConfig = {
    name,
    ...readQueues(r, raw, path, baseDir),
    ...readKeys(r, raw, path, APP_KEYS),
    targets: [],
  };

  const dbPath = join(path, "db");
  const dbs = r.raw(raw, "db");
  if (dbs !== undefined && !isTable(dbs))
    return r.fail(dbPath, `expected a table of targets ([${dbPath}.NAME]), got ${typeName(dbs)}`);
  if (dbs === undefined || Object.keys(dbs).length === 0) {
    return r.fail(dbPath, `app "${name}" has no targets: add an [${dbPath}.NAME] table with writer and tables`);
  }
  // One outbox file can be drained to one place only: a table routed to two targets is an error.
  const routedTo = new Map<string, string>();
  for (const [dbName, targetRaw] of Object.entries(dbs)) {
    const targetName = `${name}.${dbName}`;
    const claim = (table: string, keyPath: string): boolean => {
      const other = routedTo.get(table);
      if (other === undefined) routedTo.set(table, targetName);
      else
        r.fail(
          keyPath,
          `table "${table}" is already routed to target "${other}"; each table of an app drains to exactly one target`,
        );
      return other === undefined;
    };
    const target = buildTarget(r, {
      app: name,
      db: dbName,
      raw: targetRaw,
      path: join(dbPath, dbName),
      baseDir,
      retainLogDays: app.retainLogDays,
      lanes: app.lanes,
      claim,
    });
    if (target) app.targets.push(target);
  }
  return app;
}

/**
 * Where the app's queues are: exactly one of `db_dir` (one `{table}.db` file per table) and
 * `db_file` (one file holding every table as a namespace: transactions may span tables). With
 * `db_file`, `dbDir` is the file's directory (where the drain keeps its lock and state beside it).
 */
function readQueues(r: Reader, raw: Table, path: string, baseDir: string): { dbDir: string; dbFile: string | null } {
  const dir = r.string(raw, "db_dir", path);
  const file = r.string(raw, "db_file", path);
  const given = (["db_dir", "db_file"] as const).filter((k) => r.raw(raw, k) !== undefined);
  if (given.length === 0) {
    r.fail(
      join(path, r.key("db_dir")),
      `required: db_dir (the directory holding this app's {table}.db outbox files) or db_file (one file holding every table)`,
    );
    return { dbDir: "", dbFile: null };
  }
  if (given.length === 2) {
    r.fail(
      join(path, r.key("db_file")),
      "give exactly one of db_dir and db_file: one file per table, or every table in one file",
    );
    return { dbDir: "", dbFile: null };
  }
  const [key] = given;
  const value = key === "db_dir" ? dir : file;
  if (value === "") r.fail(join(path, r.key(key!)), "must not be empty");
  if (!value) return { dbDir: "", dbFile: null };
  if (key === "db_dir") return { dbDir: resolve(baseDir, value), dbFile: null };
  const dbFile = resolve(baseDir, value);
  return { dbDir: dirname(dbFile), dbFile };
}

/** `metrics_addr` (top level): `HOST:PORT`, `PORT` (127.0.0.1) or a TOML integer port. */
function readMetricsAddr(r: Reader, doc: Table): ListenAddress | null {
  const raw = r.raw(doc, "metrics_addr");
  if (raw === undefined) return null;
  const at = r.key("metrics_addr");
  if (typeof raw !== "string" && typeof raw !== "number")
    return r.fail(at, `expected "HOST:PORT" or a port number, got ${typeName(raw)}`) ?? null;
  const text = typeof raw === "string" ? r.text(raw, at) : raw;
  if (text === undefined) return null;
  const parsed = parseListenAddress(text);
  return "problem" in parsed ? (r.fail(at, parsed.problem) ?? null) : parsed;
}

/**
 * Two apps on one db_dir or one db_file would fight over its drain lock and its files; a db_file
 * inside another app's db_dir would be taken for one of its tables' files.
 */
function checkSharedDbDirs(r: Reader, apps: AppConfig[]): void {
  const dirs = new Map<string, string>();
  const files = new Map<string, string>();
  for (const app of apps) {
    if (!app.dbDir) continue;
    const at = join(join("app", app.name), r.key(app.dbFile === null ? "db_dir" : "db_file"));
    const seen = app.dbFile === null ? dirs : files;
    const key = app.dbFile ?? app.dbDir;
    const other = seen.get(key);
    if (other !== undefined)
      r.fail(
        at,
        `${app.dbFile === null ? "db_dir" : "db_file"} ${key} is also used by app "${other}"; each app needs its own`,
      );
    else seen.set(key, app.name);
  }
  for (const app of apps) {
    if (app.dbFile === null || !app.dbFile.endsWith(".db")) continue;
    const owner = dirs.get(app.dbDir);
    if (owner !== undefined) {
      r.fail(
        join(join("app", app.name), r.key("db_file")),
        `db_file ${app.dbFile} lies in the db_dir of app "${owner}", where it would be read as the queue file of a table named "${app.dbFile.slice(app.dbDir.length + 1, -3)}"; put it elsewhere`,
      );
    }
  }
}
