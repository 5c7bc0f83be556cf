// Smoke mode, BENCH_SMOKE=1: every bench runs each of its lines — every engine, mode and case —
// at a tiny size (a few hundred rows, a second or so), so test/bench-smoke.test.ts can run them
// all and see that they still work; the figures then mean nothing. A variable rather than a flag:
// the benches' child processes (drains, producers, the pinned run) inherit it.
import type { Logger } from "../../src/logger.ts";

/** True when BENCH_SMOKE=1: tiny sizes, same code paths. */
export const SMOKE = process.env.BENCH_SMOKE === "1";

/** `full` in a real run, `smoke` in smoke mode: where a bench picks each of its sizes. */
export function sized<T>(full: T, smoke: T): T {
  return SMOKE ? smoke : full;
}

let complaints = 0;

/**
 * The logger a bench gives its in-process drains: warnings and errors go to stderr (a drain that
 * keeps failing would otherwise retry in silence and the figure would be of a broken run); in
 * smoke mode each one also makes the process exit 1, since a drain that complains is a bench that
 * no longer runs as written.
 */
export const benchLogger: Logger = {
  debug() {},
  info() {},
  warn: (message, ...rest) => complain("warn", message, rest),
  error: (message, ...rest) => complain("error", message, rest),
};

function complain(level: string, message: string, rest: unknown[]): void {
  console.error(`[${level}] ${message}`, ...rest);
  if (SMOKE && complaints++ === 0)
    process.on("exit", (code) => {
      if (code === 0) {
        console.error(`bench: ${complaints} drain warning(s) or error(s) in smoke mode`);
        process.exitCode = 1;
      }
    });
}
