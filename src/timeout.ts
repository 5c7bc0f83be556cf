import { realScheduler, type Scheduler } from "./scheduler.ts";

/**
 * Waits for `work` at most `ms` milliseconds (of `scheduler`'s time: the process's by default). When
 * time runs out first, `onTimeout` decides the outcome: it returns a value to resolve with, or throws
 * to reject (and may abandon the work: close its connection, hold its tables). Either way the timer
 * never outlives the race. (The race subscribes to `work`, so abandoned work that rejects later is no
 * unhandled rejection.)
 */
export async function withTimeout<T>(
  work: PromiseLike<T>,
  ms: number,
  onTimeout: () => T,
  scheduler: Scheduler = realScheduler,
): Promise<T> {
  let cancel = () => {};
  const running = Promise.resolve(work);
  const expired = new Promise<T>((resolve, reject) => {
    cancel = scheduler.timer(ms, () => {
      try {
        resolve(onTimeout());
      } catch (error) {
        reject(error);
      }
    });
  });
  try {
    return await Promise.race([running, expired]);
  } finally {
    cancel();
  }
}
