import { hostname } from "node:os";
import { dirname, resolve } from "node:path";
import { ConfigError, ConfigIssuesError } from "../errors.ts";
import type { EnvMap } from "./interpolate.ts";
import { parseListenAddress, type ListenAddress } from "./listen-address.ts";
import { keyLocator } from "./locate.ts";
import { isTable, join, Reader, typeName, type KeyStyle, type Table } from "./reader.ts";
import { buildTarget } from "./target.ts";
import { readTracing } from "./tracing.ts";
import { DEFAULTS, type AppConfig, type OutboxConfig } from "./types.ts";

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

/** The keys of the top level of outbox.toml. */
export const TOP_KEYS = ["app", "metrics_addr", "tracing"];

/** The keys of an `[app.NAME]` table (snake_case). */
export const APP_KEYS = [
  "db_dir",
  "db_file",
  "origin_label",
  "batch_size",
  "batch_max_bytes",
  "flush_interval",
  "table_flush_threshold",
  "table_max_wait",
  "auto_schema",
  "cleanup_every",
  "retain_log_days",
  "retain_replayed_days",
  "max_pending",
  "max_attempts",
  "backoff_cap_minutes",
  "backoff_unit_seconds",
  "outage_backoff_cap_minutes",
  "write_timeout",
  "durability",
  "file_mode",
  "db",
] as const;

/** App and db names become target names `app.db` and log labels. */
const NAME = /^[A-Za-z0-9_-]+$/;

/**
 * Validates a parsed config document and returns the resolved `OutboxConfig` (defaults applied,
 * paths absolute) plus the values of `${VAR}`s used in `[connection]` tables (secrets).
 * Throws one `ConfigError`, or a `ConfigIssuesError` listing every problem.
 */
export function buildConfig(doc: unknown, options: BuildOptions): { config: OutboxConfig; interpolatedSecrets: string[] } {
  const r = new Reader(options.file, options.style, options.env, options.text === undefined ? undefined : keyLocator(options.text));
  const apps: AppConfig[] = [];
  let metricsAddr: ListenAddress | null = null;
  let tracing = readTracing(r, {});
  if (!isTable(doc)) {
    r.fail("", `expected a table at the top level, got ${typeName(doc)}`);
  } else {
    r.checkKeys(doc, TOP_KEYS, "");
    metricsAddr = readMetricsAddr(r, doc);
    tracing = readTracing(r, doc);
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
  return { config: { file: options.file, baseDir: options.baseDir, metricsAddr, tracing, apps }, interpolatedSecrets: [...r.secretValues] };
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
  r.checkKeys(raw, APP_KEYS, path);

  const { dbDir, dbFile } = readQueues(r, raw, path, baseDir);

  const retainLogDays = r.number(raw, "retain_log_days", path, { min: 0 }) ?? DEFAULTS.retainLogDays;
  // Durations are read in the TOML key's unit and converted to milliseconds here, once.
  const seconds = (key: string, rule: { min?: number; above?: number }, fallback: number) => (r.number(raw, key, path, rule) ?? fallback) * 1000;
  const minutes = (key: string, fallback: number) => (r.number(raw, key, path, { above: 0 }) ?? fallback) * 60_000;
  const app: AppConfig = {
    name,
    dbDir,
    dbFile,
    originLabel: readOriginLabel(r, raw, path),
    batchSize: r.number(raw, "batch_size", path, { integer: true, min: 1 }) ?? DEFAULTS.batchSize,
    batchMaxBytes: r.number(raw, "batch_max_bytes", path, { integer: true, min: 1024 }) ?? DEFAULTS.batchMaxBytes,
    flushIntervalMs: seconds("flush_interval", { above: 0 }, DEFAULTS.flushInterval),
    tableFlushThreshold: r.number(raw, "table_flush_threshold", path, { integer: true, min: 1 }) ?? DEFAULTS.tableFlushThreshold,
    tableMaxWaitMs: seconds("table_max_wait", { min: 0 }, DEFAULTS.tableMaxWait),
    autoSchema: r.boolean(raw, "auto_schema", path) ?? DEFAULTS.autoSchema,
    cleanupEvery: r.number(raw, "cleanup_every", path, { integer: true, min: 1 }) ?? DEFAULTS.cleanupEvery,
    retainLogDays,
    retainReplayedDays: r.number(raw, "retain_replayed_days", path, { min: 0 }) ?? DEFAULTS.retainReplayedDays,
    maxPending: optionalLimit(r, raw, "max_pending", path, DEFAULTS.maxPending),
    maxAttempts: optionalLimit(r, raw, "max_attempts", path, DEFAULTS.maxAttempts),
    backoffCapMs: minutes("backoff_cap_minutes", DEFAULTS.backoffCapMinutes),
    backoffUnitMs: seconds("backoff_unit_seconds", { above: 0 }, DEFAULTS.backoffUnitSeconds),
    outageBackoffCapMs: minutes("outage_backoff_cap_minutes", DEFAULTS.outageBackoffCapMinutes),
    writeTimeoutMs: seconds("write_timeout", { above: 0 }, DEFAULTS.writeTimeout),
    durability: r.oneOf(raw, "durability", path, ["normal", "full"] as const) ?? DEFAULTS.durability,
    fileMode: readFileMode(r, raw, path),
    targets: [],
  };

  const dbPath = join(path, "db");
  const dbs = r.raw(raw, "db");
  if (dbs !== undefined && !isTable(dbs)) return r.fail(dbPath, `expected a table of targets ([${dbPath}.NAME]), got ${typeName(dbs)}`);
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
      else r.fail(keyPath, `table "${table}" is already routed to target "${other}"; each table of an app drains to exactly one target`);
      return other === undefined;
    };
    const target = buildTarget(r, { app: name, db: dbName, raw: targetRaw, path: join(dbPath, dbName), baseDir, retainLogDays, claim });
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
    r.fail(join(path, r.key("db_dir")), `required: db_dir (the directory holding this app's {table}.db outbox files) or db_file (one file holding every table)`);
    return { dbDir: "", dbFile: null };
  }
  if (given.length === 2) {
    r.fail(join(path, r.key("db_file")), "give exactly one of db_dir and db_file: one file per table, or every table in one file");
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
  if (typeof raw !== "string" && typeof raw !== "number") return r.fail(at, `expected "HOST:PORT" or a port number, got ${typeName(raw)}`) ?? null;
  const text = typeof raw === "string" ? r.text(raw, at) : raw;
  if (text === undefined) return null;
  const parsed = parseListenAddress(text);
  return "problem" in parsed ? (r.fail(at, parsed.problem) ?? null) : parsed;
}

