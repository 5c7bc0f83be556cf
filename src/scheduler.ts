/**
 * Where the drain's time comes from: its clock, its sleeps and timers, the turns of the event loop it
 * lets others in with, and the jitter of its retries. Every wait of the drain goes through one, so a
 * test that owns the scheduler owns the drain's time: the simulator (test/sim/) gives a virtual one
 * that jumps to the next timer when nothing else can run, and picks the order of timers that fall
 * due together from its seed. The default, `realScheduler`, is the process's own.
 */
export interface Scheduler {
  /** The wall clock (epoch ms): what the drain stores, schedules and compares. */
  now(): number;
  /** A monotonic reading (ms, any origin): for durations only — a round trip, how long a step took. */
  elapsed(): number;
  /** Resolves after `ms` milliseconds; 0: once the timers that are due have run. */
  sleep(ms: number): Promise<void>;
  /** Resolves after one turn of the event loop (after I/O callbacks): producers and other targets get in. */
  turn(): Promise<void>;
  /**
   * Calls `fire` after `ms` milliseconds (with `repeat`, every `ms`) until the returned function is
   * called. `unref`: the timer alone does not keep the process alive.
   */
  timer(ms: number, fire: () => void, options?: { repeat?: boolean; unref?: boolean }): () => void;
  /** A number in [0, 1): the jitter that keeps a fleet of drains from retrying in lock step. */
  random(): number;
}

/** The process's own time: Date.now, performance.now, Bun's timers, Math.random. */
export const realScheduler: Scheduler = {
  now: () => Date.now(),
  elapsed: () => performance.now(),
  sleep: (ms) => Bun.sleep(Math.max(0, ms)),
  turn: () => new Promise<void>((resolve) => setImmediate(resolve)),
  timer(ms, fire, options = {}) {
    const delay = Math.max(0, ms);
    if (options.repeat) {
      const interval = setInterval(fire, delay);
      if (options.unref) interval.unref();
      return () => clearInterval(interval);
    }
    const timeout = setTimeout(fire, delay);
    if (options.unref) timeout.unref();
    return () => clearTimeout(timeout);
  },
  random: () => Math.random(),
};
