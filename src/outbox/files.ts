import { readdirSync, statSync } from "node:fs";
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
    throw new StorageError(`cannot list db_dir ${dir}: ${code === "ENOENT" ? "it does not exist" : (e as Error).message}`, dir, undefined, { cause: e });
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
