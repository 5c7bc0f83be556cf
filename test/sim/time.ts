// Virtual time: the simulator's clock and its one queue of events. Nothing in a simulated run
// waits on the process's time: the drain's sleeps, timers and timeouts (through its Scheduler), the
// remote's answers, the workload's pushes and the faults are all events here; the run fires the
// earliest, and when several fall due together the seed picks their order.
import type { Scheduler } from "../../src/scheduler.ts";
import type { Random } from "./random.ts";

/** Who an event belongs to: a drain process's events die with it. */
export interface Owner {
  readonly alive: boolean;
}

interface Event {
  at: number;
  /** Drawn from the seed: the order of events that fall due at the same time. */
  rank: number;
  seq: number;
  owner: Owner | null;
  fire: () => void;
  cancelled: boolean;
}

/** Where virtual time starts (epoch ms): after any real clock this runs on, so every row a producer stamps with the real time is older than the drain's now. */
export const EPOCH_MS = Date.UTC(2100, 0, 1);

/** One turn of the process's event loop: every promise reaction queued so far has run after it. */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Thrown when virtual time stops moving while events keep coming: a loop that spins. */
export class SpinError extends Error {}

/** The clock and the events of one simulated world. */
export class SimTime {
  now = EPOCH_MS;
  /** Events fired so far. */
  fired = 0;
  #heap: Event[] = [];
  #seq = 0;
  /** Events fired since virtual time last moved. */
  #sameTime = 0;

  constructor(private readonly random: Random) {}

  /** Runs `fire` at `at` (not before now), unless cancelled or its owner died; returns the cancel. */
  at(at: number, fire: () => void, owner: Owner | null = null): () => void {
    const event: Event = {
      at: Math.max(at, this.now),
      rank: this.random.next(),
      seq: this.#seq++,
      owner,
      fire,
      cancelled: false,
    };
    this.#push(event);
    return () => {
      event.cancelled = true;
    };
  }

  /** Runs `fire` after `ms`. */
  after(ms: number, fire: () => void, owner: Owner | null = null): () => void {
    return this.at(this.now + Math.max(0, ms), fire, owner);
  }

  /** Resolves after `ms` of virtual time (never, if `owner` dies first). */
  sleep(ms: number, owner: Owner | null = null): Promise<void> {
    return new Promise((resolve) => this.after(ms, resolve, owner));
  }

  /**
   * Fires events in order until `done()` says so (checked after every event, once the promise
   * reactions it caused have run), no event is left, or virtual time passes `deadline`. Returns
   * why it stopped. `onEvent` runs after each event: the invariant checks.
   */
  async run(done: () => boolean, deadline: number, onEvent: () => void): Promise<"done" | "idle" | "deadline"> {
    for (;;) {
      await settle();
      onEvent();
      if (done()) return "done";
      const event = this.#pop();
      if (event === undefined) return "idle";
      if (event.cancelled || (event.owner !== null && !event.owner.alive)) continue;
      if (event.at > deadline) {
        this.#push(event);
        this.now = deadline;
        return "deadline";
      }
      if (event.at > this.now) {
        this.now = event.at;
        this.#sameTime = 0;
      } else if (++this.#sameTime > 20_000) {
        throw new SpinError(`virtual time stuck at +${this.now - EPOCH_MS} ms: 20000 events without it moving`);
      }
      this.fired += 1;
      event.fire();
    }
  }

  /** Whether an event of a live owner is still due. */
  get pending(): boolean {
    return this.#heap.some((e) => !e.cancelled && (e.owner === null || e.owner.alive));
  }

  #less(a: Event, b: Event): boolean {
    return a.at !== b.at ? a.at < b.at : a.rank !== b.rank ? a.rank < b.rank : a.seq < b.seq;
  }

  #push(event: Event): void {
    const heap = this.#heap;
    heap.push(event);
    let i = heap.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.#less(heap[i]!, heap[parent]!)) break;
      [heap[i], heap[parent]] = [heap[parent]!, heap[i]!];
      i = parent;
    }
  }

  #pop(): Event | undefined {
    const heap = this.#heap;
    const top = heap[0];
    const last = heap.pop();
    if (heap.length > 0 && last !== undefined) {
      heap[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < heap.length && this.#less(heap[l]!, heap[m]!)) m = l;
        if (r < heap.length && this.#less(heap[r]!, heap[m]!)) m = r;
        if (m === i) break;
        [heap[i], heap[m]] = [heap[m]!, heap[i]!];
        i = m;
      }
    }
    return top;
  }
}

/** The Scheduler one drain process runs on: virtual time, its events its own (they die with it). */
export class ProcessScheduler implements Scheduler {
  constructor(
    private readonly time: SimTime,
    private readonly owner: Owner,
    private readonly jitter: Random,
  ) {}

  now(): number {
    return this.time.now;
  }

  elapsed(): number {
    return this.time.now;
  }

  sleep(ms: number): Promise<void> {
    return this.time.sleep(ms, this.owner);
  }

  turn(): Promise<void> {
    return this.time.sleep(0, this.owner);
  }

  timer(ms: number, fire: () => void, options: { repeat?: boolean } = {}): () => void {
    let cancel = () => {};
    const arm = () => {
      cancel = this.time.after(
        ms,
        () => {
          if (options.repeat) arm();
          fire();
        },
        this.owner,
      );
    };
    arm();
    return () => cancel();
  }

  random(): number {
    return this.jitter.next();
  }
}
