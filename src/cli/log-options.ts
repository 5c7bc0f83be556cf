// The logging options: `--log-level` / `--log-format`, given anywhere on the command line (even
// before the command; command-line.ts reads them), else LOG_LEVEL / LOG_FORMAT, checked before anything runs.
import { UsageError } from "../errors.ts";
import { LOG_FORMATS, type LogFormat } from "./log-format.ts";

/** Accepted log levels, least to most verbose. */
export const LOG_LEVELS = ["error", "warn", "info", "debug"] as const;
/** One of LOG_LEVELS. */
export type LogLevelName = (typeof LOG_LEVELS)[number];

/**
 * The logging options from the parsed `--log-level`/`--log-format` values, falling back to
 * LOG_LEVEL/LOG_FORMAT; invalid ones are usage errors.
 */
export function logOptionsFrom(
  values: { "log-level"?: unknown; "log-format"?: unknown },
  env: Record<string, string | undefined>,
): { level: LogLevelName; format: LogFormat } {
  const level = String(values["log-level"] ?? env.LOG_LEVEL ?? "info");
  const format = String(values["log-format"] ?? env.LOG_FORMAT ?? "pretty");
  if (!(LOG_LEVELS as readonly string[]).includes(level.toLowerCase())) {
    throw new UsageError(`invalid log level "${level}": expected one of ${LOG_LEVELS.join(", ")}`);
  }
  if (!(LOG_FORMATS as readonly string[]).includes(format.toLowerCase())) {
    throw new UsageError(`invalid log format "${format}": expected one of ${LOG_FORMATS.join(", ")}`);
  }
  return { level: level.toLowerCase() as LogLevelName, format: format.toLowerCase() as LogFormat };
}
