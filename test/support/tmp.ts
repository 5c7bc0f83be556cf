import fs from "node:fs";
import os from "node:os";
import path from "node:path";

/** A fresh directory under the OS temp dir (`sqloutbox-XXXXXX`); `cleanup()` removes it recursively. */
export interface TempDir {
  path: string;
  /** An absolute path inside the directory (not created). */
  file(name: string): string;
  cleanup(): void;
}

/**
 * Creates a fresh temp directory under `parent` (default: the OS temp dir, a tmpfs during
 * `bun test`, see preload.ts); call `cleanup()` (e.g. in afterEach/afterAll) to remove it.
 */
export function makeTempDir(prefix = "sqloutbox-", parent = os.tmpdir()): TempDir {
  const dir = fs.mkdtempSync(path.join(parent, prefix));
  return {
    path: dir,
    file: (name) => path.join(dir, name),
    cleanup: () => fs.rmSync(dir, { recursive: true, force: true }),
  };
}
