// Which `.env` a `${VAR}` comes from, however sqloutbox is started: the one beside the config,
// never the working directory's — through `bunx sqloutbox` (the package's bin, whose shebang runs
// Bun with --no-env-file) as in the compiled binary (test/binary-smoke.test.ts). In a `bun`
// process of one's own (the library), Bun itself loads the working directory's `.env` into the
// process environment first, where it outranks the config's, unless started with --no-env-file:
// what docs/configuration.md#secrets says, pinned here.
import { beforeEach, expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { BIN, REPO, run } from "./support/cli.ts";
import {
  FROM_CONFIG_ENV,
  FROM_WORKING_DIRECTORY,
  reportedQueueDir,
  writeDotenvProject,
} from "./support/dotenv-project.ts";

const cleanups = cleanupsAfterEach();
let project: string;

beforeEach(() => {
  // A project whose node_modules holds this package, as `bun add` leaves it: `bunx sqloutbox`
  // finds node_modules/.bin/sqloutbox and runs it through its shebang.
  project = tempDirCleanedBy(cleanups, "sqloutbox-dotenv-").path;
  fs.mkdirSync(path.join(project, "node_modules", ".bin"), { recursive: true });
  fs.symlinkSync(REPO, path.join(project, "node_modules", "sqloutbox"));
  fs.symlinkSync("../sqloutbox/src/cli/bin.ts", path.join(project, "node_modules", ".bin", "sqloutbox"));
  fs.writeFileSync(path.join(project, "package.json"), JSON.stringify({ name: "consumer", private: true }));
  // The config in a folder of its own, with its .env; the working directory has another.
  writeDotenvProject(project);
});

/** The db_dir `status` read, as the config's `${QUEUE_DIR}` resolved. */
async function queueDir(cmd: string[]): Promise<string> {
  const r = await run(["status", "--config", "ops/outbox.toml", "--json"], { cmd, cwd: project });
  return reportedQueueDir(r.stdout);
}

test("bunx sqloutbox reads the .env beside the config, not the working directory's", async () => {
  expect(await queueDir(["bunx", "sqloutbox"])).toBe(FROM_CONFIG_ENV);
  // The bin itself, as `bun run sqloutbox` and a shell reach it, the same.
  expect(await queueDir([path.join(project, "node_modules", ".bin", "sqloutbox")])).toBe(FROM_CONFIG_ENV);
});

test("the process environment outranks both .env files", async () => {
  const r = await run(["sqloutbox", "status", "--config", "ops/outbox.toml", "--json"], {
    cmd: ["bunx"],
    cwd: project,
    env: { QUEUE_DIR: "queue-of-the-environment" },
  });
  expect(reportedQueueDir(r.stdout)).toBe("queue-of-the-environment");
});

test("in a bun process of one's own, Bun's load of the working directory's .env comes first; --no-env-file keeps it out", async () => {
  expect(await queueDir(["bun", BIN])).toBe(FROM_WORKING_DIRECTORY);
  expect(await queueDir(["bun", "--no-env-file", BIN])).toBe(FROM_CONFIG_ENV);
});
