import { watch, type FSWatcher } from "node:fs";
import { basename, dirname, resolve } from "node:path";

/** What a CommitWatcher asks and tells its owner. */
export interface CommitHandlers {
  /** Another connection's commit to `path` (as given) is visible now — or may be: a change that could not be checked. */
  onCommit(path: string): void;
  /** `check` is due sooner than before (see `checkAt`): an owner that sleeps should wake and plan again. */
  onCheckDue(): void;
  /** Watching stopped working (the directory went away, the kernel dropped the watch). */
  onError(error: unknown): void;
  /** `PRAGMA data_version` of the owner's own connection to `path`, or null when it has none open. */
  version(path: string): number | null;
}

/** How a CommitWatcher checks. Times in ms. */
export interface CommitChecks {
  /** A change whose commit is not visible yet is checked again after this long, doubling up to 64 ms. */
  recheckMs: number;
  /** Every file's data_version is read this often, for a commit whose change was never reported. */
  sweepMs: number;
}

/** A change whose commit was not visible yet is checked again, doubling the wait, until the waits reach this (ms). */
const RECHECK_WINDOW_MS = 64;

/**
 * Learns of commits to a set of SQLite files without polling them: one `fs.watch` (inotify on
 * Linux, one descriptor for the whole process) per directory that holds one of them, reporting a
 * change of the file itself, of its `-wal` (every commit in WAL mode writes it) or of its
 * `-journal`; files need not exist yet, nor share a directory. Polling `PRAGMA data_version` of
 * every file every 1.25 ms on a connection of its own instead cost CPU in proportion to the files
 * (73 % of a core idle at 500 tables) and two descriptors each.
 *
 * A change is a commit once the owner's own connection sees it (its data_version moved): the WAL
 * is written before the WAL index says the commit is there, and the kernel may run the drain the
 * moment the writer wrote, before it finished (the first change of a quarter of the single pushes
 * measured). Such a change — or one of the owner's own commits, which data_version never shows —
 * is checked again `recheckMs` later, doubling, for up to RECHECK_WINDOW_MS; and every file's
 * data_version is read every `sweepMs` (a few µs each) in case a change went unreported. The
 * owner calls `check` at `checkAt`. Construction throws when a directory cannot be watched
 * (ENOENT, the inotify watch limit).
 */
export class CommitWatcher {
  readonly #watchers: FSWatcher[] = [];
  readonly #paths: string[];
  /** directory → name seen in an event → the path the caller gave */
  readonly #dirs = new Map<string, Map<string, string>>();
  /** The data_version each file had when its commit was last reported. */
  readonly #seen = new Map<string, number>();
  /** Files whose change was not visible yet: when to look again and how long the last wait was. */
  readonly #rechecks = new Map<string, { at: number; waitMs: number }>();
  #sweepAt: number;

  constructor(
    paths: readonly string[],
    private readonly handlers: CommitHandlers,
    private readonly checks: CommitChecks,
  ) {
    this.#paths = [...new Set(paths)];
    this.#sweepAt = Date.now() + checks.sweepMs;
    for (const path of this.#paths) {
      const full = resolve(path);
      const dir = dirname(full);
      let names = this.#dirs.get(dir);
      if (!names) this.#dirs.set(dir, (names = new Map()));
      const name = basename(full);
      for (const seen of [name, `${name}-wal`, `${name}-journal`]) names.set(seen, path);
      const version = this.#version(path);
      if (version !== null) this.#seen.set(path, version);
    }
    this.#arm();
  }

  /**
   * Stops watching until `resume`, while the owner looks at every file anyway (a backlog): each
   * write to a watched file costs the kernel an event and Bun's watcher a wake-up, and the drain's
   * own writes under load cost it ~10 % of its throughput (measured with a null target).
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
        const watcher = watch(dir, { persistent: false }, (_event, name) => {
          // No name (the kernel's queue overflowed, or a platform that does not say): any of them.
          if (name === null || name === undefined) for (const path of all) this.#changed(path);
          else {
            const path = names.get(String(name));
            if (path !== undefined) this.#changed(path);
          }
        });
        watcher.on("error", (error) => this.handlers.onError(error));
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

  /** Reads the data_version of the files whose time came (a change not visible yet, the sweep) and reports the commits. */
  check(now = Date.now()): void {
    for (const [path, r] of [...this.#rechecks]) {
      if (r.at > now) continue;
      this.#rechecks.delete(path);
      if (this.#moved(path, true)) this.handlers.onCommit(path);
      else if (r.waitMs * 2 <= RECHECK_WINDOW_MS) this.#rechecks.set(path, { at: now + r.waitMs * 2, waitMs: r.waitMs * 2 });
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

  #changed(path: string): void {
    if (this.#moved(path, true)) {
      this.#rechecks.delete(path);
      this.handlers.onCommit(path);
    } else if (!this.#rechecks.has(path)) {
      this.#rechecks.set(path, { at: Date.now() + this.checks.recheckMs, waitMs: this.checks.recheckMs });
      this.handlers.onCheckDue();
    }
  }

  /**
   * Whether the owner's connection sees a commit it had not seen. A file it has no connection to
   * (or a failing one) counts as moved after a change (`unknown`), as unmoved by the sweep: the
   * cycle that looks says what is wrong, and an unopened table is retried on its own schedule.
   */
  #moved(path: string, unknown: boolean): boolean {
    const version = this.#version(path);
    if (version === null) return unknown;
    if (this.#seen.get(path) === version) return false;
    this.#seen.set(path, version);
    return true;
  }

  #version(path: string): number | null {
    try {
      return this.handlers.version(path);
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

/** A sleep that `wake()` ends early (used by stop() and by tests). */
export class Waker {
  private pending: { resolve: () => void; timer: ReturnType<typeof setTimeout> } | null = null;

  /** Resolves after `ms` milliseconds or at the next `wake()`, whichever comes first. */
  sleep(ms: number): Promise<void> {
    this.wake();
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.pending = null;
        resolve();
      }, Math.max(0, ms));
      this.pending = { resolve, timer };
    });
  }

  /** Ends the current sleep, if any. */
  wake(): void {
    const p = this.pending;
    if (!p) return;
    this.pending = null;
    clearTimeout(p.timer);
    p.resolve();
  }
}
