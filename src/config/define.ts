import { resolve } from "node:path";
import { buildConfig } from "./build.ts";
import type { Input } from "./declaration.ts";
import type { TOP_KEYS } from "./keys.ts";
import type { OutboxConfig } from "./types.ts";

// The input types follow the declarations of keys.ts: each key in camelCase, in its TOML unit
// (seconds, minutes, as the names say); `null` or 0 means "no limit" for maxPending and maxAttempts.
export type { AdminInput, AppInput, TableInput, TargetInput, TracingInput } from "./keys.ts";

/** The programmatic form of outbox.toml. */
export type ConfigInput = Input<typeof TOP_KEYS> & {
  /** Relative `dbDir`, `writerClass` and sqlite `path` resolve against this (default: the cwd). */
  baseDir?: string;
};

/**
 * Validates a programmatic config exactly like outbox.toml (camelCase keys, no `${VAR}`
 * interpolation) and returns it with defaults applied and paths absolute. Throws `ConfigError`/`ConfigIssuesError`.
 */
export function defineConfig(input: ConfigInput): OutboxConfig {
  const { baseDir, ...doc } = input;
  return buildConfig(doc, { baseDir: resolve(baseDir ?? process.cwd()), env: null, style: "camel" }).config;
}
