// A COMMIT that becomes visible late (a synchronous standby, a slow fsync, a drain killed while its
// COMMIT is in flight): the restarted drain must not read the ledger before that transaction is
// decided, or it would send the rows again. Its settlement read locks the ledger row and so waits
// for the holder; the fence of its next batch would fail on the moved row anyway.
import { SQL } from "bun";
import { describe, expect, test } from "bun:test";
import { OutboxSyncService } from "../src/drain/service.ts";
import { SQLMiddleware } from "../src/outbox/middleware.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { ledgerDdl } from "../src/sql/ledger.ts";
import { createWriter } from "../src/writers/registry.ts";
import type { Statement } from "../src/writers/writer.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { FaultyWriter, memoryLogger, oneApp } from "./support/drain-harness.ts";
import { openRemote } from "./support/remote.ts";
import { MYSQL_BASE_URL } from "./support/server-db.ts";
import { describeSlow } from "./support/slow.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();

type Engine = "postgres" | "mysql";
/** How the drain reaches the remote: as the owner with auto_schema, with auto_schema off (a DBA made the ledger), or as a role that may not ALTER or CREATE. */
type Access = "auto_schema" | "no auto_schema" | "restricted role";

/** A database with table t and, unless auto_schema creates it, the ledger; the URL the drain uses. */
async function remoteFor(engine: Engine, access: Access) {
  const remote = await openRemote(engine, { cleanups });
  await remote.exec(
    engine === "postgres"
      ? "CREATE TABLE t (pos BIGSERIAL PRIMARY KEY, id BIGINT NOT NULL, note TEXT)"
      : "CREATE TABLE t (pos BIGINT AUTO_INCREMENT PRIMARY KEY, id BIGINT NOT NULL, note TEXT) ENGINE=InnoDB",
  );
  if (access !== "auto_schema") await remote.exec(ledgerDdl("sqloutbox_ledger", engine));
  let url = remote.url;
  if (access === "restricted role") {
    const role = `drain_${crypto.randomUUID().replaceAll("-", "").slice(0, 10)}`;
    if (engine === "postgres") {
      await remote.exec(`CREATE ROLE ${role} LOGIN`);
      cleanups.push(() => remote.exec(`DROP OWNED BY ${role}; DROP ROLE ${role}`).catch(() => {}));
      await remote.exec(`GRANT SELECT, INSERT, UPDATE ON t, sqloutbox_ledger TO ${role}`);
      await remote.exec(`GRANT USAGE ON SEQUENCE t_pos_seq TO ${role}`);
      url = remote.url.replace("postgres@", `${role}@`);
    } else {
      const admin = new SQL(`${MYSQL_BASE_URL}/mysql`, { max: 1 });
      await admin.unsafe(`CREATE USER '${role}'@'%' IDENTIFIED BY 'pw-${role}'`);
      await admin.unsafe(`GRANT SELECT, INSERT, UPDATE ON \`${remote.name}\`.* TO '${role}'@'%'`);
      await admin.close();
      cleanups.push(async () => {
        const a = new SQL(`${MYSQL_BASE_URL}/mysql`, { max: 1 });
        await a.unsafe(`DROP USER IF EXISTS '${role}'@'%'`).catch(() => {});
        await a.close();
      });
      url = remote.url.replace("root@", `${role}:pw-${role}@`);
    }
  }
  return { remote, url };
}

/**
 * A zombie: runs the batch the drain sent on a connection of its own, holds the transaction (and
 * the ledger row its fence locked) open for `holdMs`, then commits — while the drain was told the
 * connection was lost at once. Exactly a COMMIT that becomes visible late.
 */
function lateCommit(engine: Engine, url: string, holdMs: number, committed: { at: number }) {
  return async (stmts: Statement[]) => {
    const sql = new SQL(url, { max: 1 });
    const zombie = await sql.reserve();
    await zombie.unsafe(engine === "postgres" ? "BEGIN" : "START TRANSACTION");
    for (const s of stmts) await zombie.unsafe(s.sql, s.args as unknown[]);
    setTimeout(async () => {
      committed.at = Date.now(); // when the COMMIT is sent; it becomes visible a moment later
      await zombie.unsafe("COMMIT");
      zombie.release();
      await sql.close();
    }, holdMs);
    throw new Error("injected: connection lost while the COMMIT was in flight");
  };
}

