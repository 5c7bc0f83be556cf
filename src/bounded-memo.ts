/**
 * A function's results remembered per key — an SQL text, mostly — at most `maxEntries` of them,
 * the oldest forgotten first: a program repeats a handful of statement texts thousands of times,
 * and a flood of unique ones must not grow the memory without end.
 */
export class BoundedMemo<V> {
  readonly #entries = new Map<string, V>();

  constructor(private readonly maxEntries: number) {}

  /** The remembered result for `key`, or `compute(key)`'s, remembered. */
  get(key: string, compute: (key: string) => V): V {
    const hit = this.#entries.get(key);
    if (hit !== undefined || this.#entries.has(key)) return hit as V;
    const value = compute(key);
    if (this.#entries.size >= this.maxEntries) this.#entries.delete(this.#entries.keys().next().value!);
    this.#entries.set(key, value);
    return value;
  }
}
