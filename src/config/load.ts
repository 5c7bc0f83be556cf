import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { ConfigError } from "../errors.ts";
import type { OutboxWriter, TenantWriters } from "../writers/writer.ts";
import type { EnvMap } from "./interpolate.ts";
import { layoutOf, readLayout, type AppLayout } from "./layout.ts";
import { buildTomlConfig, parseConfigDocument, parseToml } from "./parse.ts";
import { localEnv, resolveEnv, type SecretsOptions } from "./secrets.ts";
import { filterSecrets } from "./secret-values.ts";
import type { OutboxConfig } from "./types.ts";
import { createWriters } from "./writers.ts";

/** Options for `loadConfigToml`: where secrets come from, plus a logger. */
export type LoadConfigOptions = SecretsOptions;

/** What `loadConfigToml` returns. */
export interface LoadedConfig {
  config: OutboxConfig;
  /** One writer per target, keyed `app.db`; a tenant template's target has its `TenantWriters`. */
  writers: Record<string, OutboxWriter | TenantWriters>;
  /** Every credential string found while loading: mask these in anything you print (`maskSecrets`). */
  secrets: string[];
}

/**
 * Reads outbox.toml, resolves `${VAR}` from process env > `.env` beside the file > Doppler
 * (when `DOPPLER_TOKEN` is set), validates, and constructs every target's writer.
 * Throws `ConfigError`/`ConfigIssuesError` for the file, `SecretsError` for `.env`/Doppler.
 */
export async function loadConfigToml(path: string, options: LoadConfigOptions = {}): Promise<LoadedConfig> {
  const file = resolve(path);
  const text = readConfigText(file);
  const { env, secrets: envSecrets } = await resolveEnv(dirname(file), options);
  const { config, secrets: configSecrets } = parseConfigDocument(text, file, env);
  const secrets = filterSecrets([...envSecrets, ...configSecrets]);
  const writers = await createWriters(config, { secrets, logger: options.logger });
  return { config, writers, secrets };
}

/** What `inspectConfigToml` returns. */
export interface InspectedConfig {
  apps: AppLayout[];
  /** The credential strings found: mask these in anything printed. */
  secrets: string[];
  /**
   * Set when the drain would refuse the config and only each app's layout was read: its error, and the
   * `${VAR}`s it names that are not set here.
   */
  layoutOnly?: { problem: unknown; unsetVariables: string[] };
}

/**
 * Reads outbox.toml for inspecting the queues (`status`, `verify`, the repair commands): the same
 * parsing, `.env` and `${VAR}` code as `loadConfigToml`, but no writer is constructed, nothing
 * connects and Doppler is not asked. Secrets often live only in the drain's environment, and a
 * typo after an edit is exactly when an operator needs `status`: when the config does not validate
 * here, each app's layout is still read and `layoutOnly` says why. Throws the config's own error
 * when not even that is readable (a TOML syntax error, no apps, no usable db_dir).
 */
export function inspectConfigToml(path: string, options: { env?: EnvMap } = {}): InspectedConfig {
  const file = resolve(path);
  const text = readConfigText(file);
  const env = localEnv(dirname(file), options);
  const doc = parseToml(text, file);
  const unset = new Set<string>();
  const recording = new Proxy(env, {
    get: (target, key) => {
      if (typeof key !== "string") return undefined;
      if (target[key] === undefined) unset.add(key);
      return target[key];
    },
  });
  try {
    const { config, secrets } = buildTomlConfig(doc, text, file, recording);
    return { apps: layoutOf(config), secrets };
  } catch (problem) {
    const layout = readLayout(doc, file, env);
    if (!layout) throw problem;
    return { ...layout, layoutOnly: { problem, unsetVariables: [...unset] } };
  }
}

/** The config file's text, or a ConfigError naming it (a directory, no permission) instead of a bare system error. */
function readConfigText(file: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch (error) {
    throw new ConfigError(`cannot read config file: ${(error as Error).message}`, { file }, { cause: error });
  }
}
