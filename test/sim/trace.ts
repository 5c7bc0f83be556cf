// What happened in a run, line by line: the last lines are printed with a failure, and a hash of
// every line says whether two runs of one seed did exactly the same thing.
import { EPOCH_MS } from "./time.ts";

/** How many of the last lines a failure prints. */
const KEPT = 80;

export class Trace {
  #hash = 0xcbf29ce484222325n;
  readonly #last: string[] = [];
  #lines = 0;
  /** Every line, when asked for (`--trace`): printed as it happens. */
  readonly #echo: boolean;

  constructor(
    private readonly clock: { readonly now: number },
    /** Takes out of a drain's line what differs between two runs of a seed: temp paths, origin ids. */
    private readonly mask: (line: string) => string,
    echo = false,
  ) {
    this.#echo = echo;
  }

  /** Records one line at the current virtual time; `foreign`: written by the drain (its paths and origin ids are masked). */
  add(line: string, foreign = false): void {
    const text = `+${this.clock.now - EPOCH_MS} ${foreign ? this.mask(line) : line}`;
    this.#hash = BigInt.asUintN(64, BigInt(Bun.hash.wyhash(text, this.#hash)));
    this.#lines += 1;
    if (this.#last.length === KEPT) this.#last.shift();
    this.#last.push(text);
    if (this.#echo) console.log(text);
  }

  /** The hash of every line so far (16 hex digits). */
  get hash(): string {
    return this.#hash.toString(16).padStart(16, "0");
  }

  get lines(): number {
    return this.#lines;
  }

  /** The last lines, oldest first. */
  tail(count = KEPT): string[] {
    return this.#last.slice(-count);
  }
}
