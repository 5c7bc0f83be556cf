import path from "node:path";
import type { QueueLocation } from "../outbox/files.ts";

/**
 * Where the drain of an app's queues keeps its lock (one drain per db_dir or db_file) and the
 * state file `status` reads: inside the db_dir (`.sqloutbox.lock`, `.sqloutbox-state.json`), or
 * beside the db_file (`<db_file>.sqloutbox.lock`, `<db_file>.sqloutbox-state.json`) — never inside
 * a directory the db_file shares with other files of the application.
 */
export function drainHome(location: QueueLocation): { lockFile: string; stateFile: string } {
  if (typeof location === "string") location = { dbDir: location, dbFile: null }; // a db_dir
  if (location.dbFile !== null) {
    const file = path.resolve(location.dbFile);
    return { lockFile: `${file}.sqloutbox.lock`, stateFile: `${file}.sqloutbox-state.json` };
  }
  const dir = path.resolve(location.dbDir);
  return { lockFile: path.join(dir, ".sqloutbox.lock"), stateFile: path.join(dir, ".sqloutbox-state.json") };
}