describeSlow("late COMMITs", "hold COMMITs open for seconds on PostgreSQL and MariaDB", () => {
  describe.each([
    ["postgres", "auto_schema"],
    ["postgres", "no auto_schema"],
    ["postgres", "restricted role"],
    ["mysql", "auto_schema"],
    ["mysql", "no auto_schema"],
    ["mysql", "restricted role"],
  ] as Array<[Engine, Access]>)("a late COMMIT on %s (%s)", (engine, access) => {
    test("the next drain waits for it on the ledger row: no row sent twice, no spurious dead letter, the UPDATE applied once", async () => {
      const dir = tempDirCleanedBy(cleanups);
      const { remote, url } = await remoteFor(engine, access);
      const config = oneApp(
        dir.file("outbox"),
        { r: { writer: engine, connection: { url }, tables: ["t"] } },
        { maxAttempts: 2, autoSchema: access === "auto_schema" },
      );
      const writer = new FaultyWriter(createWriter(engine, { url }));
      const log = memoryLogger();
      const svc = new OutboxSyncService(config, { "app.r": writer }, { logger: log });
      cleanups.push(() => svc.stop(3000));
      const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
      for (let i = 0; i < 20; i++) producer.push("t", "INSERT INTO t (id, note) VALUES (?, ?)", [i, "v1"]);
      expect((await svc.runOnce()).delivered).toBe(20);
      for (let i = 20; i < 40; i++) producer.push("t", "INSERT INTO t (id, note) VALUES (?, ?)", [i, "v1"]);
      producer.push("t", "UPDATE t SET note = ? WHERE id = ?", ["v2", 30]);
      const committed = { at: 0 };
      writer.faults.push(lateCommit(engine, url, 1500, committed));
      expect((await svc.runOnce()).outages).toEqual(["app.r"]);
      const retriedAt = Date.now();
      await waitFor(
        async () => (await svc.runOnce(), svc.totalPending() === 0),
        "settlement after the late COMMIT",
        20_000,
      );
      expect(committed.at).toBeGreaterThan(retriedAt); // the drain was retrying while the COMMIT was still out

      const [n, distinct, v2] = (
        await remote.ints("SELECT count(*), count(DISTINCT id), sum(CASE WHEN note = 'v2' THEN 1 ELSE 0 END) FROM t")
      )[0]!;
      expect({ n, distinct, v2 }).toEqual({ n: 40, distinct: 40, v2: 1 });
      const q = new Outbox(dir.file("outbox/t.db"), "t");
      cleanups.push(() => q.close());
      expect(q.deadCount()).toBe(0);
      // The late batch was never sent again: 20 + 21 rows in all.
      expect(writer.statements.filter((s) => s.seq > 0).length).toBe(20);
      expect(log.has(/were applied there \(the ledger says so\)/)).toBe(true);
      expect(log.lines.filter((l) => l.startsWith("error"))).toEqual([]);
    }, 30_000);
  });

  test("a drain SIGKILLed while PostgreSQL runs its COMMIT (a slow deferred trigger): the next drain waits for that COMMIT and sends nothing twice", async () => {
    const dir = tempDirCleanedBy(cleanups);
    const remote = await openRemote("postgres", { cleanups });
    await remote.exec("CREATE TABLE t (pos BIGSERIAL PRIMARY KEY, id BIGINT NOT NULL)");
    // Row 999 makes COMMIT itself take 2 s: the transaction holds its locks until it is decided.
    await remote.exec(
      "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(2); RETURN NULL; END $$",
    );
    await remote.exec(
      "CREATE CONSTRAINT TRIGGER t_slow AFTER INSERT ON t DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.id = 999) EXECUTE FUNCTION slow_commit()",
    );
    const dbDir = dir.file("outbox");
    const spawnDrain = () =>
      Bun.spawn(
        [
          "bun",
          `${import.meta.dir}/support/children/drain-child.ts`,
          JSON.stringify({
            dbDir,
            targets: { pg: { writer: "postgres", connection: remote.connection, tables: ["t"] } },
            tuning: { flushInterval: 0.01, tableFlushThreshold: 1, tableMaxWait: 0 },
          }),
        ],
        { stdout: "pipe", stderr: "pipe" },
      );
    const producer = new SQLMiddleware({ dbDir });
    for (let i = 0; i < 10; i++) producer.push("t", "INSERT INTO t (id) VALUES (?)", [i]);
    producer.push("t", "INSERT INTO t (id) VALUES (?)", [999]);
    for (let i = 10; i < 20; i++) producer.push("t", "INSERT INTO t (id) VALUES (?)", [i]);
    const first = spawnDrain();
    cleanups.push(() => first.kill("SIGKILL"));
    const committing = async () =>
      (
        await remote.ints(
          "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = 'COMMIT' AND state = 'active'",
        )
      )[0]![0]! > 0;
    await waitFor(committing, "the first drain's COMMIT to be in flight", 15_000);
    first.kill("SIGKILL");
    await first.exited;
    const second = spawnDrain();
    cleanups.push(() => second.kill("SIGKILL"));
    const q = new Outbox(`${dbDir}/t.db`, "t");
    cleanups.push(() => q.close());
    await waitFor(() => q.pendingCount() === 0, "the second drain to settle and finish", 20_000);
    second.kill("SIGTERM");
    expect(await second.exited).toBe(0);
    if (process.env.DRAIN_DEBUG)
      console.log(await new Response(first.stderr).text(), "----", await new Response(second.stderr).text());
    expect((await remote.ints("SELECT id FROM t ORDER BY pos")).flat()).toEqual([
      ...Array(10).keys(),
      999,
      ...Array.from({ length: 10 }, (_, i) => i + 10),
    ]);
    expect(q.deadCount()).toBe(0);
  }, 40_000);
});
