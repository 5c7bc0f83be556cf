// `bun run demo` — the newcomer's first command — works end to end and delivers every event.
import { expect, test } from "bun:test";
import { REPO, run } from "./support/cli.ts";
import { describeSlow } from "./support/slow.ts";

// The demo spreads its writes over 4 s (PRODUCE_MS in etc/demo.ts) so a person sees the drain keep up.
describeSlow("bun run demo", "run the 4-second demo end to end", () => {
  test("bun run demo delivers every produced event to the local sqlite target and exits 0", async () => {
    const r = await run(["run", "demo"], { cmd: ["bun"], cwd: REPO });
    expect(r.stderr).not.toContain("error");
    expect(r.code).toBe(0);
    const counts = [...r.stdout.matchAll(/^(orders|payments|events) +(\d+) +(\d+) +(yes|NO)$/gm)].map((m) => ({
      table: m[1],
      produced: Number(m[2]),
      remote: Number(m[3]),
    }));
    expect(counts.map((c) => c.table)).toEqual(["orders", "payments", "events"]);
    for (const c of counts) {
      expect(c.produced).toBeGreaterThan(0);
      expect(c.remote).toBe(c.produced);
    }
    expect(r.stdout).toContain("$ sqloutbox status --config outbox.toml");
    expect(r.stdout).toContain("3 namespace(s), 0 pending, 0 stuck, 0 held, 0 dead letter(s)");
    expect(r.stdout).toMatch(/^ok: 12000 events produced, 12000 delivered in [\d.]+ s$/m);
  }, 60_000);
});
