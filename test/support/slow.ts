// The slow suites — SIGKILL loops, process fleets, outages waited out in real time, scraped
// drains, compiled binaries, the large fuzz — run only with SQLOUTBOX_SLOW_TESTS=1, which .ci/run
// sets; a developer's plain `bun test` lists them as skipped, saying how to run them.
import { describe } from "bun:test";

/** True when SQLOUTBOX_SLOW_TESTS=1: the slow suites run. */
export const SLOW = process.env.SQLOUTBOX_SLOW_TESTS === "1";

/**
 * A describe that runs only with SQLOUTBOX_SLOW_TESTS=1; skipped, its name ends in
 * "(skipped: set SQLOUTBOX_SLOW_TESTS=1 to <toRun>)". Hooks that set up something expensive
 * belong inside it (a skipped describe skips them too) or must check `SLOW` themselves.
 */
export function describeSlow(name: string, toRun: string, fn: () => void): void {
  describe.skipIf(!SLOW)(SLOW ? name : `${name} (skipped: set SQLOUTBOX_SLOW_TESTS=1 to ${toRun})`, fn);
}
