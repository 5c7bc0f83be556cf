// The metrics of lanes, scraped from a real drain (in this process) of a real queue file into a
// SQLite remote whose CHECK refuses one key's head: how many lanes are held, and the bounded rank
// of the keys at the front of the queue — the hot key an operator alerts on, without a label per key.
import { Database } from "bun:sqlite";
import { expect, test } from "bun:test";
import { defineConfig } from "../src/config/define.ts";
import { OutboxSyncService } from "../src/drain/service.ts";
import { createDrainMetrics, KEY_RANKS } from "../src/ops/metrics.ts";
import { KEY_SAMPLE_SQL, sampleKeyBacklog } from "../src/outbox/key-backlog.ts";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { FAST, memoryLogger } from "./support/drain-harness.ts";
import { parsePrometheusText } from "./support/prom-text.ts";
import { AUTO_POS, openRemote } from "./support/remote.ts";

const cleanups = cleanupsAfterEach();
cleanups.push(() => closeSharedOutboxes());

const INSERT = (table: string) => `INSERT INTO ${table} (k, n) VALUES (?, ?)`;

test("lanes_held counts the held lanes (0 without lanes) and key_backlog ranks the keys of the queue's front, the hot key first, at most KEY_RANKS per table", async () => {
  const dir = tempDirCleanedBy(cleanups);
  const remote = await openRemote("sqlite", { cleanups });
  for (const t of ["events", "plain"])
    await remote.exec(
      `CREATE TABLE ${t} (${AUTO_POS[remote.dialect]}, k TEXT NOT NULL, n BIGINT NOT NULL CHECK (n >= 0))`,
    );
  const config = defineConfig({
    app: {
      app: {
        dbDir: dir.file("queue"),
        ...FAST,
        backoffUnitSeconds: 30, // the poison head waits: its lane stays held for the test
        db: {
          r: {
            writer: remote.writer,
            connection: remote.connection,
            tables: [{ name: "events", lanes: 8 }, "plain"],
          },
        },
      },
    },
  });
  const producer = new SQLMiddleware({ dbDir: dir.file("queue") });
  producer.push("events", INSERT("events"), ["hot", -1], { key: "hot" }); // refused by the CHECK: holds its lane
  for (let n = 1; n <= 20; n++) producer.push("events", INSERT("events"), ["hot", n], { key: "hot" });
  for (const k of ["a", "b", "c", "d", "e", "f"]) producer.push("events", INSERT("events"), [k, 1], { key: k });
  producer.push("events", INSERT("events"), ["f", 2], { key: "f" });
  producer.push("plain", INSERT("plain"), ["x", 1]);
  const svc = new OutboxSyncService(config, { "app.r": remote.createWriter() }, { logger: memoryLogger() });
  cleanups.push(() => svc.stop(2000));
  for (let i = 0; i < 4; i++) await svc.runOnce();

  const metrics = createDrainMetrics(() => svc);
  const s = parsePrometheusText(await metrics.text());
  const T = { app: "app", target: "app.r" };
  const events = { ...T, table: "events" };
  expect(s.types.get("sqloutbox_lanes_held")).toBe("gauge");
  expect(s.value("sqloutbox_lanes_held", events)).toBe(1);
  expect(s.value("sqloutbox_lanes_held", { ...T, table: "plain" })).toBe(0);
  // The other keys were delivered ahead of the held lane, and stay in the queue until it moves:
  // the sample counts the queue as it is (28 rows), the held key's 21 first.
  expect(s.value("sqloutbox_key_sample_rows", events)).toBe(28);
  expect(s.all("sqloutbox_key_sample_rows", { ...T, table: "plain" })).toEqual([]);
  const ranks = s.all("sqloutbox_key_backlog_rows", events).map((x) => [x.labels.rank, x.value]);
  expect(ranks.sort()).toEqual([
    ["1", 21],
    ["2", 2],
    ["3", 1],
    ["4", 1],
    ["5", 1],
  ]);
  expect(ranks).toHaveLength(KEY_RANKS);
  const info = s.all("sqloutbox_key_backlog_info", events).map((x) => [x.labels.rank, x.labels.key, x.value]);
  expect(info.sort()).toEqual([
    ["1", "hot", 1],
    ["2", "f", 1],
    ["3", "a", 1], // ties by key
    ["4", "b", 1],
    ["5", "c", 1],
  ]);
  expect(s.all("sqloutbox_key_backlog_rows", { ...T, table: "plain" })).toEqual([]);
  // The ledger gauges know the table with lanes: one series per origin, from its lane rows; the
  // slowest lane's age beside it (the table without lanes has none).
  const origin = svc.targets()[0]!.tables.find((t) => t.name === "events")!.origin!;
  expect(s.value("sqloutbox_ledger_through", { ...events, origin })).toBeGreaterThan(0);
  expect(s.all("sqloutbox_ledger_through", events)).toHaveLength(1);
  expect(s.value("sqloutbox_ledger_slowest_lane_age_seconds", { ...events, origin })).toBeGreaterThanOrEqual(0);
  expect(s.all("sqloutbox_ledger_slowest_lane_age_seconds", { ...T, table: "plain" })).toEqual([]);
  // "a" shares the held lane (FNV-1a: "hot" and "a" are both lane 4 of 8): it waits with it.
  expect((await remote.rows("SELECT k FROM events")).map(([k]) => String(k)).sort()).toEqual([
    "b",
    "c",
    "d",
    "e",
    "f",
    "f",
  ]);
});

test("the key sample reads only the front of the queue: the first N rows by seq, whatever is behind them", () => {
  const dir = tempDirCleanedBy(cleanups);
  const producer = new SQLMiddleware({ dbDir: dir.path });
  for (let i = 0; i < 6; i++) producer.push("events", INSERT("events"), ["early", i], { key: "early" });
  producer.push("events", INSERT("events"), ["barrier", 0]); // no key: sampled, never ranked
  for (let i = 0; i < 50; i++) producer.push("events", INSERT("events"), ["late", i], { key: "late" });
  closeSharedOutboxes();
  const file = `${dir.path}/events.db`;
  expect(sampleKeyBacklog(file, "events", 8, 3)).toEqual({
    rows: 8,
    top: [
      { key: "early", rows: 6 },
      { key: "late", rows: 1 },
    ],
  });
  expect(sampleKeyBacklog(file, "events", 1000, 1)).toEqual({ rows: 57, top: [{ key: "late", rows: 50 }] });
  expect(sampleKeyBacklog(file, "other", 1000, 1)).toEqual({ rows: 0, top: [] });
  // Bounded by the index, not by sorting the namespace: the plan walks it in seq order and stops.
  const db = new Database(file, { readonly: true });
  const plan = db
    .query<{ detail: string }, [string, number]>(`EXPLAIN QUERY PLAN ${KEY_SAMPLE_SQL}`)
    .all("events", 8)
    .map((r) => r.detail);
  db.close();
  expect(plan).toEqual(["SEARCH outbox_queue USING INDEX idx_outbox_worker (namespace=? AND synced=?)"]);
});
