#!/usr/bin/env bun
import { runCli } from "./main.ts";

const code = await runCli(process.argv.slice(2));
process.exitCode = code;
// A stray handle (a driver socket, a timer) must not keep a finished command alive.
setTimeout(() => process.exit(code), 1500).unref();
