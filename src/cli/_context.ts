// The process-wide CLI logger: set once by main.ts, read by the commands.
import type { ConsolaInstance } from "consola";
import { createCliLogger, type LogFormat } from "./_log.ts";

let current: ConsolaInstance | undefined;
let format: LogFormat = "pretty";

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
