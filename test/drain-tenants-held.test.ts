// A tenant held because its database could not be opened is tried again when its backoff ends, by
// the drain's own loop — no kick, no new row needed — so a tenant database that comes back gets its
// rows (SPEC §4c: "its own reachability and backoff").
import { Database } from "bun:sqlite";
import { expect, test } from "bun:test";
import fs from "node:fs";
import { defineConfig } from "../src/config/define.ts";
import { createWriters } from "../src/config/writers.ts";
import { OutboxSyncService } from "../src/drain/service.ts";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { FAST, memoryLogger } from "./support/drain-harness.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();
cleanups.push(() => closeSharedOutboxes());

test("a tenant whose database could not be opened is retried by the loop when its backoff ends: once it is back, its rows land", async () => {
  const dir = tempDirCleanedBy(cleanups);
  fs.mkdirSync(dir.file("remote"));
  const config = defineConfig({
    app: {
      app: {
        dbDir: dir.file("queue"),
        ...FAST,
        outageBackoffCapMinutes: 1,
        db: { r: { writer: "sqlite", connection: { path: dir.file("remote/{tenant}/db.sqlite") }, tables: ["ev"] } },
      },
    },
  });
  const producer = new SQLMiddleware({ dbDir: dir.file("queue") });
  for (let n = 1; n <= 3; n++) producer.push("ev", "INSERT INTO ev (n) VALUES (?)", [n], { tenant: "late" });
  const svc = new OutboxSyncService(config, await createWriters(config), { logger: memoryLogger() });
  cleanups.push(() => svc.stop(2000));
  await svc.start();
  // Its directory is missing: its database cannot be opened, and it is held.
  await waitFor(
    () =>
      svc
        .targets()[0]!
        .view()
        .tenants!.held.some((h) => h.tenant === "late"),
    "the tenant held",
  );
  fs.mkdirSync(dir.file("remote/late"));
  const db = new Database(dir.file("remote/late/db.sqlite"), { create: true });
  db.run("CREATE TABLE ev (n INTEGER NOT NULL)");
  db.close();
  // Nothing else happens: no push, no kick. Its backoff (a few seconds at most here) ends, and the loop tries it.
  await waitFor(() => svc.totalPending() === 0, "its rows, by the loop alone", 20_000);
  const check = new Database(dir.file("remote/late/db.sqlite"), { readonly: true });
  cleanups.push(() => check.close());
  expect(check.query("SELECT n FROM ev ORDER BY rowid").all()).toEqual([{ n: 1 }, { n: 2 }, { n: 3 }]);
}, 30_000);
