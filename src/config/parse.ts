import { dirname, resolve } from "node:path";
import { parse, TomlError } from "smol-toml";
import { ConfigError } from "../errors.ts";
import { buildConfig } from "./build.ts";
import type { EnvMap } from "./interpolate.ts";
import { configSecrets, filterSecrets } from "./secret-values.ts";
import { plainTomlReason } from "./toml-syntax.ts";
import type { OutboxConfig } from "./types.ts";

/**
 * Parses and validates outbox.toml text (pure: no file, network or process.env access).
 * `file` names the source in errors and anchors relative paths; `${VAR}` resolves from `env`.
 * Throws `ConfigError` (with line/column for TOML syntax errors) or `ConfigIssuesError`.
 */
export function parseConfigToml(text: string, file: string, env: EnvMap): OutboxConfig {
  return parseConfigDocument(text, file, env).config;
}

/** `parseConfigToml` plus the secret strings the config contains (see `configSecrets`). */
export function parseConfigDocument(
  text: string,
  file: string,
  env: EnvMap,
): { config: OutboxConfig; secrets: string[] } {
  return buildTomlConfig(parseToml(text, file), text, file, env);
}

/** TOML text as a plain document; a syntax error is a `ConfigError` carrying the line and column. */
export function parseToml(text: string, file: string): unknown {
  try {
    return parse(text);
  } catch (error) {
    if (error instanceof TomlError) {
      const reason = error.message.replace(/^Invalid TOML document: /, "").split("\n")[0]!;
      const plain = plainTomlReason(reason, { text, line: error.line, column: error.column });
      // No `cause`: smol-toml's message quotes the surrounding lines, which may hold a literal credential.
      throw new ConfigError(`TOML syntax error: ${plain}`, { file, line: error.line, column: error.column });
    }
    throw error;
  }
}

/**
 * Validates a document `parseToml` read from `text` (kept for the line/column of each problem): the config
 * and its secrets.
 */
export function buildTomlConfig(
  doc: unknown,
  text: string,
  file: string,
  env: EnvMap,
): { config: OutboxConfig; secrets: string[] } {
  const { config, interpolatedSecrets } = buildConfig(doc, {
    file,
    baseDir: dirname(resolve(file)),
    env,
    style: "toml",
    text,
  });
  return { config, secrets: filterSecrets([...interpolatedSecrets, ...configSecrets(config)]) };
}
