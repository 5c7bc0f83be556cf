import { expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { Outbox, verifyFile } from "../src/index.ts";
import { describeSlow } from "./support/slow.ts";
import { makeTempDir } from "./support/tmp.ts";
import { waitFor } from "./support/wait.ts";

const PRODUCERS = 4;
const DURATION_MS = 3_000;

describeSlow("producer processes", "contend four producer processes on one file for 3 s", () => {
  test("four producer processes and a concurrent confirmer share one file: no SQLITE_BUSY, intact chain, every acked seq once", async () => {
    const tmp = makeTempDir();
    try {
      const script = join(import.meta.dir, "support", "children", "outbox-producer.ts");
      const procs = Array.from({ length: PRODUCERS }, (_, i) =>
        Bun.spawn([process.execPath, script, tmp.path, "events", String(DURATION_MS), String(i + 1)], {
          stdout: "pipe",
          stderr: "pipe",
        }),
      );
      // Meanwhile this process plays the drain: confirm heads as they appear, so new rows keep
      // linking across delivered predecessors while the file is contended.
      await waitFor(() => existsSync(join(tmp.path, "events.db")), "the producers to create the file");
      const drain = new Outbox(join(tmp.path, "events.db"), "events");
      const confirmed: number[] = [];
      const deadline = Date.now() + DURATION_MS - 500;
      while (Date.now() < deadline) {
        const rows = drain.fetchUnsynced(50);
        expect(drain.verifyChain(rows)).toEqual({ ok: true, gaps: [] });
        drain.confirm(rows.slice(0, 25).map((r) => r.seq));
        confirmed.push(...rows.slice(0, 25).map((r) => r.seq));
        await Bun.sleep(20);
      }
      const results = await Promise.all(
        procs.map(async (p) => ({
          code: await p.exited,
          out: await new Response(p.stdout).text(),
          err: await new Response(p.stderr).text(),
        })),
      );
      for (const r of results) {
        expect(r.err).toBe("");
        expect(r.code).toBe(0);
      }
      const acked = results.flatMap((r) => (JSON.parse(r.out) as { acked: number[] }).acked);
      expect(new Set(acked).size).toBe(acked.length); // no seq handed out twice
      expect(acked.length).toBeGreaterThan(PRODUCERS * 10);

      const pending = drain.fetchUnsynced(10_000_000);
      expect(drain.verifyChain(pending)).toEqual({ ok: true, gaps: [] });
      expect(drain.pendingCount()).toBe(pending.length);
      const stored = [...confirmed, ...pending.map((r) => r.seq)].sort((a, b) => a - b);
      expect(stored).toEqual([...acked].sort((a, b) => a - b)); // every acked seq present exactly once
      drain.close();
      const verified = verifyFile(join(tmp.path, "events.db"));
      expect(verified.ok).toBe(true);
      expect(confirmed.length).toBeGreaterThan(0);
    } finally {
      tmp.cleanup();
    }
  }, 30_000);
});