/** The ledger's label column holds up to 255 characters (MySQL VARCHAR(255)). */
const MAX_LABEL_LENGTH = 255;

/** `origin_label`: a short human name for this host's queues in the ledger; default the host name. */
function readOriginLabel(r: Reader, raw: Table, path: string): string {
  const label = r.string(raw, "origin_label", path);
  if (label === undefined) return hostname().slice(0, MAX_LABEL_LENGTH);
  const at = join(path, r.key("origin_label"));
  if (label.trim() === "") return r.fail(at, "must not be empty") ?? "";
  if (label.length > MAX_LABEL_LENGTH) return r.fail(at, `must be at most ${MAX_LABEL_LENGTH} characters, got ${label.length}`) ?? "";
  return label;
}

/** `file_mode`: permission bits such as 0o600 (TOML octal); the owner must keep read and write. */
function readFileMode(r: Reader, raw: Table, path: string): number {
  const mode = r.number(raw, "file_mode", path, { integer: true, min: 0 });
  if (mode === undefined) return DEFAULTS.fileMode;
  if (mode > 0o777 || (mode & 0o600) !== 0o600) {
    return r.fail(join(path, r.key("file_mode")), `must be permission bits between 0o600 and 0o777 that let the owner read and write (e.g. 0o600 or 0o640), got 0o${mode.toString(8)}`) ?? DEFAULTS.fileMode;
  }
  return mode;
}

/** `max_pending` / `max_attempts`: a positive integer, or 0 (or null in code) for "no limit". */
function optionalLimit(r: Reader, raw: Table, snake: string, path: string, fallback: number | null): number | null {
  const value = r.raw(raw, snake);
  if (value === undefined) return fallback;
  if (value === null && r.style === "camel") return null;
  const n = r.number(raw, snake, path, { integer: true, min: 0 });
  if (n === undefined) return fallback;
  return n === 0 ? null : n;
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
    if (other !== undefined) r.fail(at, `${app.dbFile === null ? "db_dir" : "db_file"} ${key} is also used by app "${other}"; each app needs its own`);
    else seen.set(key, app.name);
  }
  for (const app of apps) {
    if (app.dbFile === null || !app.dbFile.endsWith(".db")) continue;
    const owner = dirs.get(app.dbDir);
    if (owner !== undefined) {
      r.fail(join(join("app", app.name), r.key("db_file")), `db_file ${app.dbFile} lies in the db_dir of app "${owner}", where it would be read as the queue file of a table named "${app.dbFile.slice(app.dbDir.length + 1, -3)}"; put it elsewhere`);
    }
  }
}
