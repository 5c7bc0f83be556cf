import { expect, test } from "bun:test";
import { withTimeout } from "../src/timeout.ts";

test("withTimeout: the work's result when it is in time; onTimeout's value or error when it is not", async () => {
  expect(
    await withTimeout(
      Bun.sleep(1).then(() => "done"),
      1_000,
      () => "late",
    ),
  ).toBe("done");
  expect(
    await withTimeout(
      Bun.sleep(200).then(() => "done"),
      10,
      () => "late",
    ),
  ).toBe("late");
  await expect(
    withTimeout(Bun.sleep(200), 10, () => {
      throw new Error("timed out");
    }),
  ).rejects.toThrow("timed out");
  await expect(withTimeout(Promise.reject(new Error("work failed")), 1_000, () => "late")).rejects.toThrow(
    "work failed",
  );
});
