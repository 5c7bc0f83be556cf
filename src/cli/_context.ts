// The process-wide CLI logger: set once by main.ts, read by the commands.
import type { ConsolaInstance } from "consola";
import { createCliLogger } from "./_log.ts";

let current: ConsolaInstance | undefined;

/** Installs the logger main.ts built from --log-level/--log-format. */
export function setLogger(logger: ConsolaInstance): void {
  current = logger;
}

/** The CLI logger (info level, pretty format until main.ts installs the configured one). */
export function log(): ConsolaInstance {
  return (current ??= createCliLogger({ level: "info", format: "pretty" }));
}
