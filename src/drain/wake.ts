import { watch } from "node:fs";
import { basename, dirname, resolve } from "node:path";
import { realScheduler, type Scheduler } from "../scheduler.ts";

/** What a CommitWatcher asks and tells its owner. */
export interface CommitHandlers {
  /**
   * Another connection's commit to `path` (as given) is visible now — or may be: a change that could not be
   * checked.
   */
  onCommit(path: string): void;
  /** `check` is due sooner than before (see `checkAt`): an owner that sleeps should wake and plan again. */
  onCheckDue(): void;
  /** Watching stopped working (the directory went away, the kernel dropped the watch). */
  onError(error: unknown): void;
  /** What the owner's own connection to `path` has seen, or null when it has none open. */
  counters(path: string): CommitCounters | null;
}

/**
 * What one connection has seen of its file: `PRAGMA data_version` (moves with every other connection's
 * commit) and `total_changes()` (its own writes).
 */
export interface CommitCounters {
  version: number;
  writes: number;
}

/**
 * Watches one directory: `onChange` with the name of an entry that changed (null: some entry, the
 * platform did not say which), `onError` when watching stopped working. Returns how to stop.
 */
export type DirWatch = (
  dir: string,
  onChange: (name: string | null) => void,
  onError: (error: unknown) => void,
) => { close(): void };

/** A directory watched with `fs.watch` (inotify on Linux), never keeping the process alive. */
export const fsDirWatch: DirWatch = (dir, onChange, onError) => {
  const watcher = watch(dir, { persistent: false }, (_event, name) =>
    onChange(name === null || name === undefined ? null : String(name)),
  );
  watcher.on("error", onError);
  return watcher;
};

/** How a CommitWatcher checks. Times in ms. */
export interface CommitChecks {
  /** A change whose commit is not visible yet is checked again after this long, doubling up to 64 ms. */
  recheckMs: number;
  /** Every file's data_version is read this often, for a commit whose change was never reported. */
  sweepMs: number;
  /** The drain's clock (epoch ms): `checkAt` and `check` are in it. */
  now: () => number;
  /** A monotonic reading (ms), for how far apart two changes were. Default: the process's. */
  elapsed?: () => number;
  /** How a directory is watched. Default: fs.watch. */
  watch?: DirWatch;
}

/** A change whose commit was not visible yet is checked again, doubling the wait, until the waits reach this (ms). */
const RECHECK_WINDOW_MS = 64;
/**
 * Before that, the first WAL write of a burst (none in QUIET_MS) that nobody we know of made is
 * looked at again after these short sleeps (ms): the writer is often mid-commit because the
 * drain, woken by its write, took its CPU. On a loaded machine a quarter to a half of the single
 * pushes met this and waited for the first timer (≥ 1 ms) instead; these real sleeps give the
 * writer the CPU back. Only the first of a burst: one commit writes the WAL several times, and a
 * drain that slept on every write of a steady stream starved its own connections.
 */
const YIELD_MS = [0.05, 0.1, 0.2];
const QUIET_MS = 5;
const sleepCell = new Int32Array(new SharedArrayBuffer(4));

/**
 * Learns of commits to a set of SQLite files without polling them: one `fs.watch` (inotify on
 * Linux, one descriptor for the whole process) per directory that holds one of them, reporting a
 * change of the file itself, of its `-wal` (every commit in WAL mode writes it) or of its
 * `-journal`; files need not exist yet, nor share a directory. Polling `PRAGMA data_version` of
 * every file on a connection of its own instead cost CPU in proportion to the files (most of a
 * core, idle, at 1 000 tables: docs/benchmarks.md, bench:tables) and two descriptors each.
 *
 * A change is a commit once the owner's own connection sees it (its data_version moved): the WAL
 * is written before the WAL index says the commit is there, and the kernel may run the drain the
 * moment the writer wrote, before it finished (the first change of a quarter of the single pushes
 * measured). Such a change — or one of the owner's own commits, which data_version never shows —
 * is checked again `recheckMs` later, doubling, for up to RECHECK_WINDOW_MS; so is a WAL change
 * that did move data_version, which a writer starting the WAL over (the first commit after a
 * checkpoint emptied it) does before its commit is visible — such rows waited for the sweep; and
 * every file's data_version is read every `sweepMs` (a few µs each) in case a change went
 * unreported. The owner calls `check` at `checkAt`. Construction throws when a directory cannot
 * be watched (ENOENT, the inotify watch limit).
 */
