// Reading outbox.toml for the read-only commands: the config is parsed and validated, but no
// writer is constructed, nothing connects, and Doppler is not called. A `${VAR}` that is not
// set in this shell (secrets usually live only in the service's environment) must not stop an
// operator from running `status`, so unset variables read as a placeholder — except in db_dir.
import fs from "node:fs";
import path from "node:path";
import { parseDotenv } from "../config/dotenv.ts";
import { parseConfigDocument } from "../config/parse.ts";
import type { OutboxConfig } from "../config/types.ts";
import { ConfigError, NotFoundError } from "../errors.ts";

const UNSET = "__sqloutbox_unset__";

/** Parses `file` with process env and the `.env` beside it; returns the config and its secret values. */
export function readConfigForInspection(file: string): { config: OutboxConfig; secrets: string[] } {
  if (!fs.existsSync(file)) throw new NotFoundError(`config file ${file} does not exist`);
  const text = fs.readFileSync(file, "utf8");
  const dotenvFile = path.join(path.dirname(file), ".env");
  const dotenv = fs.existsSync(dotenvFile) ? parseDotenv(fs.readFileSync(dotenvFile, "utf8"), dotenvFile) : {};
  const known: Record<string, string | undefined> = { ...dotenv, ...process.env };
  const env = new Proxy(known, {
    get: (target, key) => (typeof key === "string" ? (target[key] ?? `${UNSET}${key}`) : undefined),
  });
  const { config, secrets } = parseConfigDocument(text, file, env);
  for (const app of config.apps) {
    if (app.dbDir.includes(UNSET)) {
      const name = app.dbDir.slice(app.dbDir.indexOf(UNSET) + UNSET.length).split(/[^A-Za-z0-9_]/)[0];
      throw new ConfigError(`environment variable "${name}" is not set (process env, .env)`, { file, keyPath: `app.${app.name}.db_dir` });
    }
  }
  return { config, secrets: secrets.filter((s) => !s.includes(UNSET)) };
}
