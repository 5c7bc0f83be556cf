import { literalDefaults, type Values } from "./declaration.ts";
import { type ADMIN_KEYS, APP_KEYS, type TABLE_KEYS, TARGET_KEYS, TRACING_KEYS } from "./keys.ts";
import type { ListenAddress } from "./listen-address.ts";

// The resolved configuration. Each declared key that is not a structure is a field here, named
// as keys.ts derives it (`flush_interval` → `flushIntervalMs`) and documented there.

/** A table's overrides, each resolved: its own, else its target's. */
type Resolved<T> = { [K in keyof T]: NonNullable<T[K]> };

/** One table routed to a target; per-table overrides already applied. */
export interface TableConfig extends Resolved<Values<typeof TABLE_KEYS>> {
  name: string;
}

/**
 * One remote database target, named `app.db`. Its `retain_log_days` passes down to its tables only;
 * its `max_open_tenants` is `tenants.maxOpen`.
 */
export interface TargetConfig extends Omit<Values<typeof TARGET_KEYS>, "retainLogDays" | "maxOpenTenants"> {
  /** `${app}.${db}` — the key of this target's writer. */
  name: string;
  app: string;
  db: string;
  /** A built-in writer name (`sqlite`, `libsql`, `postgres`, `mysql`), or null with `writerClass`. */
  writer: string | null;
  /** `./path.ts:Export` or `package:Export`, resolved relative to the config file. */
  writerClass: string | null;
  /**
   * The `[connection]` table as given (after `${VAR}` interpolation). Contains secrets: never log it.
   * A tenant template's keeps its `{tenant}` placeholders (`withTenant` resolves them).
   */
  connection: Record<string, unknown>;
  /**
   * Set when the target is a tenant template (SPEC §4c: a `{tenant}` in a `[connection]` value):
   * each tenant's rows go to its own database, at most `maxOpen` of them open at once
   * (`max_open_tenants`). Null: one database.
   */
  tenants: { maxOpen: number } | null;
  tables: TableConfig[];
}

/**
 * One `[app.NAME]`: a db_dir and its tuning, which apply to this app's targets only. Durations are
 * milliseconds here, converted once from the TOML keys (seconds, minutes) when the config is read.
 */
export interface AppConfig extends Values<typeof APP_KEYS> {
  name: string;
  /** Absolute path of the directory holding `{table}.db` files — with `dbFile`, that file's directory. */
  dbDir: string;
  /**
   * Absolute path of the one file holding every table of the app as a namespace (`db_file`;
   * possibly the application's own database); null: one `{table}.db` file per table in `dbDir`.
   */
  dbFile: string | null;
  targets: TargetConfig[];
}

/** The whole configuration: one or more apps. */
export interface OutboxConfig {
  /** The file it was loaded from, if any (used to resolve relative paths in messages). */
  file?: string;
  /**
   * The directory relative paths (`db_dir`, `writer_class`, sqlite `path`) were resolved against: the config
   * file's.
   */
  baseDir?: string;
  /** Where `runservice` serves /metrics, /healthz and /readyz (`metrics_addr`); null: off (default). */
  metricsAddr: ListenAddress | null;
  /**
   * `[tracing]`: the OTLP export of delivery spans, as configured (the OTEL_* variables fill in what it
   * leaves null).
   */
  tracing: TracingConfig;
  /** `[admin]`: the admin API and the console; `addr` null: off (default). */
  admin: AdminConfig;
  apps: AppConfig[];
}

/** `[admin]` as resolved: where it listens (null: off) and its tokens (null: none). The tokens are secrets. */
export interface AdminConfig extends Values<typeof ADMIN_KEYS> {
  addr: ListenAddress | null;
}

/** `[tracing]` as written: null where a key is absent (then OTEL_* decides). `headers` are secrets. */
export interface TracingConfig extends Values<typeof TRACING_KEYS> {
  headers: Record<string, string>;
}

/** The default of every key that has one literal default, by camelCase name, in the TOML key's unit. */
export const DEFAULTS = Object.freeze({
  ...literalDefaults(APP_KEYS),
  ...literalDefaults(TARGET_KEYS),
  ...literalDefaults(TRACING_KEYS),
});
