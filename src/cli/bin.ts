#!/usr/bin/env bun
import { runCli } from "./main.ts";

const code = await runCli(process.argv.slice(2));
// Exit as soon as the output is flushed: a stray handle (a driver socket, a timer) must not keep
// a finished command — or a drain that has stopped cleanly — alive.
const flushed = (stream: NodeJS.WriteStream) => new Promise<void>((resolve) => stream.write("", () => resolve()));
await Promise.all([flushed(process.stdout), flushed(process.stderr)]);
process.exit(code);
