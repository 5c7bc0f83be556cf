import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { ConfigError } from "../errors.ts";
import type { OutboxWriter } from "../writers/writer.ts";
import { parseConfigDocument } from "./parse.ts";
import { resolveEnv, type SecretsOptions } from "./secrets.ts";
import { filterSecrets } from "./secret-values.ts";
import type { OutboxConfig } from "./types.ts";
import { createWriters } from "./writers.ts";

/** Options for `loadConfigToml`: where secrets come from, plus a logger. */
export type LoadConfigOptions = SecretsOptions;

/** What `loadConfigToml` returns. */
export interface LoadedConfig {
  config: OutboxConfig;
  /** One writer per target, keyed `app.db`. */
  writers: Record<string, OutboxWriter>;
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
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    throw new ConfigError(`cannot read config file: ${(error as Error).message}`, { file }, { cause: error });
  }
  const { env, secrets: envSecrets } = await resolveEnv(dirname(file), options);
  const { config, secrets: configSecrets } = parseConfigDocument(text, file, env);
  const secrets = filterSecrets([...envSecrets, ...configSecrets]);
  const writers = await createWriters(config, { secrets, logger: options.logger });
  return { config, writers, secrets };
}
