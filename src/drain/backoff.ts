/**
 * Delay before a head that has failed `attempts` times is tried again: `2^attempts × unit`,
 * capped at `capMinutes`. Milliseconds. `unitSeconds` is 60 in production, tiny in tests.
 */
export function rowBackoffMs(attempts: number, unitSeconds: number, capMinutes: number): number {
  return cappedExponentialMs(Math.max(0, attempts), unitSeconds, capMinutes);
}

/**
 * Delay before a target that has failed `outages` times in a row (≥ 1) is tried again:
 * `2^(outages-1) × unit`, capped at `capMinutes`. Milliseconds. The first retry comes after one unit.
 */
export function targetBackoffMs(outages: number, unitSeconds: number, capMinutes: number): number {
  return cappedExponentialMs(Math.max(0, outages - 1), unitSeconds, capMinutes);
}

function cappedExponentialMs(exponent: number, unitSeconds: number, capMinutes: number): number {
  const capMs = capMinutes * 60_000;
  // 2^exponent overflows to Infinity long before it matters; min() keeps the cap exact.
  const ms = 2 ** Math.min(exponent, 1000) * unitSeconds * 1000;
  return Math.max(0, Math.min(ms, capMs));
}
