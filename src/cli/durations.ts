// Durations and points in time on the command line (`--older-than 30d`, `--since 2h`). Every
// mistake is a UsageError naming the flag and the value, so the operator sees what was refused.
import { UsageError } from "../errors.ts";

/**
 * Grammar: `<int>w`? `<int>d`? `<int>h`? `<int>m`? `<int>s`?, at least one, largest unit first (`90s`, `12h`,
 * `1h30m`, `2w`).
 */
const DURATION = /^(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$/;
const UNIT_MS = [604_800_000, 86_400_000, 3_600_000, 60_000, 1_000];

// `YYYY-MM-DD`, optionally `THH:MM[:SS[.fff]]`, optionally `Z` or `±HH:MM`; a space may stand for the T.
const ISO_TIME = /^(\d{4})-(\d\d)-(\d\d)(?:[T ](\d\d):(\d\d)(?::(\d\d)(?:\.(\d+))?)?)?(Z|[+-]\d\d:?\d\d)?$/i;

/** Parses the value of `flag` as a duration (see the grammar above) and returns it in milliseconds. */
export function parseDurationMs(flag: string, value: string): number {
  const m = DURATION.exec(value.trim());
  if (!m || value.trim() === "") {
    throw new UsageError(`${flag} must be a duration such as 90s, 30m, 12h, 7d, 2w or 1h30m, got "${value}"`);
  }
  const ms = UNIT_MS.reduce((sum, unit, i) => sum + Number(m[i + 1] ?? 0) * unit, 0);
  if (!Number.isSafeInteger(ms)) throw new UsageError(`${flag} is too long a duration, got "${value}"`);
  return ms;
}

/**
 * Parses the value of `flag` as a point in time: a duration back from `now` (`2h` = two hours
 * ago) or an ISO-8601 time (`2026-03-01`, `2026-03-01T12:00:00Z`, `…+02:00`), read as UTC when it
 * has no offset, like every time sqloutbox prints.
 */
export function parsePointInTime(flag: string, value: string, now: Date = new Date()): Date {
  const text = value.trim();
  if (DURATION.test(text) && text !== "") return new Date(now.getTime() - parseDurationMs(flag, text));
  const m = ISO_TIME.exec(text);
  if (m) {
    const [y, mo, d, h = 0, mi = 0, s = 0] = m.slice(1, 7).map((p) => (p === undefined ? undefined : Number(p)));
    const ms = Number(`0.${m[7] ?? "0"}`) * 1000;
    const utc = new Date(Date.UTC(y!, mo! - 1, d!, h, mi, s, Math.floor(ms)));
    // Date.UTC rolls 2026-02-30 over to March: a field that changed was out of range.
    const exact =
      utc.getUTCFullYear() === y &&
      utc.getUTCMonth() === mo! - 1 &&
      utc.getUTCDate() === d &&
      utc.getUTCHours() === h &&
      utc.getUTCMinutes() === mi &&
      utc.getUTCSeconds() === s;
    if (exact) return new Date(utc.getTime() - offsetMs(m[8]));
  }
  throw new UsageError(
    `${flag} must be a duration (2h, 7d, 1h30m) or an ISO-8601 time (2026-03-01T12:00:00Z), got "${value}"`,
  );
}

function offsetMs(zone: string | undefined): number {
  if (zone === undefined || zone.toUpperCase() === "Z") return 0;
  const sign = zone.startsWith("-") ? -1 : 1;
  const digits = zone.slice(1).replace(":", "");
  return sign * (Number(digits.slice(0, 2)) * 60 + Number(digits.slice(2))) * 60_000;
}
