import { existsSync, readdirSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { StorageError } from "../errors.ts";

/**
 * Absolute paths of the outbox files in `dbDir` (`*.db` regular files, sorted), without opening
 * them; throws StorageError when the directory cannot be read (a missing db_dir is reported, not
 * mistaken for an empty one).
 */
export function listOutboxFiles(dbDir: string): string[] {
  const dir = resolve(dbDir);
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (e) {
    const code = (e as { code?: string }).code;
    throw new StorageError(
      `cannot list db_dir ${dir}: ${code === "ENOENT" ? "it does not exist" : (e as Error).message}`,
      dir,
      undefined,
      { cause: e },
    );
  }
  return names
    .filter((n) => n.endsWith(".db"))
    .map((n) => join(dir, n))
    .filter((p) => {
      try {
        return statSync(p).isFile();
      } catch {
        return false; // vanished between readdir and stat
      }
    })
    .sort();
}

/** Where queues are: a db_dir (one `{table}.db` file per table), or `{ dbFile }`: one file holding every table. */
export type QueueLocation = string | QueueDir;

/** An app's queue location: its db_dir, and its db_file (in that directory) when one file holds every table. */
export interface QueueDir {
  dbDir: string;
  dbFile: string | null;
}

/**
 * The file that holds `table` in `app`'s location: the db_file, which holds every table, or
 * `{db_dir}/{table}.db`. The name is not checked here: each caller checks it first
 * (tableNameProblem) and says so in its own error, so no name the producer refuses reaches a path.
 */
export function tableFile(app: QueueDir, table: string): string {
  return app.dbFile ?? join(app.dbDir, `${table}.db`);
}

/**
 * The queue files of a location without opening them: the `*.db` files of a db_dir (see
 * listOutboxFiles), or the one db_file. Throws StorageError when the directory or the file does
 * not exist (a missing location is reported, not mistaken for an empty one).
 */
export function queueFilesOf(location: QueueLocation): string[] {
  if (typeof location === "string" || location.dbFile === null)
    return listOutboxFiles(typeof location === "string" ? location : location.dbDir);
  const file = resolve(location.dbFile);
  if (!existsSync(file)) throw new StorageError(`db_file ${file} does not exist`, file);
  return [file];
}
