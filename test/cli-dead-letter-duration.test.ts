// Durations and points in time as the dead-letter commands read them: what is accepted, and a
// refusal that names the flag and the value.
import { describe, expect, test } from "bun:test";
import { UsageError } from "../src/errors.ts";
import { parseDurationMs, parsePointInTime } from "../src/cli/durations.ts";
import { errorOf } from "./support/errors.ts";

describe("parseDurationMs", () => {
  test.each([
    ["90s", 90_000],
    ["30m", 1_800_000],
    ["12h", 43_200_000],
    ["7d", 604_800_000],
    ["2w", 1_209_600_000],
    ["1h30m", 5_400_000],
    ["1d12h", 129_600_000],
    ["1w2d3h4m5s", 788_645_000],
    ["0s", 0],
  ])("%s is %d ms", (text, ms) => {
    expect(parseDurationMs("--older-than", text)).toBe(ms);
  });

  test.each(["", "7", "7x", "1.5h", "-2h", "30m1h", "1h1h", "h", "2 h", "P7D"])(
    "refuses %p, naming the flag and the value",
    (text) => {
      const err = errorOf(() => parseDurationMs("--older-than", text));
      expect(err).toBeInstanceOf(UsageError);
      expect(err).toMatchObject({
        code: "E_USAGE",
        message: `--older-than must be a duration such as 90s, 30m, 12h, 7d, 2w or 1h30m, got "${text}"`,
      });
    },
  );
});

describe("parsePointInTime", () => {
  const now = new Date("2026-03-10T12:00:00.000Z");

  test.each([
    ["2h", "2026-03-10T10:00:00.000Z"],
    ["1d12h", "2026-03-09T00:00:00.000Z"],
    ["2026-03-01", "2026-03-01T00:00:00.000Z"],
    ["2026-03-01T08:30", "2026-03-01T08:30:00.000Z"],
    ["2026-03-01T08:30:15Z", "2026-03-01T08:30:15.000Z"],
    ["2026-03-01 08:30:15.250", "2026-03-01T08:30:15.250Z"],
    ["2026-03-01T08:30:15.123456+00:00", "2026-03-01T08:30:15.123Z"],
    ["2026-03-01T10:30:00+02:00", "2026-03-01T08:30:00.000Z"],
    ["2026-03-01T03:30:00-0500", "2026-03-01T08:30:00.000Z"],
  ])("%s is %s", (text, iso) => {
    expect(parsePointInTime("--since", text, now).toISOString()).toBe(iso);
  });

  test.each(["yesterday", "2026-02-30", "2026-13-01", "2026-03-01T25:00", "2026/03/01", "1.5h"])(
    "refuses %p, naming the flag and the value",
    (text) => {
      expect(() => parsePointInTime("--since", text, now)).toThrow(
        new UsageError(
          `--since must be a duration (2h, 7d, 1h30m) or an ISO-8601 time (2026-03-01T12:00:00Z), got "${text}"`,
        ),
      );
    },
  );
});
