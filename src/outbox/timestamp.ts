/**
 * Timestamps in the reference's on-disk format: UTC ISO-8601 with microseconds and an explicit
 * offset, `YYYY-MM-DDTHH:MM:SS.ffffff+00:00`. JS clocks have millisecond resolution, so the last
 * three digits are always zero in rows we write.
 */
export function isoTimestamp(date?: Date): string {
  if (date !== undefined) return format(date);
  // The hot path (one per enqueue) reuses the text for every call within one millisecond:
  // formatting a Date and binding a freshly built string is a visible share of an enqueue.
  const ms = Date.now();
  if (ms !== cachedMs) {
    cachedMs = ms;
    cachedText = format(new Date(ms));
  }
  return cachedText;
}

let cachedMs = Number.NaN;
let cachedText = "";

function format(date: Date): string {
  // toISOString() is `YYYY-MM-DDTHH:MM:SS.mmmZ`; widen to microseconds and an explicit offset.
  return `${date.toISOString().slice(0, 23)}000+00:00`;
}

/**
 * Parses a stored timestamp to epoch milliseconds, or null when it is not a date. Accepts our
 * format, the reference's, SQLite's `datetime('now')` (`YYYY-MM-DD HH:MM:SS`, UTC) and `Z`.
 */
export function parseTimestamp(text: string | null | undefined): number | null {
  if (!text) return null;
  const m = /^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(\.\d+)?(Z|[+-]\d{2}:?\d{2})?$/.exec(text.trim());
  if (!m) return null;
  // Date.parse only understands up to milliseconds; truncate extra fraction digits.
  const frac = m[3] ? m[3].slice(0, 4) : "";
  const zone = m[4] ?? "Z"; // SQLite's datetime() and the reference write UTC
  const ms = Date.parse(`${m[1]}T${m[2]}${frac}${zone}`);
  return Number.isNaN(ms) ? null : ms;
}
