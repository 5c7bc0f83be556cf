import { Database, type Statement } from "bun:sqlite";

/**
 * Notices commits to a set of SQLite files by polling `PRAGMA data_version` on a private
 * connection per file: the value changes whenever another connection committed, and reading it
 * costs a few microseconds, so the drain can poll every millisecond instead of sleeping blindly.
 */
export class CommitWatcher {
  private readonly files: Array<{ db: Database; stmt: Statement; last: number }> = [];

  constructor(paths: readonly string[]) {
    for (const path of new Set(paths)) {
      // The Outbox created the file already; never create one here (a typo must not spawn files).
      const db = new Database(path, { readwrite: true, create: false });
      const stmt = db.prepare("PRAGMA data_version");
      this.files.push({ db, stmt, last: CommitWatcher.read(stmt) });
    }
  }

  private static read(stmt: Statement): number {
    const row = stmt.get() as { data_version: number } | null;
    return row?.data_version ?? 0;
  }

  /** True when any file saw a commit from another connection since the last call. */
  changed(): boolean {
    let changed = false;
    for (const f of this.files) {
      const v = CommitWatcher.read(f.stmt);
      if (v !== f.last) {
        f.last = v;
        changed = true;
      }
    }
    return changed;
  }

  /** Closes the private connections; idempotent. */
  close(): void {
    for (const f of this.files.splice(0)) {
      f.stmt.finalize();
      f.db.close();
    }
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