export class CommitWatcher {
  readonly #watchers: Array<{ close(): void }> = [];
  readonly #paths: string[];
  /** directory → name seen in an event → the path the caller gave */
  readonly #dirs = new Map<string, Map<string, string>>();
  /** What the owner's connection had seen of each file when last looked at. */
  readonly #seen = new Map<string, CommitCounters>();
  /** When each file last changed (`elapsed()` ms). */
  readonly #changedAt = new Map<string, number>();
  /** Files whose change was not visible yet: when to look again and how long the last wait was. */
  readonly #rechecks = new Map<string, { at: number; waitMs: number }>();
  #sweepAt: number;
  readonly #elapsed: () => number;
  readonly #watch: DirWatch;

  constructor(
    paths: readonly string[],
    private readonly handlers: CommitHandlers,
    private readonly checks: CommitChecks,
  ) {
    this.#paths = [...new Set(paths)];
    this.#sweepAt = checks.now() + checks.sweepMs;
    this.#elapsed = checks.elapsed ?? realScheduler.elapsed;
    this.#watch = checks.watch ?? fsDirWatch;
    for (const path of this.#paths) {
      const full = resolve(path);
      const dir = dirname(full);
      let names = this.#dirs.get(dir);
      if (!names) this.#dirs.set(dir, (names = new Map()));
      const name = basename(full);
      for (const seen of [name, `${name}-wal`, `${name}-journal`]) names.set(seen, path);
      const counters = this.#counters(path);
      if (counters !== null) this.#seen.set(path, counters);
    }
    this.#arm();
  }

  /**
   * Stops watching until `resume`, while the owner looks at every file anyway (a backlog): each
   * write to a watched file costs the kernel an event and Bun's watcher a wake-up, and the drain's
   * own writes under load would cost it a tenth of its throughput.
   */
  pause(): void {
    for (const watcher of this.#watchers.splice(0)) watcher.close();
  }

  /** Watches again after `pause`, and reports what was committed meanwhile (every file's data_version). */
  resume(): void {
    if (this.#watchers.length > 0) return;
    try {
      this.#arm();
    } catch (error) {
      this.handlers.onError(error);
      return;
    }
    this.#sweepAt = 0;
    this.check();
  }

  /** Whether the files are watched (not paused, not closed). */
  get armed(): boolean {
    return this.#watchers.length > 0;
  }

  #arm(): void {
    try {
      for (const [dir, names] of this.#dirs) {
        const all = [...new Set(names.values())];
        const watcher = this.#watch(
          dir,
          (name) => {
            // No name (the kernel's queue overflowed, or a platform that does not say): any of them.
            if (name === null) for (const path of all) this.#changed(path, false);
            else {
              const path = names.get(name);
              if (path !== undefined) this.#changed(path, name.endsWith("-wal"));
            }
          },
          (error) => this.handlers.onError(error),
        );
        this.#watchers.push(watcher);
      }
    } catch (error) {
      this.pause();
      throw error;
    }
  }

