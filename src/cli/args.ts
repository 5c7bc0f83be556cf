// Flag definitions shared by several commands, so every command spells and documents them alike.
import { UsageError } from "../errors.ts";

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

/** `--config FILE` of the commands that need the whole config (runservice, schema). */
export const configArg = {
  config: { type: "string", valueHint: "FILE", description: `The config file (default ./${DEFAULT_CONFIG})` },
} as const;

/** Where the outbox files are: `--config FILE` (every app's db_dir) or `--db-dir DIR`. */
export const locationArgs = {
  config: {
    type: "string",
    valueHint: "FILE",
    description: "The outbox.toml whose apps' db_dirs are read (default ./outbox.toml)",
  },
  "db-dir": {
    type: "string",
    valueHint: "DIR",
    description: "A db_dir holding {table}.db outbox files (instead of --config)",
  },
} as const;

/** `--json`: the stable machine-readable shape documented in docs/cli.md. */
export const jsonArg = {
  json: { type: "boolean", description: "Print JSON (stable shape, see docs/cli.md)" },
} as const;

/** `--namespace N --seq S` (+ `--app A` to pick one app when a config has several). */
export const rowArgs = {
  namespace: { type: "string", valueHint: "N", required: true, description: "The namespace (table); its file is {db_dir}/{N}.db" },
  seq: { type: "string", valueHint: "S", required: true, description: "The row's seq" },
  app: { type: "string", valueHint: "APP", description: "With --config: the app whose db_dir holds the namespace" },
} as const;

/** Parses `--seq` as a positive integer, or throws a usage error. */
export function parseSeq(value: string): number {
  if (!/^[0-9]+$/.test(value) || Number(value) < 1 || !Number.isSafeInteger(Number(value))) {
    throw new UsageError(`--seq must be a positive integer, got "${value}"`);
  }
  return Number(value);
}
