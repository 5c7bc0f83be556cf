import { readFileSync } from "node:fs";
import { join } from "node:path";
import { SecretsError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import { DOPPLER_DEFAULT_BASE_URL, fetchDopplerSecrets } from "./doppler.ts";
import { parseDotenv } from "./dotenv.ts";
import type { EnvMap } from "./interpolate.ts";

/** Where `${VAR}` values come from; every field is optional. */
export interface SecretsOptions {
  /** The process environment to start from (default `process.env`); never mutated. */
  env?: EnvMap;
  /**
   * Doppler API base URL; else env `DOPPLER_API_URL`; else https://api.doppler.com. https, or http to a
   * loopback host only.
   */
  dopplerBaseUrl?: string;
  /** Doppler request timeout per attempt, ms (default 10 000). */
  dopplerTimeoutMs?: number;
  /** The largest Doppler response read, bytes (default 4 MiB); a larger one halts startup unbuffered. */
  dopplerMaxBytes?: number;
  /** Waits before each Doppler retry, ms (default [250, 500]: 3 attempts); `[]` tries once. */
  dopplerRetryDelaysMs?: readonly number[];
  fetch?: typeof fetch;
  logger?: Logger;
}

/**
 * Builds the variable map for `${VAR}`: process env > `.env` in `configDir` > Doppler (fetched only
 * when `DOPPLER_TOKEN` is set after the first two). A lower source never overwrites a higher one.
 * Returns the map and the secrets it introduced (the Doppler token and every Doppler value).
 */
export async function resolveEnv(
  configDir: string,
  options: SecretsOptions = {},
): Promise<{ env: EnvMap; secrets: string[] }> {
  const env = localEnv(configDir, options);
  const token = env.DOPPLER_TOKEN;
  if (!token) return { env, secrets: [] };

  const baseUrl = options.dopplerBaseUrl ?? env.DOPPLER_API_URL ?? DOPPLER_DEFAULT_BASE_URL;
  const doppler = await fetchDopplerSecrets({
    token,
    baseUrl,
    timeoutMs: options.dopplerTimeoutMs,
    maxBytes: options.dopplerMaxBytes,
    retryDelaysMs: options.dopplerRetryDelaysMs,
    fetch: options.fetch,
    logger: options.logger,
  });
  const added = addMissing(env, doppler);
  options.logger?.info(`loaded ${added} of ${Object.keys(doppler).length} Doppler secret(s)`);
  return { env, secrets: [token, ...Object.values(doppler)] };
}

/**
 * The variables at hand without the network: process env (or `options.env`) > `.env` in `configDir`. A new
 * map; Doppler is not asked.
 */
export function localEnv(configDir: string, options: Pick<SecretsOptions, "env" | "logger"> = {}): EnvMap {
  const env: EnvMap = { ...(options.env ?? process.env) };
  const dotenvFile = join(configDir, ".env");
  const dotenv = readDotenv(dotenvFile);
  if (dotenv) {
    const added = addMissing(env, dotenv);
    options.logger?.debug(`loaded ${added} variable(s) from ${dotenvFile}`);
  }
  return env;
}

function readDotenv(file: string): Record<string, string> | undefined {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw new SecretsError(`cannot read ${file}: ${(error as Error).message}`, { cause: error });
  }
  return parseDotenv(text, file);
}

/** setdefault semantics: only keys the map does not hold yet; returns how many were added. */
function addMissing(env: EnvMap, values: Record<string, string>): number {
  let added = 0;
  for (const [key, value] of Object.entries(values)) {
    if (env[key] === undefined) {
      env[key] = value;
      added++;
    }
  }
  return added;
}
