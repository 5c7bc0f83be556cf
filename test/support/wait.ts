/**
 * Polls `cond` every 5 ms until it holds; after `timeoutMs` (default 15 s) throws "timed out
 * waiting for <what>". `what` may be a function, called only on timeout, so the message can
 * carry the state the test saw last. An error thrown by `cond` ends the wait at once.
 */
export async function waitFor(
  cond: () => boolean | Promise<boolean>,
  what: string | (() => string),
  timeoutMs = 15_000,
): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${typeof what === "function" ? what() : what}`);
    await Bun.sleep(5);
  }
}
