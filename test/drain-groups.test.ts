// What the application committed together lands together: a group (a pushMany, a transaction) is
// never split across batches, lands in ONE remote transaction — checked in the engine, by a
// trigger that records the transaction of every applied row — and fails, is dead-lettered and is
// replayed whole. On every built-in writer's real engine.
import { describe, expect, test } from "bun:test";
import { OutboxSyncService } from "../src/drain/service.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { SQLMiddleware } from "../src/outbox/middleware.ts";
import type { Dialect } from "../src/vocabulary.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { memoryLogger, oneApp } from "./support/drain-harness.ts";
import { AUTO_POS, ENGINES, fenceCounter, openRemote } from "./support/remote.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();

/**
 * The remote schema: accounts (a CHECK keeps balances ≥ 0), `taken` (a unique name a statement
 * can collide with), and `applied`: one row per row applied to accounts, with the remote
 * transaction that applied it — txid_current() on PostgreSQL; elsewhere a counter every ledger
 * fence moves (one fence per table and transaction: rows it counts share their transaction).
 */
function schema(dialect: Dialect): string[] {
  const base = [
    "CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL CHECK (balance >= 0))",
    "CREATE TABLE taken (name VARCHAR(32) PRIMARY KEY)",
    `CREATE TABLE applied (${AUTO_POS[dialect]}, id BIGINT NOT NULL, txn BIGINT NOT NULL)`,
  ];
  if (dialect === "postgres") {
    return [
      ...base,
      "CREATE FUNCTION mark_applied() RETURNS trigger AS $$ BEGIN INSERT INTO applied (id, txn) VALUES (NEW.id, txid_current()); RETURN NEW; END $$ LANGUAGE plpgsql",
      "CREATE TRIGGER accounts_applied AFTER INSERT OR UPDATE ON accounts FOR EACH ROW EXECUTE FUNCTION mark_applied()",
    ];
  }
  const { ddl, trigger } = fenceCounter(dialect);
  return [
    ...base,
    ...ddl,
    trigger("accounts_inserted", "INSERT", "accounts", "INSERT INTO applied (id, txn) SELECT NEW.id, n FROM txn"),
    trigger("accounts_updated", "UPDATE", "accounts", "INSERT INTO applied (id, txn) SELECT NEW.id, n FROM txn"),
  ];
}

const INSERT = "INSERT INTO accounts (id, balance) VALUES (?, 0)";
const CREDIT = "UPDATE accounts SET balance = balance + 1 WHERE id = ?";

describe.each(ENGINES)("groups, delivered to %s", (engine) => {
  async function setup(tuning: Record<string, unknown> = {}) {
    const dir = tempDirCleanedBy(cleanups);
    const remote = await openRemote(engine, { cleanups });
    for (const ddl of schema(remote.dialect)) await remote.exec(ddl);
    const config = oneApp(
      dir.file("outbox"),
      { r: { writer: remote.writer, connection: remote.connection, tables: ["accounts"] } },
      tuning,
    );
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    const log = memoryLogger();
    const svc = new OutboxSyncService(config, { "app.r": remote.createWriter() }, { logger: log });
    cleanups.push(() => svc.stop(2000));
    const drained = () =>
      waitFor(async () => (await svc.runOnce(), svc.totalPending() === 0), "the queue drained", 20_000);
    return { dir, remote, producer, svc, log, drained };
  }

  /** A group of `size` statements for account `id`: it is created, then credited size − 1 times. */
  const group = (id: number, size: number): Array<[string, number[]]> => [
    [INSERT, [id]],
    ...Array.from({ length: size - 1 }, (): [string, number[]] => [CREDIT, [id]]),
  ];

  test("groups straddling batch boundaries each land in one remote transaction, whole and in order; a group larger than batch_size goes alone", async () => {
    const s = await setup({ batchSize: 3 });
    const sizes = Array.from({ length: 36 }, (_, i) => [2, 1, 3, 2, 5, 1][i % 6]!);
    sizes.forEach((size, i) => {
      if (size === 1) s.producer.push("accounts", INSERT, [i + 1]);
      else s.producer.pushMany("accounts", group(i + 1, size));
    });
    await s.drained();
    // Every row once, every account credited size − 1 times.
    expect(await s.remote.ints("SELECT count(*) FROM applied")).toEqual([[sizes.reduce((a, b) => a + b, 0)]]);
    expect(await s.remote.ints("SELECT id, balance FROM accounts ORDER BY id")).toEqual(
      sizes.map((size, i) => [i + 1, size - 1]),
    );
    // One transaction per group: never a group seen by two transactions.
    expect(await s.remote.ints("SELECT id FROM applied GROUP BY id HAVING count(DISTINCT txn) > 1")).toEqual([]);
    // In order: the groups landed one after another.
    const order = (await s.remote.ints("SELECT id FROM applied ORDER BY pos")).map(([id]) => id!);
    expect(order).toEqual([...order].sort((a, b) => a - b));
    // Batches still carry several groups when they fit (2 + 1 rows under batch_size 3).
    const transactions = (await s.remote.ints("SELECT count(DISTINCT txn) FROM applied"))[0]![0]!;
    expect(transactions).toBeLessThan(sizes.length);
  });

  test("a group with a poison statement leaves nothing of itself on the remote, is dead-lettered whole, and replays whole; the groups around it land in order", async () => {
    const s = await setup({ maxAttempts: 2, backoffUnitSeconds: 0.01 });
    await s.remote.exec("INSERT INTO taken (name) VALUES ('x')");
    s.producer.pushMany("accounts", group(1, 2));
    const [poison] = s.producer.pushMany("accounts", [
      [INSERT, [900]],
      ["INSERT INTO taken (name) VALUES (?)", ["x"]],
    ]); // the second collides
    s.producer.pushMany("accounts", group(2, 2));
    const q = new Outbox(s.dir.file("outbox/accounts.db"), "accounts");
    cleanups.push(() => q.close());
    await waitFor(async () => (await s.svc.runOnce(), q.deadCount() === 2), "the poison group dead-lettered", 20_000);
    await s.drained();
    expect(await s.remote.ints("SELECT id FROM accounts ORDER BY id")).toEqual([[1], [2]]); // nothing of 900
    expect(await s.remote.ints("SELECT id FROM applied GROUP BY id ORDER BY min(pos)")).toEqual([[1], [2]]);
    const letters = q.listDead();
    expect(letters.map((d) => [d.seq, d.grp, d.reason])).toEqual([
      [poison!, poison!, "max_attempts"],
      [poison! + 1, poison!, "max_attempts"],
    ]);
    expect(letters[0]!.error).toMatch(/seq \d+ of the group of seq \d+/);
    expect(s.log.has(/dead-lettered the group of seq \d+ \(2 rows\)/)).toBe(true);
    // The operator removes the cause and replays one letter: the whole group goes again, as a group.
    await s.remote.exec("DELETE FROM taken");
    const again = q.replayDead(poison!);
    expect(q.fetchUnsynced(10).map((r) => [r.tag, r.grp])).toEqual([
      [INSERT, again],
      ["INSERT INTO taken (name) VALUES (?)", again],
    ]);
    await s.drained();
    expect(await s.remote.ints("SELECT id FROM accounts ORDER BY id")).toEqual([[1], [2], [900]]);
    expect(await s.remote.rows("SELECT name FROM taken")).toEqual([["x"]]);
    expect(await s.remote.ints("SELECT count(DISTINCT txn) FROM applied WHERE id = 900")).toEqual([[1]]);
  });
});
