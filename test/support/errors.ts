/**
 * What `fn` throws, for a test to assert its class and fields; fails the test when `fn` returns
 * instead. Synchronous calls only: for a promise, `await p.catch((e) => e)`.
 */
export function errorOf<E = Error & Record<string, unknown>>(fn: () => unknown): E {
  try {
    fn();
  } catch (error) {
    return error as E;
  }
  throw new Error("expected a throw, but the call returned");
}
