// Flag definitions shared by several commands, so every command spells and documents them alike.
import fs from "node:fs";
import path from "node:path";
import { NotFoundError, UsageError } from "../errors.ts";

/** The logging flags every command accepts (they may appear anywhere on the command line; read by log-options.ts). */
export const logArgs = {
  "log-level": {
    type: "string",
    valueHint: "error|warn|info|debug",
    description: "Log verbosity (env LOG_LEVEL; default info)",
  },
  "log-format": {
    type: "string",
    valueHint: "pretty|json",
    description: "Log format: json = one object per line, for journald (env LOG_FORMAT; default pretty)",
  },
} as const;

/** The default config file name, looked up in the working directory. */
export const DEFAULT_CONFIG = "outbox.toml";

/**
 * `--config` as an absolute path (default ./outbox.toml), checked to exist: the CLI's one check before
 * config/load.ts reads the file, so a missing one is "config file FILE does not exist" (E_NOT_FOUND,
 * exit 1) with `hint` in parentheses, not the library's generic "cannot read config file" ConfigError.
 * With `usage`, a missing ./outbox.toml when no --config was given is that usage error (exit 2) instead.
 * Any other failure to read it (a directory, no permission) is load.ts's.
 */
export function configFile(config: string | undefined, missing: { hint?: string; usage?: string } = {}): string {
  const file = path.resolve(config ?? DEFAULT_CONFIG);
  if (fs.existsSync(file)) return file;
  if (config === undefined && missing.usage !== undefined) throw new UsageError(missing.usage);
  throw new NotFoundError(`config file ${file} does not exist${missing.hint ? ` (${missing.hint})` : ""}`);
}

/** `--config FILE` of the commands that need the whole config (runservice, schema). */
export const configArg = {
  config: { type: "string", valueHint: "FILE", description: `The config file (default ./${DEFAULT_CONFIG})` },
} as const;

/** Where the outbox files are: `--config FILE` (every app's db_dir or db_file), `--db-dir DIR` or `--db-file FILE`. */
export const locationArgs = {
  config: {
    type: "string",
    valueHint: "FILE",
    description: "The outbox.toml whose apps' db_dirs and db_files are read (default ./outbox.toml)",
  },
  "db-dir": {
    type: "string",
    valueHint: "DIR",
    description: "A db_dir holding {table}.db outbox files (instead of --config)",
  },
  "db-file": {
    type: "string",
    valueHint: "FILE",
    description: "A db_file holding every table of an app, or an application's database (instead of --config)",
  },
} as const;

/** `--json`: the stable machine-readable shape documented in docs/cli.md. */
export const jsonArg = {
  json: { type: "boolean", description: "Print JSON (stable shape, see docs/cli.md)" },
} as const;

/** `--app APP`: with --config, only that app's db_dir or db_file. */
export const appArg = {
  app: { type: "string", valueHint: "APP", description: "With --config: only this app's db_dir or db_file" },
} as const;

/** `--namespace N` as an optional filter. */
export const namespaceFilterArg = {
  namespace: { type: "string", valueHint: "N", description: "Only this namespace" },
} as const;

/** `--namespace N --seq S` (+ `--app A` to pick one app when a config has several). */
export const rowArgs = {
  namespace: {
    type: "string",
    valueHint: "N",
    required: true,
    description: "The namespace (table); its file is {db_dir}/{N}.db, or the db_file",
  },
  seq: { type: "string", valueHint: "S", required: true, description: "The row's seq" },
  app: { ...appArg.app, description: "With --config: the app whose db_dir or db_file holds the namespace" },
} as const;

/** Parses `--seq` as a positive integer, or throws a usage error. */
export function parseSeq(value: string): number {
  if (!/^[0-9]+$/.test(value) || Number(value) < 1 || !Number.isSafeInteger(Number(value))) {
    throw new UsageError(`--seq must be a positive integer, got "${value}"`);
  }
  return Number(value);
}
