import { afterEach } from "bun:test";
import { closeSharedOutboxes } from "../../src/outbox/middleware.ts";
import { makeTempDir, type TempDir } from "./tmp.ts";

/**
 * The clean-ups of the running test: push to it, and after the test they run, last first, followed
 * by closing the producers' shared Outbox handles (they would point at the removed temp dirs).
 */
export function cleanupsAfterEach(): Array<() => unknown> {
  const cleanups: Array<() => unknown> = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
    closeSharedOutboxes();
  });
  return cleanups;
}

/** A fresh temp dir (`prefix` as in makeTempDir), removed with the test's other clean-ups. */
export function tempDirCleanedBy(cleanups: Array<() => unknown>, prefix?: string): TempDir {
  const dir = makeTempDir(prefix);
  cleanups.push(() => dir.cleanup());
  return dir;
}
