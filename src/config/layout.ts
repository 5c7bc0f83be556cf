import { dirname, resolve } from "node:path";
import { interpolate, type EnvMap } from "./interpolate.ts";
import { isTable } from "./reader.ts";
import { connectionSecrets, filterSecrets, variableSecrets } from "./secret-values.ts";
import type { OutboxConfig } from "./types.ts";

/**
 * What inspecting an app's queues needs: where its files are (a db_dir, or one db_file in dbDir) and its
 * producers' cap.
 */
export interface AppLayout {
  name: string;
  dbDir: string;
  dbFile: string | null;
  maxPending: number | null;
}

/** Each app's layout in a validated config. */
export function layoutOf(config: Pick<OutboxConfig, "apps">): AppLayout[] {
  return config.apps.map(({ name, dbDir, dbFile, maxPending }) => ({ name, dbDir, dbFile, maxPending }));
}

/**
 * Each app's layout read from a TOML document without validating the rest, for a config the drain
 * refuses; the credentials of every `[connection]` string whose `${VAR}`s are set are secrets, as
 * the drain finds them (see connectionSecrets). Null when there are no apps or an
 * app has no usable `db_dir` or `db_file`.
 */
export function readLayout(doc: unknown, file: string, env: EnvMap): { apps: AppLayout[]; secrets: string[] } | null {
  const appsRaw = isTable(doc) && isTable(doc.app) ? doc.app : {};
  const apps: AppLayout[] = [];
  const secrets = new Set<string>();
  for (const [name, raw] of Object.entries(appsRaw)) {
    if (!isTable(raw)) return null;
    const given = [raw.db_dir, raw.db_file].filter((v) => v !== undefined);
    const where = given[0];
    if (given.length !== 1 || typeof where !== "string" || where === "") return null;
    let path: string;
    try {
      path = resolve(dirname(file), interpolate(where, env));
    } catch {
      return null; // db_dir or db_file names a variable this shell does not have
    }
    const dbFile = raw.db_file === undefined ? null : path;
    const dbDir = dbFile === null ? path : dirname(path);
    const maxPending = typeof raw.max_pending === "number" && raw.max_pending > 0 ? raw.max_pending : null;
    for (const db of Object.values(isTable(raw.db) ? raw.db : {})) {
      const writer = isTable(db) && typeof db.writer === "string" ? db.writer : null;
      for (const [key, value] of Object.entries(isTable(db) && isTable(db.connection) ? db.connection : {})) {
        if (typeof value !== "string") continue;
        try {
          const used = interpolate(value, env, (name, v) => {
            for (const secret of variableSecrets(writer, key, name, v)) secrets.add(secret);
          });
          for (const secret of connectionSecrets(writer, { [key]: used })) secrets.add(secret);
        } catch {
          // An unset variable: nothing to mask.
        }
      }
    }
    apps.push({ name, dbDir, dbFile, maxPending });
  }
  return apps.length === 0 ? null : { apps, secrets: filterSecrets(secrets) };
}