  /** When `check` should run next (epoch ms). */
  get checkAt(): number {
    let at = this.#sweepAt;
    for (const r of this.#rechecks.values()) at = Math.min(at, r.at);
    return at;
  }

  /**
   * Reads the data_version of the files whose time came (a change not visible yet, the sweep) and reports the
   * commits.
   */
  check(now = this.checks.now()): void {
    for (const [path, r] of [...this.#rechecks]) {
      if (r.at > now) continue;
      this.#rechecks.delete(path);
      if (this.#moved(path, true)) this.handlers.onCommit(path);
      else if (r.waitMs * 2 <= RECHECK_WINDOW_MS)
        this.#rechecks.set(path, { at: now + r.waitMs * 2, waitMs: r.waitMs * 2 });
    }
    if (now < this.#sweepAt) return;
    this.#sweepAt = now + this.checks.sweepMs;
    for (const path of this.#paths) if (this.#moved(path, false)) this.handlers.onCommit(path);
  }

  /** Stops watching; idempotent. */
  close(): void {
    this.pause();
    this.#rechecks.clear();
  }

  /** A change of `path` was reported (`wal`: of its -wal, where commits are written). */
  #changed(path: string, wal: boolean): void {
    const before = this.#seen.get(path);
    const now = this.#elapsed();
    const burst = now - (this.#changedAt.get(path) ?? Number.NEGATIVE_INFINITY) > QUIET_MS;
    this.#changedAt.set(path, now);
    let moved = this.#moved(path, true);
    // Not visible, and not our own write either: someone else is committing right now.
    if (!moved && wal && burst && before !== undefined && this.#seen.get(path)!.writes === before.writes) {
      for (const ms of YIELD_MS) {
        Atomics.wait(sleepCell, 0, 0, ms); // a real sleep: the writer may need this CPU to finish
        if ((moved = this.#moved(path, true))) break;
      }
    }
    if (moved) this.handlers.onCommit(path);
    if (moved && !wal) this.#rechecks.delete(path);
    else if (moved || !this.#rechecks.has(path)) {
      // Moved on a WAL write, it may be the WAL starting over (a checkpoint had emptied it): the
      // writer's restart moves data_version before its commit is visible. Looked at again too.
      this.#rechecks.set(path, { at: this.checks.now() + this.checks.recheckMs, waitMs: this.checks.recheckMs });
      this.handlers.onCheckDue();
    }
  }

  /**
   * Whether the owner's connection sees a commit it had not seen (and notes what it has seen). A
   * file it has no connection to (or a failing one) counts as moved after a change (`unknown`),
   * as unmoved by the sweep: the cycle that looks says what is wrong, and an unopened table is
   * retried on its own schedule.
   */
  #moved(path: string, unknown: boolean): boolean {
    const counters = this.#counters(path);
    if (counters === null) return unknown;
    const moved = this.#seen.get(path)?.version !== counters.version;
    this.#seen.set(path, counters);
    return moved;
  }

  #counters(path: string): CommitCounters | null {
    try {
      return this.handlers.counters(path);
    } catch {
      return null;
    }
  }
}

/**
 * Which of a target's tables the next cycle looks at, so that an idle drain costs nothing per
 * table: the tables another connection committed to (and those the cycle before sent, whose
 * answer may have changed what they do next), or every table — at the first cycle, after a cycle
 * that left rows ready, once something fell due (a table's max wait, a backoff, a hold's retry:
 * the earliest time any cycle reported), when told (`all`), and at least every `fullEveryMs` for
 * anything else that changes without a commit. Times are epoch ms of the real clock.
 */
export class Agenda<T> {
  readonly #changed = new Set<T>();
  #everything = true;
  #dueAt = Number.POSITIVE_INFINITY;
  #fullAt = 0;

  constructor(private readonly fullEveryMs: number) {}

  /** The next cycle looks at `tables`. */
  changed(tables: Iterable<T>): void {
    for (const table of tables) this.#changed.add(table);
  }

  /** The next cycle looks at every table. */
  all(): void {
    this.#everything = true;
  }

  /** Whether a cycle waits to run. */
  get pending(): boolean {
    return this.#everything || this.#changed.size > 0;
  }

  /** When the next cycle is due without any further change (epoch ms). */
  nextAt(): number {
    return this.#everything ? 0 : Math.min(this.#dueAt, this.#fullAt);
  }

  /** The tables the cycle at `now` looks at; null: every table. What it returns is done with. */
  take(now: number): Set<T> | null {
    if (this.#everything || now >= this.#dueAt || now >= this.#fullAt) {
      this.#everything = false;
      this.#dueAt = Number.POSITIVE_INFINITY;
      this.#fullAt = now + this.fullEveryMs;
      this.#changed.clear();
      return null;
    }
    const tables = new Set(this.#changed);
    this.#changed.clear();
    return tables;
  }

  /** What a cycle reported: when something falls due next (epoch ms), and whether rows are ready now. */
  after(wakeAt: number | null, more: boolean): void {
    if (more) this.#everything = true;
    if (wakeAt !== null) this.#dueAt = Math.min(this.#dueAt, wakeAt);
  }
}

/** A sleep that `wake()` ends early (used by stop() and by tests), in `scheduler`'s time. */
export class Waker {
  private pending: { resolve: () => void; cancel: () => void } | null = null;

  constructor(private readonly scheduler: Scheduler = realScheduler) {}

  /** Resolves after `ms` milliseconds or at the next `wake()`, whichever comes first. */
  sleep(ms: number): Promise<void> {
    this.wake();
    return new Promise((resolve) => {
      const cancel = this.scheduler.timer(Math.max(0, ms), () => {
        this.pending = null;
        resolve();
      });
      this.pending = { resolve, cancel };
    });
  }

  /** Ends the current sleep, if any. */
  wake(): void {
    const p = this.pending;
    if (!p) return;
    this.pending = null;
    p.cancel();
    p.resolve();
  }
}
