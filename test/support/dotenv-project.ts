// A working directory whose `.env` and the `.env` beside its config (in ops/) disagree on the
// config's one `${VAR}`: which one a run of sqloutbox read shows in the db_dir `status` reports.
import fs from "node:fs";
import path from "node:path";

/** The db_dir's name when `${QUEUE_DIR}` came from the config's `.env`, or from the working directory's. */
export const FROM_CONFIG_ENV = "queue-of-the-config-env";
export const FROM_WORKING_DIRECTORY = "queue-of-the-working-directory";

/** Writes ops/outbox.toml, ops/.env and ./.env into `dir`; returns the config's path relative to `dir`. */
export function writeDotenvProject(dir: string): string {
  fs.mkdirSync(path.join(dir, "ops"), { recursive: true });
  fs.writeFileSync(
    path.join(dir, "ops", "outbox.toml"),
    '[app.shop]\ndb_dir = "${QUEUE_DIR}"\n[app.shop.db.main]\nwriter = "sqlite"\ntables = ["orders"]\n[app.shop.db.main.connection]\npath = "remote.db"\n',
  );
  fs.writeFileSync(path.join(dir, "ops", ".env"), `QUEUE_DIR=${FROM_CONFIG_ENV}\n`);
  fs.appendFileSync(path.join(dir, ".env"), `QUEUE_DIR=${FROM_WORKING_DIRECTORY}\n`);
  return "ops/outbox.toml";
}

/** The name of the db_dir a `status --json` answer reports first. */
export function reportedQueueDir(statusJson: string): string {
  return path.basename(JSON.parse(statusJson).dbDirs[0].dbDir);
}
