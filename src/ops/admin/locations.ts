import fs from "node:fs";
import type { AppLayout } from "../../config/layout.ts";
import { NotFoundError } from "../../errors.ts";
import { tableFile } from "../../outbox/files.ts";
import { fileHealth, type NamespaceHealth } from "../../outbox/health.ts";
import { tableNameProblem } from "../../outbox/table-name.ts";
import { RequestError } from "./requests.ts";

/** One app's queue location as the admin API names it: `{app}` in every path and id. */
export type AdminApp = AppLayout;

/** A table the admin API acts on: its app, its file (which exists) and its health when it was found. */
export interface AdminTable {
  app: AdminApp;
  namespace: string;
  file: string;
  health: NamespaceHealth;
}

/** The app named `name` (404 when the config has none). */
export function appNamed(apps: readonly AdminApp[], name: string): AdminApp {
  const app = apps.find((a) => a.name === name);
  if (!app)
    throw new NotFoundError(`no app "${name}" in this drain's config (apps: ${apps.map((a) => a.name).join(", ")})`);
  return app;
}

/**
 * The file that holds the table `namespace` of `app` (see tableFile), which must exist: nothing is
 * created. The name must pass the producer's own check (`tableNameProblem`) first, so nothing that
 * is not a table name — `../x`, a path — ever reaches the file system.
 */
export function existingTableFile(app: AdminApp, namespace: string): string {
  const problem = tableNameProblem(namespace);
  if (problem !== null) throw new RequestError(400, "E_USAGE", `namespace: ${problem}`);
  const file = tableFile(app, namespace);
  if (!fs.existsSync(file)) throw new NotFoundError(`no table "${namespace}" in app "${app.name}" (no ${file})`);
  return file;
}

/** The table `namespace` of `app`, read-only: its file (existingTableFile) holds that namespace. */
export function tableOf(app: AdminApp, namespace: string): AdminTable {
  const file = existingTableFile(app, namespace);
  const health = fileHealth(file, { maxPending: app.maxPending }).find((h) => h.namespace === namespace);
  if (!health) throw new NotFoundError(`no table "${namespace}" in app "${app.name}" (not in ${file})`);
  return { app, namespace, file, health };
}
