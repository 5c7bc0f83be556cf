import { readdirSync, readFileSync } from "node:fs";

/** Descriptors one open queue file takes in the drain: the database, its -wal and its -shm. */
export const QUEUE_FILE_DESCRIPTORS = 3;

/**
 * Descriptors the drain never gives to queue files: the targets' connections, the state file
 * `status` reads, the clients of /metrics, the log. Without them a drain whose tables took every
 * descriptor could not reach its remote (Bun reports EMFILE there as "connection refused") and
 * delivered nothing at all, not even for the tables it had opened.
 */
export const DESCRIPTOR_RESERVE = 64;

/**
 * What is left of this process's open-file limit (`ulimit -n`, systemd's `LimitNOFILE=`), read
 * once from /proc and counted down as queue files are opened. `read()` is null where the process
 * cannot tell (no /proc, e.g. macOS, or an unlimited limit); nothing is refused up front there.
 */
export class DescriptorRoom {
  #open: number;

  private constructor(
    readonly limit: number,
    open: number,
  ) {
    this.#open = open;
  }

  /** The soft limit and the descriptors open now, or null when unknown. */
  static read(): DescriptorRoom | null {
    try {
      const limits = readFileSync("/proc/self/limits", "utf8");
      const soft = /^Max open files\s+(\d+)/m.exec(limits)?.[1];
      if (soft === undefined) return null; // "unlimited"
      // readdir holds one descriptor of its own while it lists them.
      const open = readdirSync("/proc/self/fd").length - 1;
      return new DescriptorRoom(Number(soft), open);
    } catch {
      return null;
    }
  }

  /** Descriptors open now, as counted (the ones `take` granted included). */
  get open(): number {
    return this.#open;
  }

  /**
   * Grants `count` descriptors for one of `files` queue files served, or returns why not: the
   * file would eat into the reserve. The error names the limit, what is open and the fix.
   */
  take(count: number, files: number): Error | null {
    if (this.#open + count + DESCRIPTOR_RESERVE > this.limit) {
      const needed = files * QUEUE_FILE_DESCRIPTORS + DESCRIPTOR_RESERVE + 64;
      return new Error(
        `the drain is at its open-file limit (${this.limit}, \`ulimit -n\`; systemd: LimitNOFILE=): ${this.#open} descriptors are open, ` +
          `${DESCRIPTOR_RESERVE} are kept for the targets' connections, the state file and /metrics, and each queue file takes ${count}. ` +
          `Raise it (${QUEUE_FILE_DESCRIPTORS} per queue file plus ${needed - files * QUEUE_FILE_DESCRIPTORS}: at least ${needed} for this target's ${files} queue files) and restart the drain; see docs/operations.md, "Many tables"`,
      );
    }
    this.#open += count;
    return null;
  }
}
