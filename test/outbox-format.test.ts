// Files of an earlier format (2) migrate to the newest on open: the per-row sync log becomes
// ranges, the chain keeps its bridge, the origin and every pending row stay, and the next seq is
// above everything the file ever held.
import { Database } from "bun:sqlite";
import { expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { OutboxSyncService } from "../src/drain/service.ts";
import { createWriter } from "../src/writers/registry.ts";
import { verifyFile } from "../src/outbox/inspect.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { LAYOUTS } from "../src/outbox/schema.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { oneApp } from "./support/drain-harness.ts";
import { buildFormat2File } from "./support/format2-db.ts";
import { waitFor } from "./support/wait.ts";
import { drainSide } from "./support/queue.ts";

const cleanups = cleanupsAfterEach();

test("a format-2 file migrates on open: its sync log becomes one range per confirm, its chain and origin stay", () => {
  const dir = tempDirCleanedBy(cleanups);
  const file = dir.file("orders.db");
  const origin = buildFormat2File(file, "orders", 40, 50);
  expect(verifyFile(file).ok).toBe(true); // read as it is, before any migration
  const ob = new Outbox(file, "orders");
  cleanups.push(() => ob.close());
  expect(ob.origin).toBe(origin);
  expect(ob.pendingCount()).toBe(10);
  expect(ob.head()).toMatchObject({ seq: 41, prevSeq: 40, grp: null, traceparent: null });
  expect(ob.verifyChain(ob.fetchUnsynced(100))).toEqual({ ok: true, gaps: [] });
  const db = new Database(file, { readonly: true });
  cleanups.push(() => db.close());
  expect(db.query("PRAGMA user_version").get()).toEqual({ user_version: LAYOUTS.lean.format });
  expect(db.query("SELECT name FROM sqlite_schema WHERE name = 'outbox_sync_log'").all()).toEqual([]);
  // The foreign-insert trigger of formats 2 and 3 gives way to the partial index of rows without an ord.
  expect(db.query("SELECT name FROM sqlite_schema WHERE type = 'trigger'").all()).toEqual([]);
  expect(db.query("SELECT name FROM sqlite_schema WHERE name = 'idx_outbox_foreign'").all()).toHaveLength(1);
  expect(
    db
      .query(
        "SELECT first_seq AS first, last_seq AS last, rows, first_at AS at FROM outbox_delivered ORDER BY last_seq",
      )
      .all(),
  ).toEqual([
    { first: 1, last: 20, rows: 20, at: "2026-11-01T10:00:00.000000+00:00" },
    { first: 21, last: 40, rows: 20, at: "2026-11-01T10:00:05.000000+00:00" },
  ]);
  expect(ob.health().lastDeliveredAt).toBe("2026-11-01T10:00:05.000000+00:00");
  // Delivery goes on from where format 2 left it: the next slice joins the chain, new rows come after.
  expect(drainSide(ob).confirmThrough(45)).toBe(5);
  expect(ob.enqueue("INSERT INTO orders (id) VALUES (?)", "[51]")).toBe(51);
  expect(verifyFile(file)).toMatchObject({ ok: true, problems: [] });
});

test("a format-2 file drained empty keeps its high-water mark: no seq is ever handed out twice", () => {
  const dir = tempDirCleanedBy(cleanups);
  const file = dir.file("orders.db");
  buildFormat2File(file, "orders", 30, 30);
  const ob = new Outbox(file, "orders");
  cleanups.push(() => ob.close());
  expect(ob.pendingCount()).toBe(0);
  expect(ob.enqueue("INSERT INTO orders (id) VALUES (?)", "[31]")).toBe(31);
  expect(ob.head()!.prevSeq).toBe(30);
  expect(verifyFile(file).ok).toBe(true);
});

test("a format-2 file drains after its migration: every pending row once, in order, and it verifies", async () => {
  const dir = tempDirCleanedBy(cleanups);
  mkdirSync(dir.file("outbox"));
  const file = dir.file("outbox/orders.db");
  buildFormat2File(file, "orders", 40, 50);
  const remote = new Database(dir.file("remote.db"), { create: true });
  remote.run("PRAGMA journal_mode = WAL");
  remote.run("CREATE TABLE orders (pos INTEGER PRIMARY KEY, id INTEGER NOT NULL)");
  cleanups.push(() => remote.close());
  const config = oneApp(dir.file("outbox"), {
    r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["orders"] },
  });
  const svc = new OutboxSyncService(config, { "app.r": createWriter("sqlite", { path: dir.file("remote.db") }) });
  cleanups.push(() => svc.stop());
  await waitFor(async () => (await svc.runOnce(), svc.totalPending() === 0), "the format-2 file drained");
  expect(remote.query("SELECT id FROM orders ORDER BY pos").values().flat()).toEqual(
    Array.from({ length: 10 }, (_, i) => 41 + i),
  );
  await svc.stop();
  expect(verifyFile(file)).toMatchObject({ ok: true, problems: [] });
});
