import fs from "node:fs";
import path from "node:path";
import { LockedError, StorageError } from "../errors.ts";
import { hasLibc, loadLibc } from "../libc.ts";
import { DEFAULT_FILE_MODE } from "../vocabulary.ts";

/** An exclusive drain lock on one db_dir or db_file; `release()` is idempotent. */
export interface DrainLock {
  readonly lockFile: string;
  release(): void;
}

/**
 * Who holds a lock as its lock file says (`PID\nSTART\n`; `since` is null in a file an older
 * version wrote); null when it names no PID (the holder has not written it yet).
 */
function readOwner(lockFile: string): LockedError["holder"] {
  let text: string;
  try {
    text = fs.readFileSync(lockFile, "utf8");
  } catch {
    return null;
  }
  const [pidLine, sinceLine] = text.split("\n");
  const pid = Number.parseInt(pidLine?.trim() ?? "", 10);
  if (!Number.isSafeInteger(pid) || pid <= 0) return null;
  const since = sinceLine?.trim() ?? "";
  return { pid, since: Number.isNaN(Date.parse(since)) ? null : since };
}

/**
 * The PID of the drain holding the lock file `lockFile` (see drainHome), or null when no drain
 * holds it (the lock can be taken, so nothing runs there: a PID left in the file is stale and must
 * not be signalled).
 */
export function lockHolder(lockFile: string): number | null {
  let fd: number;
  try {
    fd = fs.openSync(lockFile, "r");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw new StorageError(
      `cannot read drain lock file ${lockFile}: ${(error as Error).message}`,
      lockFile,
      undefined,
      { cause: error },
    );
  }
  try {
    if (flock(fd, LOCK_EX | LOCK_NB) === 0) {
      flock(fd, LOCK_UN);
      return null;
    }
    return readOwner(lockFile)?.pid ?? null;
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * How long a refused lock is retried before a drain believes another one holds it (a probe holds it for
 * microseconds).
 */
const PROBE_GRACE_MS = 100;

const LOCK_EX = 2;
const LOCK_NB = 4;
const LOCK_UN = 8;

/** flock(2), through libc. */
function flock(fd: number, operation: number): number {
  if (!hasLibc) throw new StorageError(`drain lock: flock is not available on ${process.platform}`, "");
  return loadLibc().flock(fd, operation);
}

/**
 * Takes an exclusive, non-blocking `flock` on the lock file (see drainHome; creating its directory
 * and the file if missing, the file with `fileMode`, default 0600) and holds it until `release()`
 * or process exit. A flock belongs to the open file, so a second drain — in another process or in
 * this one — fails with `LockedError` (after 100 ms: a `status` probe may hold it for an instant).
 */
export function acquireLock(lockFile: string, fileMode = DEFAULT_FILE_MODE): DrainLock {
  let fd: number;
  try {
    fs.mkdirSync(path.dirname(lockFile), { recursive: true });
    const created = !fs.existsSync(lockFile);
    fd = fs.openSync(lockFile, "a", fileMode);
    if (created) fs.fchmodSync(fd, fileMode); // whatever the umask
  } catch (cause) {
    throw new StorageError(
      `cannot open drain lock file ${lockFile}: ${(cause as Error).message}`,
      lockFile,
      undefined,
      { cause },
    );
  }
  // `status` and `kick` probe the lock by taking it for an instant (lockHolder): a drain starting
  // at that instant must not give up, so a refusal is believed only once it lasts.
  const giveUpAt = Date.now() + PROBE_GRACE_MS;
  while (flock(fd, LOCK_EX | LOCK_NB) !== 0) {
    if (Date.now() >= giveUpAt) {
      fs.closeSync(fd);
      throw new LockedError(lockFile, readOwner(lockFile));
    }
    Bun.sleepSync(5);
  }
  // The holder's PID, for `sqloutbox kick` (which checks the lock is held before signalling it),
  // and since when, for the drain that is turned away.
  fs.ftruncateSync(fd, 0);
  fs.writeSync(fd, `${process.pid}\n${new Date().toISOString()}\n`);
  let held = true;
  return {
    lockFile,
    release() {
      if (!held) return;
      held = false;
      flock(fd, LOCK_UN);
      fs.closeSync(fd);
    },
  };
}
