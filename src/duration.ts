// Durations as a person reads them in a log line — `350ms`, `1.5s`, `42s`, `2m0s`, `1h5m`, `2d3h` —
// rather than the raw milliseconds the code counts in ("retry in 120000 ms"). At the bottom of
// the house, so the drain, the config loader and the CLI say a duration the same way.

/**
 * `ms` in at most two units, largest first: milliseconds under a second, tenths under ten seconds,
 * then whole seconds, minutes and seconds, hours and minutes, days and hours. Negative is `0ms`.
 */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms)) return ms > 0 ? "forever" : "0ms";
  if (ms < 999.5) return `${Math.max(0, Math.round(ms))}ms`;
  if (ms < 9950) return `${(Math.round(ms / 100) / 10).toString()}s`;
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${s % 60}s`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h}h${m % 60}m`;
  return `${Math.floor(h / 24)}d${h % 24}h`;
}
