// A row that violates a constraint checked only at COMMIT (DEFERRABLE INITIALLY DEFERRED foreign
// key) must hold only its own table and be dead-lettered after max_attempts (SPEC §6), on every
// engine that has deferred constraints — not stall every table of the target as an outage.
import { describe, expect, test } from "bun:test";
import { OutboxSyncService } from "../src/drain/service.ts";
import { SQLMiddleware } from "../src/outbox/middleware.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { memoryLogger, oneApp } from "./support/drain-harness.ts";
import { openRemote } from "./support/remote.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();

describe.each(["sqlite", "libsql", "libsql-http", "postgres"] as const)(
  "deferred constraints, delivery to %s",
  (engine) => {
    test("a row that fails a deferred foreign key at COMMIT holds only its table and is dead-lettered after max_attempts", async () => {
      const dir = tempDirCleanedBy(cleanups);
      const remote = await openRemote(engine, { cleanups, foreignKeys: true });
      await remote.exec("CREATE TABLE parent (id BIGINT PRIMARY KEY)");
      await remote.exec("INSERT INTO parent (id) VALUES (1)");
      await remote.exec(
        "CREATE TABLE a (id BIGINT NOT NULL, pid BIGINT REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)",
      );
      await remote.exec("CREATE TABLE b (id BIGINT NOT NULL)");
      const config = oneApp(
        dir.file("outbox"),
        { r: { writer: remote.writer, connection: remote.connection, tables: ["a", "b"] } },
        { maxAttempts: 2, backoffUnitSeconds: 0.01 },
      );
      const svc = new OutboxSyncService(config, { "app.r": remote.createWriter() }, { logger: memoryLogger() });
      cleanups.push(() => svc.stop(2000));
      await svc.runOnce(); // setup: the ledger
      const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
      producer.push("a", "INSERT INTO a (id, pid) VALUES (?, ?)", [1, 1]);
      const poison = producer.push("a", "INSERT INTO a (id, pid) VALUES (?, ?)", [2, 99]);
      producer.push("a", "INSERT INTO a (id, pid) VALUES (?, ?)", [3, 1]);
      for (let i = 0; i < 10; i++) producer.push("b", "INSERT INTO b (id) VALUES (?)", [i]);

      // a's slice rolls back whole (its fence with it), the culprit behind the head is found; b lands.
      const first = await svc.runOnce();
      expect(first).toMatchObject({ delivered: 10, failed: 0, deadLettered: 0 });
      expect(await remote.ints("SELECT count(*) FROM a")).toEqual([[0]]);
      expect(await remote.ints("SELECT count(*) FROM b")).toEqual([[10]]);

      // b keeps flowing while a's bad row is retried.
      producer.push("b", "INSERT INTO b (id) VALUES (?)", [100]);
      const a = new Outbox(dir.file("outbox/a.db"), "a");
      cleanups.push(() => a.close());
      await waitFor(async () => (await svc.runOnce(), a.pendingCount() === 0), "the poison row to be dead-lettered");
      expect(a.getDead(poison)).toMatchObject({ reason: "max_attempts", attempts: 2 });
      expect(await remote.ints("SELECT id FROM a ORDER BY id")).toEqual([[1], [3]]);
      expect(await remote.ints("SELECT count(*) FROM b")).toEqual([[11]]);
      expect(await remote.ints("SELECT id FROM b WHERE id = 100")).toEqual([[100]]);
    });
  },
);
