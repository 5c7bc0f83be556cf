export { loadConfigToml, type LoadConfigOptions, type LoadedConfig } from "./load.ts";
export { parseConfigToml } from "./parse.ts";
export { defineConfig, type ConfigInput, type AppInput, type TargetInput, type TableInput } from "./define.ts";
export { createWriters, type CreateWritersOptions } from "./writers.ts";
export { maskSecrets } from "../masking.ts";
export { configSecrets } from "./secret-values.ts";
export { resolveEnv, type SecretsOptions } from "./secrets.ts";
export { DEFAULTS, type OutboxConfig, type AppConfig, type TargetConfig, type TableConfig } from "./types.ts";
