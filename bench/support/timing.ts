// The timing loop the latency benches share: calls timed one by one, after a warm-up.

/** Runs `op` `warmup` times untimed, then `ops` times timed one by one: each call's time (ns, sorted) and the whole timed run's. */
export function timeCalls(op: () => void, ops: number, warmup: number): { sortedNs: number[]; totalNs: number } {
  for (let i = 0; i < warmup; i++) op();
  const samples = new Array<number>(ops);
  const start = Bun.nanoseconds();
  for (let i = 0; i < ops; i++) {
    const t = Bun.nanoseconds();
    op();
    samples[i] = Bun.nanoseconds() - t;
  }
  const totalNs = Bun.nanoseconds() - start;
  return { sortedNs: samples.sort((a, b) => a - b), totalNs };
}

/** The `p` quantile (0…1) of sorted samples. */
export function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!;
}
