// The metrics of a tenant template (SPEC §4c), scraped from a real drain (in this process) over
// SQLite files: per target, never per tenant — tenants with backlog, held, databases open and at
// most, opens and closes — so a thousand tenants make as many series as one.
import { Database } from "bun:sqlite";
import { expect, test } from "bun:test";
import fs from "node:fs";
import { defineConfig } from "../src/config/define.ts";
import { createWriters } from "../src/config/writers.ts";
import { OutboxSyncService } from "../src/drain/service.ts";
import { createDrainMetrics } from "../src/ops/metrics.ts";
import { TENANT_COUNT_CAP } from "../src/ops/tenant-metrics.ts";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { FAST, memoryLogger } from "./support/drain-harness.ts";
import { parsePrometheusText } from "./support/prom-text.ts";

const cleanups = cleanupsAfterEach();
cleanups.push(() => closeSharedOutboxes());

test("a template's metrics: tenants with backlog and held, databases open and at most, opens and closes — one series per target, no tenant label", async () => {
  const dir = tempDirCleanedBy(cleanups);
  fs.mkdirSync(dir.file("remote"));
  const tenants = Array.from({ length: 12 }, (_, i) => `t${i}`);
  // t0…t9 have a database; t10 and t11 do not (their directory is missing): held.
  for (const t of tenants.slice(0, 10)) {
    fs.mkdirSync(dir.file(`remote/${t}`));
    const db = new Database(dir.file(`remote/${t}/db.sqlite`), { create: true });
    db.run("CREATE TABLE ev (n INTEGER)");
    db.close();
  }
  const config = defineConfig({
    app: {
      app: {
        dbDir: dir.file("queue"),
        ...FAST,
        outageBackoffCapMinutes: 1,
        db: {
          tenants: {
            writer: "sqlite",
            connection: { path: dir.file("remote/{tenant}/db.sqlite") },
            tables: ["ev"],
            maxOpenTenants: 4,
          },
          plain: { writer: "sqlite", connection: { path: dir.file("plain.db") }, tables: ["other"] },
        },
      },
    },
  });
  const producer = new SQLMiddleware({ dbDir: dir.file("queue") });
  for (const t of tenants) producer.push("ev", "INSERT INTO ev (n) VALUES (?)", [1], { tenant: t });
  const svc = new OutboxSyncService(config, await createWriters(config), { logger: memoryLogger() });
  cleanups.push(() => svc.stop(2000));
  const metrics = createDrainMetrics(() => svc);
  const T = { app: "app", target: "app.tenants" };

  for (let i = 0; i < 20 && svc.totalPending() > 2; i++) await svc.runOnce();
  const s = parsePrometheusText(await metrics.text());
  expect(s.types.get("sqloutbox_tenants_held")).toBe("gauge");
  expect(s.types.get("sqloutbox_tenant_database_opens_total")).toBe("counter");
  expect(s.value("sqloutbox_tenants_with_backlog", T)).toBe(2);
  expect(s.value("sqloutbox_tenants_held", T)).toBe(2);
  expect(s.value("sqloutbox_tenant_databases_max_open", T)).toBe(4);
  expect(s.value("sqloutbox_tenant_databases_open", T)).toBeLessThanOrEqual(4);
  const opened = s.value("sqloutbox_tenant_database_opens_total", T)!;
  const closed = s.value("sqloutbox_tenant_database_closes_total", T)!;
  expect(opened).toBeGreaterThanOrEqual(12); // ten delivered, two tried
  expect(opened - closed).toBe(s.value("sqloutbox_tenant_databases_open", T)!);
  // Per target only: the target that is one database has none, and no series names a tenant.
  for (const name of [
    "sqloutbox_tenants_with_backlog",
    "sqloutbox_tenants_held",
    "sqloutbox_tenant_databases_open",
    "sqloutbox_tenant_database_opens_total",
  ])
    expect(s.all(name).map((x) => x.labels)).toEqual([T]);
  expect(s.samples.filter((x) => Object.values(x.labels).some((v) => /^t\d+$/.test(v)))).toEqual([]);
  expect(TENANT_COUNT_CAP).toBe(10_000);
}, 60_000);
