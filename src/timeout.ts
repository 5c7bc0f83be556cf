/**
 * Waits for `work` at most `ms` milliseconds. When time runs out first, `onTimeout` decides the
 * outcome: it returns a value to resolve with, or throws to reject (and may abandon the work: close
 * its connection, hold its tables). Either way the timer never outlives the race. (The race
 * subscribes to `work`, so abandoned work that rejects later is no unhandled rejection.)
 */
export async function withTimeout<T>(work: PromiseLike<T>, ms: number, onTimeout: () => T): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const running = Promise.resolve(work);
  const expired = new Promise<T>((resolve, reject) => {
    timer = setTimeout(() => {
      try {
        resolve(onTimeout());
      } catch (error) {
        reject(error);
      }
    }, ms);
  });
  try {
    return await Promise.race([running, expired]);
  } finally {
    clearTimeout(timer);
  }
}
