// Loaded before every test file (bunfig.toml [test] preload); its hooks wrap the whole run.
import { afterAll } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import { createDatabasesAhead, SERVER_ENGINES, serverProblem, settleServerDbs } from "./server-db.ts";

createDatabasesAhead();

// PostgreSQL and MariaDB are probed once, here: where one is down the run says so in one line that
// names it and how to start it, and each test that needs it fails at once with that line
// (createServerDb) instead of with a driver error in every file. CI requires both: nothing skips.
for (const problem of await Promise.all(SERVER_ENGINES.map(serverProblem))) {
  if (problem !== null) console.error(`\n*** ${problem}\n`);
}

// The tests create, fsync and delete thousands of SQLite files; on a disk-backed /tmp that is
// about a sixth of the run. Their temp dirs (os.tmpdir(), children included) go into one
// directory per run on a tmpfs — SQLOUTBOX_TEST_TMPDIR, else /dev/shm where it exists — removed
// after the last test, with whatever a failed test left behind.
const parent = process.env.SQLOUTBOX_TEST_TMPDIR ?? (isWritableDir("/dev/shm") ? "/dev/shm" : undefined);
let runDir: string | undefined;
if (parent) {
  runDir = fs.mkdtempSync(path.join(parent, "sqloutbox-test-"));
  fs.chmodSync(runDir, 0o755); // other users walk through it, as through /tmp (the sandbox test's service user)
  process.env.TMPDIR = runDir;
}

afterAll(async () => {
  await settleServerDbs();
  if (runDir) fs.rmSync(runDir, { recursive: true, force: true });
});

function isWritableDir(dir: string): boolean {
  try {
    fs.accessSync(dir, fs.constants.W_OK);
    return fs.statSync(dir).isDirectory();
  } catch {
    return false;
  }
}
