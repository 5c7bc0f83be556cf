import { dirname, resolve } from "node:path";
import { interpolate, type EnvMap } from "./interpolate.ts";
import { isTable } from "./reader.ts";
import { filterSecrets } from "./secret-values.ts";
import type { OutboxConfig } from "./types.ts";

/** What inspecting an app's queues needs: where its files are and its producers' cap. */
export interface AppLayout {
  name: string;
  dbDir: string;
  maxPending: number | null;
}

/** Each app's layout in a validated config. */
export function layoutOf(config: OutboxConfig): AppLayout[] {
  return config.apps.map(({ name, dbDir, maxPending }) => ({ name, dbDir, maxPending }));
}

/**
 * Each app's layout read from a TOML document without validating the rest, for a config the drain
 * refuses; every `[connection]` string whose `${VAR}`s are set counts as a secret (nothing tells
 * which keys are credentials when the writer is not checked). Null when there are no apps or an
 * app has no usable `db_dir`.
 */
export function readLayout(doc: unknown, file: string, env: EnvMap): { apps: AppLayout[]; secrets: string[] } | null {
  const appsRaw = isTable(doc) && isTable(doc.app) ? doc.app : {};
  const apps: AppLayout[] = [];
  const secrets = new Set<string>();
  for (const [name, raw] of Object.entries(appsRaw)) {
    if (!isTable(raw) || typeof raw.db_dir !== "string" || raw.db_dir === "") return null;
    let dbDir: string;
    try {
      dbDir = resolve(dirname(file), interpolate(raw.db_dir, env));
    } catch {
      return null; // db_dir names a variable this shell does not have
    }
    const maxPending = typeof raw.max_pending === "number" && raw.max_pending > 0 ? raw.max_pending : null;
    for (const db of Object.values(isTable(raw.db) ? raw.db : {})) {
      for (const value of Object.values(isTable(db) && isTable(db.connection) ? db.connection : {})) {
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
  return apps.length === 0 ? null : { apps, secrets: filterSecrets(secrets) };
}
