import { statSync } from "node:fs";
import { describeError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import type { QueueDb } from "../outbox/queue-db.ts";
import { realScheduler, type Scheduler } from "../scheduler.ts";

/** How often one file is looked after at most. */
const TEND_EVERY_MS = 1_000;
/** A WAL above this is checkpointed (passively) even while the file is busy. */
const CHECKPOINT_AT_BYTES = 4 * 1024 * 1024;
/** The least and the most time between two checkpoints of a file others write (see FileCare.#checkpointForWriters). */
const WRITERS_CHECKPOINT_MIN_MS = 50;
const WRITERS_CHECKPOINT_MAX_MS = 1_000;
/**
 * WAL frames a checkpoint for writers aims to find: a quarter of the 1 000 at which a writer's commit
 * checkpoints itself.
 */
const WRITERS_CHECKPOINT_FRAMES = 250;
/** Free pages that make an idle file give space back (2 MiB at our 2 KiB pages). */
const VACUUM_FROM_FREE_PAGES = 1_024;
/** Pages one incremental-vacuum step frees: one short write transaction each. */
const VACUUM_STEP_PAGES = 512;
/** Time one look may spend vacuuming; the rest waits for the next look. */
const VACUUM_BUDGET_MS = 20;

/** What the drain last saw of one file: its WAL and free space, for `status` and the metrics. */
export interface FileCondition {
  file: string;
  walBytes: number;
  freePages: number;
  /** The application's own database (only passive checkpoints, no vacuum). */
  embedded: boolean;
}

/**
 * Keeps every queue file the drain serves in shape between batches: its WAL bounded and its
 * space given back, without ever blocking a producer for long. A file others keep committing to
 * gets PASSIVE checkpoints 50 ms to 1 s apart, so that its writers' commits do none (see
 * #checkpointForWriters). At most once a second per file:
 *
 * - a WAL above 4 MiB gets a PASSIVE checkpoint (it never waits for or blocks anyone);
 * - an idle file (nothing pending in the tables this drain serves from it) gets a TRUNCATE
 *   checkpoint, so its WAL goes back to zero bytes, and, when it holds more than 1 024 free pages
 *   (a drained backlog), incremental-vacuum steps of 512 pages, each its own short transaction,
 *   20 ms at most per look — files we create have `auto_vacuum = INCREMENTAL`;
 * - all of it with a zero busy timeout: a file another connection is busy with is left for the
 *   next look rather than waited for.
 *
 * An application's own database only ever gets passive checkpoints: its journal, its vacuum mode
 * and its writers' locks are the application's.
 */
export class FileCare {
  readonly #looked = new Map<string, number>();
  /**
   * When a file was last looked at for its other writers, its data_version then, whether it had moved, and
   * the time to the next look.
   */
  readonly #forWriters = new Map<string, { at: number; version: number; moved: boolean; everyMs: number }>();
  readonly #conditions = new Map<string, FileCondition>();
  /** Files whose vacuum the budget cut short: looked at again when due, whether or not anything commits. */
  readonly #unfinished = new Set<string>();

  constructor(
    private readonly logger: Logger,
    /** Time one look may spend vacuuming (at least one step is taken). */
    private readonly vacuumBudgetMs = VACUUM_BUDGET_MS,
    /** Whose time the budget is measured in. */
    private readonly scheduler: Scheduler = realScheduler,
  ) {}

  /** The files as last looked at, by path. */
  conditions(): FileCondition[] {
    return [...this.#conditions.values()];
  }

  /**
   * Looks after `file` when it is due; `idle()` says whether nothing is pending in it (asked only
   * when due). Returns when this file wants its next look (the drain's clock), or null when only
   * its next commit does: a vacuum the budget cut short goes on a second later, not at the next
   * cycle, which an idle drain may not run for many seconds (the space of a drained backlog would
   * come back only minutes later).
   */
  tend(file: QueueDb, now: number, idle: () => boolean): number | null {
    if (!file.closed) this.#checkpointForWriters(file, now);
    const lookedAt = this.#looked.get(file.path) ?? 0;
    if (now - lookedAt < TEND_EVERY_MS || file.closed)
      return this.#unfinished.has(file.path) ? lookedAt + TEND_EVERY_MS : null;
    this.#looked.set(file.path, now);
    this.#unfinished.delete(file.path);
    const { db } = file;
    try {
      let walBytes = walSize(file.path);
      const quiet = idle();
      const busyTimeoutMs = db.query<{ timeout: number }, []>("PRAGMA busy_timeout").get()?.timeout ?? 0;
      db.run("PRAGMA busy_timeout = 0");
      try {
        if (quiet && !file.embedded) {
          if (walBytes > 0) checkpoint(file, "TRUNCATE");
          if (this.#vacuum(file)) this.#unfinished.add(file.path);
        } else if (walBytes > CHECKPOINT_AT_BYTES || (quiet && walBytes > 0)) {
          checkpoint(file, "PASSIVE");
        }
      } finally {
        db.run(`PRAGMA busy_timeout = ${busyTimeoutMs}`);
      }
      walBytes = walSize(file.path);
      const freePages = db.query<{ freelist_count: number }, []>("PRAGMA freelist_count").get()?.freelist_count ?? 0;
      this.#conditions.set(file.path, { file: file.path, walBytes, freePages, embedded: file.embedded });
    } catch (error) {
      // Only housekeeping: a file that cannot be looked after now is looked after at the next look.
      this.logger.debug(`drain: looking after ${file.path} failed: ${describeError(error).message}`);
    }
    return this.#unfinished.has(file.path) ? now + TEND_EVERY_MS : null;
  }

  /**
   * A PASSIVE checkpoint of a file others keep committing to — from the drain's connection,
   * between its write holds — so that the WAL starts over before it holds 1 000 frames. Without it
   * the file's writers (producers' pushes, an application's own transactions) do the checkpoints
   * in their commits: once the WAL holds 1 000 frames (wal_autocheckpoint), and, while the drain's
   * reads keep the WAL from starting over, in every commit until it does: an application's commits
   * and its producers' pushes then take several times as long as with no drain; with it, far less
   * (docs/benchmarks.md, `app-writes`).
   *
   * Looks come 50 ms to 1 s apart. A look reads `PRAGMA data_version`, which moves when another
   * connection commits. Unmoved, the next look is twice as far; moved, 50 ms away; moved at two
   * looks in a row, it checkpoints, and the next look is twice as far when the WAL held fewer than
   * half WRITERS_CHECKPOINT_FRAMES frames, 50 ms away when it held more than twice as many. So a
   * drain alone on a backlog checkpoints nothing here (looking every 50 ms regardless cost it a share
   * of its rate), nor does a file pushed to now and then (a checkpoint is two fsyncs, and the next commit
   * restarts the WAL: the look once a second does those), and a thousand quiet files cost a
   * thousand reads a second.
   */
  #checkpointForWriters(file: QueueDb, now: number): void {
    const last = this.#forWriters.get(file.path);
    if (last !== undefined && now - last.at < last.everyMs) return;
    try {
      const { data_version: version } = file.db.query<{ data_version: number }, []>("PRAGMA data_version").get()!;
      const moved = last !== undefined && version !== last.version;
      let everyMs = last?.everyMs ?? WRITERS_CHECKPOINT_MIN_MS;
      if (!moved) everyMs = Math.min(WRITERS_CHECKPOINT_MAX_MS, everyMs * 2);
      else if (!last.moved) everyMs = WRITERS_CHECKPOINT_MIN_MS;
      else {
        // The frames the WAL holds (-1: a writer is checkpointing it, so it holds 1 000): about
        // those since the last look, as the WAL starts over after a checkpoint.
        const frames = checkpoint(file, "PASSIVE"); // never waits, never blocks a writer
        if (frames < 0 || frames > 2 * WRITERS_CHECKPOINT_FRAMES) everyMs = WRITERS_CHECKPOINT_MIN_MS;
        else if (frames < WRITERS_CHECKPOINT_FRAMES / 2) everyMs = Math.min(WRITERS_CHECKPOINT_MAX_MS, everyMs * 2);
      }
      this.#forWriters.set(file.path, { at: now, version, moved, everyMs });
    } catch (error) {
      this.logger.debug(`drain: checkpointing ${file.path} failed: ${describeError(error).message}`);
    }
  }

  /** Gives free pages back in steps while the budget lasts (a busy file is left for later); true: some are left. */
  #vacuum(file: QueueDb): boolean {
    const { db } = file;
    if (db.query<{ auto_vacuum: number }, []>("PRAGMA auto_vacuum").get()?.auto_vacuum !== 2) return false;
    let free = db.query<{ freelist_count: number }, []>("PRAGMA freelist_count").get()?.freelist_count ?? 0;
    if (free < VACUUM_FROM_FREE_PAGES) return false;
    const before = free;
    const deadline = this.scheduler.elapsed() + this.vacuumBudgetMs;
    do {
      try {
        db.run(`PRAGMA incremental_vacuum(${VACUUM_STEP_PAGES})`);
      } catch {
        return true; // busy: the next look goes on
      }
      free = db.query<{ freelist_count: number }, []>("PRAGMA freelist_count").get()?.freelist_count ?? 0;
    } while (free > 0 && this.scheduler.elapsed() < deadline);
    checkpoint(file, "TRUNCATE"); // the file shrinks when its last pages are checkpointed away
    this.logger.debug(
      `drain: gave back ${before - free} free pages of ${file.path}${free > 0 ? ` (${free} left for the next look)` : ""}`,
      { rows: before - free },
    );
    return free > 0;
  }
}

/** The WAL's size in bytes (0 without one). */
export function walSize(path: string): number {
  try {
    return statSync(`${path}-wal`).size;
  } catch {
    return 0;
  }
}

/** Checkpoints the file's WAL; returns the frames the WAL holds (-1: another checkpoint was running). */
function checkpoint(file: QueueDb, mode: "PASSIVE" | "TRUNCATE"): number {
  return file.db.query<{ log: number }, []>(`PRAGMA wal_checkpoint(${mode})`).get()?.log ?? -1;
}
