import fs from "node:fs";
import path from "node:path";
import { dlopen, FFIType } from "bun:ffi";
import { LockedError, StorageError } from "../errors.ts";

/** An exclusive drain lock on one db_dir; `release()` is idempotent. */
export interface DrainLock {
  readonly lockFile: string;
  release(): void;
}

/** The lock file every drain of a db_dir contends for. */
export const LOCK_FILE_NAME = ".sqloutbox.lock";

const LOCK_EX = 2;
const LOCK_NB = 4;
const LOCK_UN = 8;

type Flock = (fd: number, operation: number) => number;
let flockFn: Flock | null = null;

function libcPath(): string {
  if (process.platform === "darwin") return "/usr/lib/libSystem.B.dylib";
  if (process.platform === "linux") return "libc.so.6";
  throw new StorageError(`drain lock: flock is not available on ${process.platform}`, "");
}

function flock(): Flock {
  if (!flockFn) {
    const lib = dlopen(libcPath(), { flock: { args: [FFIType.i32, FFIType.i32], returns: FFIType.i32 } });
    flockFn = lib.symbols.flock as Flock;
  }
  return flockFn;
}

/**
 * Takes an exclusive, non-blocking `flock` on `<dbDir>/.sqloutbox.lock` (creating dbDir and the
 * file if missing, the file with `fileMode`, default 0600) and holds it until `release()` or
 * process exit. A flock belongs to the open file, so a second drain — in another process or in
 * this one — fails fast with `LockedError`.
 */
export function acquireLock(dbDir: string, fileMode = 0o600): DrainLock {
  const lockFile = path.join(path.resolve(dbDir), LOCK_FILE_NAME);
  let fd: number;
  try {
    fs.mkdirSync(path.dirname(lockFile), { recursive: true });
    const created = !fs.existsSync(lockFile);
    fd = fs.openSync(lockFile, "a", fileMode);
    if (created) fs.fchmodSync(fd, fileMode); // whatever the umask
  } catch (cause) {
    throw new StorageError(`cannot open drain lock file ${lockFile}: ${(cause as Error).message}`, lockFile, undefined, { cause });
  }
  if (flock()(fd, LOCK_EX | LOCK_NB) !== 0) {
    fs.closeSync(fd);
    throw new LockedError(lockFile);
  }
  let held = true;
  return {
    lockFile,
    release() {
      if (!held) return;
      held = false;
      flock()(fd, LOCK_UN);
      fs.closeSync(fd);
    },
  };
}
