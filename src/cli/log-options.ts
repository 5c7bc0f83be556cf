// The logging options: `--log-level` / `--log-format`, read from anywhere on the command line
// (even before the command), else LOG_LEVEL / LOG_FORMAT, and checked before anything runs.
import { UsageError } from "../errors.ts";
import { LOG_FORMATS, type LogFormat } from "./log-format.ts";

/** Accepted log levels, least to most verbose. */
export const LOG_LEVELS = ["error", "warn", "info", "debug"] as const;
/** One of LOG_LEVELS. */
export type LogLevelName = (typeof LOG_LEVELS)[number];

/** Reads `--log-level`/`--log-format` from anywhere in argv, falling back to LOG_LEVEL/LOG_FORMAT. */
export function logOptionsFrom(
  argv: readonly string[],
  env: Record<string, string | undefined>,
): { level: LogLevelName; format: LogFormat } {
  const level = flagValue(argv, "log-level") ?? env.LOG_LEVEL ?? "info";
  const format = flagValue(argv, "log-format") ?? env.LOG_FORMAT ?? "pretty";
  if (!(LOG_LEVELS as readonly string[]).includes(level.toLowerCase())) {
    throw new UsageError(`invalid log level "${level}": expected one of ${LOG_LEVELS.join(", ")}`);
  }
  if (!(LOG_FORMATS as readonly string[]).includes(format.toLowerCase())) {
    throw new UsageError(`invalid log format "${format}": expected one of ${LOG_FORMATS.join(", ")}`);
  }
  return { level: level.toLowerCase() as LogLevelName, format: format.toLowerCase() as LogFormat };
}

function flagValue(argv: readonly string[], name: string): string | undefined {
  let value: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--") break;
    if (arg === `--${name}`) value = argv[++i];
    else if (arg.startsWith(`--${name}=`)) value = arg.slice(name.length + 3);
  }
  return value;
}
