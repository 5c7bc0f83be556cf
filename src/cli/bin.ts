#!/usr/bin/env -S bun --no-env-file
// --no-env-file: `bunx sqloutbox` and the package's bin run through this line, and Bun would
// otherwise load the working directory's .env into the process environment first, where it
// would outrank the .env beside the config (docs/configuration.md#secrets). The compiled binary
// loads none either (build.ts).
import { withTimeout } from "../timeout.ts";
import { runCli } from "./main.ts";

// A reader that stops reading (`sqloutbox status --watch --json | head -1`) ends the command;
// that is the reader's choice, not a failure.
for (const stream of [process.stdout, process.stderr]) {
  stream.on("error", (err: NodeJS.ErrnoException) => process.exit(err.code === "EPIPE" ? 0 : 1));
}

const code = await runCli(process.argv.slice(2));
// Exit as soon as the output is flushed: a stray handle (a driver socket, a timer) must not keep
// a finished command — or a drain that has stopped cleanly — alive. Only `end()` waits for what
// a slow pipe has not taken yet (an empty write's callback fires with up to 64 KiB still queued,
// and exiting then cut long output short); the timeout covers a reader that never reads.
const ended = (stream: NodeJS.WriteStream) => new Promise<void>((resolve) => stream.end(() => resolve()));
await withTimeout(
  Promise.all([ended(process.stdout), ended(process.stderr)]).then(() => {}),
  30_000,
  () => {},
);
process.exit(code);
