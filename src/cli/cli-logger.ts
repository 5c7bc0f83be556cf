// The CLI's logger: consola, always on stderr (stdout carries command output and --json). main.ts
// builds it from the logging options and installs it once; the commands read it with log().
import { createConsola, type ConsolaInstance, type LogObject } from "consola";
import { takesFieldBags } from "../logger.ts";
import { jsonLine, prettyLine, type LogFormat } from "./log-format.ts";
import type { LogLevelName } from "./log-options.ts";

const CONSOLA_LEVEL: Record<LogLevelName, number> = { error: 0, warn: 1, info: 3, debug: 4 };

let current: ConsolaInstance | undefined;
let format: LogFormat = "pretty";

/**
 * Creates the CLI logger; it satisfies the core's `Logger` interface. `timestamps` (the daemon,
 * runservice) starts every pretty line with the ISO time, as a log file read later needs.
 */
export function createCliLogger(options: {
  level: LogLevelName;
  format: LogFormat;
  timestamps?: boolean;
}): ConsolaInstance {
  const stream = process.stderr;
  const reporter =
    options.format === "json"
      ? (obj: LogObject) => stream.write(`${jsonLine(obj)}\n`)
      : options.timestamps
        ? (obj: LogObject) => stream.write(`${obj.date.toISOString()} ${prettyLine(obj)}\n`)
        : undefined;
  // Its reporters handle field bags (log-format.ts): JSON keys, or left out of a pretty line.
  return takesFieldBags(
    createConsola({
      level: CONSOLA_LEVEL[options.level],
      stdout: stream,
      stderr: stream,
      // A daemon's repeated lines are information (each outage retry), not noise to fold away.
      throttle: options.format === "json" || options.timestamps ? 0 : 1000,
      ...(reporter ? { reporters: [{ log: reporter }] } : { fancy: Boolean(stream.isTTY) }),
    }),
  );
}

/** Installs the logger main.ts built from --log-level/--log-format. */
export function setLogger(logger: ConsolaInstance, logFormat: LogFormat): void {
  current = logger;
  format = logFormat;
}

/** The log format in use (structured fields are added only for `json`). */
export function logFormat(): LogFormat {
  return format;
}

/** The CLI logger (info level, pretty format until main.ts installs the configured one). */
export function log(): ConsolaInstance {
  return (current ??= createCliLogger({ level: "info", format: "pretty" }));
}
