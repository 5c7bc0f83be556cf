import fs from "node:fs";
import { DEFAULT_FILE_MODE } from "../vocabulary.ts";
import type { TargetView } from "./views.ts";

/** How often `runService` rewrites each db_dir's state file unless `stateIntervalMs` says otherwise: 2 s. */
export const DEFAULT_STATE_INTERVAL_MS = 2_000;

/** What a running drain persists for each db_dir, so `status` shows it without a network call. */
export interface DrainState {
  version: 1;
  pid: number;
  startedAt: string;
  /** When this was written; a running drain rewrites it every few seconds. */
  updatedAt: string;
  /** Set when the drain stopped cleanly (the state is then final, not stale). */
  stoppedAt: string | null;
  targets: PersistedTarget[];
}

/** One target in the state file: the drain's view of it, and its delivery over the last interval. */
export interface PersistedTarget extends TargetView {
  /**
   * Rows delivered between the previous write of the state and this one, and the time between the
   * two (ms): what `status` shows as rows/s. Null in a drain's first write (and absent in files
   * of older versions).
   */
  recent?: { delivered: number; ms: number } | null;
}

/**
 * Writes `state` to the state file (`<db_dir>/.sqloutbox-state.json`, or beside the db_file: see
 * drainHome) atomically (a temp file renamed over it), so a reader never sees half a file; created
 * with `fileMode` (error messages may quote rows).
 */
export function writeDrainState(file: string, state: DrainState, fileMode = DEFAULT_FILE_MODE): void {
  const tmp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, `${JSON.stringify(state, null, 1)}\n`, { mode: fileMode });
  fs.renameSync(tmp, file);
}

/** The drain state in `file` (see drainHome), or null when no drain ever wrote one (or it is unreadable). */
export function readDrainState(file: string): DrainState | null {
  try {
    const parsed = JSON.parse(fs.readFileSync(file, "utf8")) as DrainState;
    return parsed?.version === 1 && Array.isArray(parsed.targets) ? parsed : null;
  } catch {
    return null;
  }
}
