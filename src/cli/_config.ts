// Reading outbox.toml for the read-only commands: the config is parsed and validated, but no
// writer is constructed, nothing connects, and Doppler is not called. Secrets usually live only
// in the service's environment, so a `${VAR}` that is not set in the operator's shell must not
// stop `status`: then only the layout (each app's db_dir and max_pending) is read.
import fs from "node:fs";
import path from "node:path";
import { parse } from "smol-toml";
import { parseDotenv } from "../config/dotenv.ts";
import { interpolate } from "../config/interpolate.ts";
import { parseConfigDocument } from "../config/parse.ts";
import { filterSecrets } from "../config/secret-values.ts";
import type { OutboxConfig } from "../config/types.ts";
import { ConfigError, NotFoundError } from "../errors.ts";
import { log } from "./_context.ts";

/** What the read-only commands need of an app: where its files are and its producers' cap. */
export interface AppLayout {
  name: string;
  dbDir: string;
  maxPending: number | null;
}

/** Parses `file` with process env and the `.env` beside it; returns each app's layout and the config's secret values. */
export function readConfigForInspection(file: string): { apps: AppLayout[]; secrets: string[] } {
  if (!fs.existsSync(file)) throw new NotFoundError(`config file ${file} does not exist`);
  const text = readText(file, file);
  const dotenvFile = path.join(path.dirname(file), ".env");
  const dotenv = fs.existsSync(dotenvFile) ? parseDotenv(readText(dotenvFile, file), dotenvFile) : {};
  const env: Record<string, string | undefined> = { ...dotenv, ...process.env };
  const missing = new Set<string>();
  const recording = new Proxy(env, {
    get: (target, key) => {
      if (typeof key !== "string") return undefined;
      if (target[key] === undefined) missing.add(key);
      return target[key];
    },
  });
  let problem: unknown;
  try {
    const { config, secrets } = parseConfigDocument(text, file, recording);
    return { apps: layoutOf(config), secrets };
  } catch (err) {
    problem = err;
  }
  // The queues stay inspectable when the config is not valid for the drain (a typo after an
  // edit is exactly when the operator needs status): warn, then read only the db_dirs.
  let layout: { apps: AppLayout[]; secrets: string[] };
  try {
    layout = readLayout(text, file, env);
  } catch {
    throw problem; // not even the db_dirs are readable (a TOML syntax error, no db_dir)
  }
  if (layout.apps.length === 0) throw problem;
  if (missing.size > 0) {
    log().warn(`${[...missing].map((v) => `\${${v}}`).join(", ")} not set in this shell: reading only the db_dirs of ${file}`);
  } else {
    log().warn(`${(problem as Error).message}\n  (the drain refuses this config; reading only the db_dirs of ${file})`);
  }
  return layout;
}

/** A file's text, or a ConfigError naming it (a directory, no permission) instead of a stack trace. */
function readText(path: string, configFile: string): string {
  try {
    return fs.readFileSync(path, "utf8");
  } catch (err) {
    const what = path === configFile ? "config file" : path;
    throw new ConfigError(`cannot read ${what}: ${(err as Error).message}`, { file: configFile }, { cause: err });
  }
}

function layoutOf(config: OutboxConfig): AppLayout[] {
  return config.apps.map(({ name, dbDir, maxPending }) => ({ name, dbDir, maxPending }));
}

/** Each app's db_dir and max_pending, without validating targets; every connection string counts as secret. */
function readLayout(text: string, file: string, env: Record<string, string | undefined>): { apps: AppLayout[]; secrets: string[] } {
  const doc = parse(text) as { app?: Record<string, Record<string, unknown>> };
  const apps: AppLayout[] = [];
  const secrets = new Set<string>();
  for (const [name, raw] of Object.entries(doc.app ?? {})) {
    const keyPath = `app.${name}.db_dir`;
    if (typeof raw.db_dir !== "string" || raw.db_dir === "") throw new ConfigError("required: a non-empty string", { file, keyPath });
    let dbDir: string;
    try {
      dbDir = path.resolve(path.dirname(file), interpolate(raw.db_dir, env));
    } catch (err) {
      throw new ConfigError((err as Error).message, { file, keyPath });
    }
    const maxPending = typeof raw.max_pending === "number" && raw.max_pending > 0 ? raw.max_pending : null;
    for (const db of Object.values((raw.db ?? {}) as Record<string, { connection?: Record<string, unknown> }>)) {
      for (const value of Object.values(db.connection ?? {})) {
        if (typeof value !== "string") continue;
        try {
          secrets.add(interpolate(value, env));
        } catch {
          // An unset variable: nothing to mask.
        }
      }
    }
    apps.push({ name, dbDir, maxPending });
  }
  return { apps, secrets: filterSecrets(secrets) };
}
