import type { Dialect } from "./vocabulary.ts";

/**
 * A function's results remembered per key — an SQL text, mostly — at most `maxEntries` of them,
 * the oldest forgotten first: a program repeats a handful of statement texts thousands of times,
 * and a flood of unique ones must not grow the memory without end.
 */
export class BoundedMemo<V> {
  readonly #entries = new Map<string, V>();
  // Consecutive rows of a backlog mostly share their text: comparing with the last key is cheaper
  // than hashing a text read afresh for every row.
  #lastKey: string | null = null;
  #lastValue: V | undefined;

  constructor(private readonly maxEntries: number) {}

  /** The remembered result for `key`, or `compute(key)`'s, remembered. */
  get(key: string, compute: (key: string) => V): V {
    if (key === this.#lastKey) return this.#lastValue as V;
    const value = this.#lookup(key, compute);
    this.#lastKey = key;
    this.#lastValue = value;
    return value;
  }

  #lookup(key: string, compute: (key: string) => V): V {
    const hit = this.#entries.get(key);
    if (hit !== undefined || this.#entries.has(key)) return hit as V;
    const value = compute(key);
    if (this.#entries.size >= this.maxEntries) this.#entries.delete(this.#entries.keys().next().value!);
    this.#entries.set(key, value);
    return value;
  }
}

/**
 * One memo per dialect, made on first use, for results that depend on the dialect too: the text is
 * the key as it is (a key built per statement would cost a concatenation and a hash each time).
 */
export function memoPerDialect<V>(maxEntries: number): (dialect: Dialect) => BoundedMemo<V> {
  const memos = new Map<Dialect, BoundedMemo<V>>();
  return (dialect) => {
    let memo = memos.get(dialect);
    if (!memo) memos.set(dialect, (memo = new BoundedMemo<V>(maxEntries)));
    return memo;
  };
}
