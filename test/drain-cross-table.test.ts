// A transaction across tables (one db_file) lands as one remote transaction, in commit order,
// when it heads every table it touches; a failure in it fails all of it. On every engine, with a
// foreign key from order_items to orders on the remote.
import { describe, expect, test } from "bun:test";
import { OutboxSyncService } from "../src/drain/service.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { SQLMiddleware } from "../src/outbox/middleware.ts";
import { defineConfig } from "../src/config/define.ts";
import type { Dialect } from "../src/vocabulary.ts";
import { createWriter } from "../src/writers/registry.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { FAST, FaultyWriter, memoryLogger } from "./support/drain-harness.ts";
import { AUTO_POS, ENGINES, fenceCounter, openRemote } from "./support/remote.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();

/** orders and order_items (a foreign key between them), and `applied`: each applied row with its remote transaction (see drain-groups.test.ts). */
function schema(dialect: Dialect): string[] {
  const base = [
    "CREATE TABLE orders (id BIGINT PRIMARY KEY, total BIGINT NOT NULL)",
    "CREATE TABLE order_items (id BIGINT PRIMARY KEY, order_id BIGINT NOT NULL REFERENCES orders (id), sku VARCHAR(16) NOT NULL)",
    `CREATE TABLE applied (${AUTO_POS[dialect]}, tbl VARCHAR(16) NOT NULL, id BIGINT NOT NULL, txn BIGINT NOT NULL)`,
  ];
  if (dialect === "postgres") {
    return [
      ...base,
      "CREATE FUNCTION mark_applied() RETURNS trigger AS $$ BEGIN INSERT INTO applied (tbl, id, txn) VALUES (TG_TABLE_NAME, COALESCE(NEW.id, OLD.id), txid_current()); RETURN NULL; END $$ LANGUAGE plpgsql",
      "CREATE TRIGGER orders_applied AFTER INSERT OR UPDATE OR DELETE ON orders FOR EACH ROW EXECUTE FUNCTION mark_applied()",
      "CREATE TRIGGER items_applied AFTER INSERT OR UPDATE OR DELETE ON order_items FOR EACH ROW EXECUTE FUNCTION mark_applied()",
    ];
  }
  const { ddl, trigger } = fenceCounter(dialect);
  const mark = (table: string, event: "INSERT" | "DELETE") =>
    trigger(
      `${table}_${event.toLowerCase()}`,
      event,
      table,
      `INSERT INTO applied (tbl, id, txn) SELECT '${table}', ${event === "DELETE" ? "OLD" : "NEW"}.id, n FROM txn`,
    );
  return [
    ...base,
    ...ddl,
    mark("orders", "INSERT"),
    mark("orders", "DELETE"),
    mark("order_items", "INSERT"),
    mark("order_items", "DELETE"),
  ];
}

const ORDER = "INSERT INTO orders (id, total) VALUES (?, ?)";
const ITEM = "INSERT INTO order_items (id, order_id, sku) VALUES (?, ?, ?)";

describe.each(ENGINES)("transactions across tables, delivered to %s", (engine) => {
  async function setup(
    tuning: Record<string, unknown> = {},
    wrap?: (w: ReturnType<typeof createWriter>) => ReturnType<typeof createWriter>,
  ) {
    const dir = tempDirCleanedBy(cleanups);
    const remote = await openRemote(engine, { cleanups, foreignKeys: true });
    for (const ddl of schema(remote.dialect)) await remote.exec(ddl);
    const dbFile = dir.file("shop/outbox.db");
    const config = defineConfig({
      app: {
        shop: {
          dbFile,
          ...FAST,
          ...tuning,
          db: { main: { writer: remote.writer, connection: remote.connection, tables: ["orders", "order_items"] } },
        },
      },
    });
    const producer = new SQLMiddleware({ dbFile });
    producer.outbox("orders"); // the producer creates the db_file; the drain never does
    const log = memoryLogger();
    const writer = createWriter(remote.writer, remote.connection);
    const svc = new OutboxSyncService(config, { "shop.main": wrap ? wrap(writer) : writer }, { logger: log });
    cleanups.push(() => svc.stop(2000));
    const drained = () =>
      waitFor(async () => (await svc.runOnce(), svc.totalPending() === 0), "the queues drained", 20_000);
    return { dir, dbFile, remote, producer, svc, log, drained };
  }

  test("an order and its items land in one remote transaction, in commit order, once each; the foreign key holds throughout", async () => {
    // batch_size 4, orders ahead of order_items: the items of a transaction wait for, then go with, their order.
    const s = await setup({ batchSize: 4, tableFlushThreshold: 3, tableMaxWait: 0.2 });
    for (let id = 1; id <= 6; id++) s.producer.push("orders", ORDER, [id, id]); // orders runs ahead
    for (let id = 7; id <= 12; id++) {
      s.producer.transaction(() => {
        s.producer.push("orders", ORDER, [id, 0]);
        s.producer.push("order_items", ITEM, [id * 10 + 1, id, "a"]);
        s.producer.push("order_items", ITEM, [id * 10 + 2, id, "b"]);
        s.producer.push("orders", "UPDATE orders SET total = ? WHERE id = ?", [2, id]);
      });
    }
    // Commit order matters across tables: the items go before their order.
    s.producer.transaction(() => {
      s.producer.push("order_items", "DELETE FROM order_items WHERE order_id = ?", [7]);
      s.producer.push("orders", "DELETE FROM orders WHERE id = ?", [7]);
    });
    await s.drained();
    expect(await s.remote.ints("SELECT id, total FROM orders ORDER BY id")).toEqual(
      [1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12].map((id) => [id, id <= 6 ? id : 2]),
    );
    expect(
      await s.remote.ints("SELECT order_id, count(*) FROM order_items GROUP BY order_id ORDER BY order_id"),
    ).toEqual([8, 9, 10, 11, 12].map((id) => [id, 2]));
    // Each order of the transactions, its items and its update: one remote transaction.
    for (let id = 8; id <= 12; id++) {
      const txns = await s.remote.ints(
        `SELECT DISTINCT txn FROM applied WHERE (tbl = 'orders' AND id = ${id}) OR (tbl = 'order_items' AND id IN (${id * 10 + 1}, ${id * 10 + 2}))`,
      );
      expect(txns).toHaveLength(1);
    }
    // Order 7's delete: its items, then the order, in one transaction (the foreign key would refuse the other order).
    expect(
      await s.remote.ints(
        "SELECT count(DISTINCT txn) FROM applied WHERE (tbl = 'orders' AND id = 7) OR (tbl = 'order_items' AND id IN (71, 72))",
      ),
    ).toEqual([[2]]);
    const q = new Outbox(s.dbFile, "orders");
    cleanups.push(() => q.close());
    expect(q.health().depth).toBe(0);
  });

  test("a failure in a transaction across tables leaves nothing of it on the remote and dead-letters it whole; the tables go on", async () => {
    const s = await setup({ maxAttempts: 2, backoffUnitSeconds: 0.01 });
    s.producer.transaction(() => {
      s.producer.push("orders", ORDER, [1, 1]);
      s.producer.push("order_items", ITEM, [11, 1, "a"]);
    });
    await s.drained();
    s.producer.transaction(() => {
      s.producer.push("orders", ORDER, [2, 2]);
      s.producer.push("order_items", ITEM, [11, 2, "dup"]); // item 11 exists: the primary key refuses it
    });
    s.producer.push("orders", ORDER, [3, 3]);
    s.producer.push("order_items", ITEM, [31, 3, "c"]);
    const items = new Outbox(s.dbFile, "order_items");
    cleanups.push(() => items.close());
    await waitFor(
      async () => (await s.svc.runOnce(), items.listDead().length > 0),
      "the transaction dead-lettered",
      20_000,
    );
    await s.drained();
    expect(await s.remote.ints("SELECT id FROM orders ORDER BY id")).toEqual([[1], [3]]);
    expect(await s.remote.ints("SELECT id FROM order_items ORDER BY id")).toEqual([[11], [31]]);
    const orders = new Outbox(s.dbFile, "orders");
    cleanups.push(() => orders.close());
    expect(orders.listDead().map((d) => d.tag)).toEqual([ORDER]);
    expect(items.listDead().map((d) => [d.tag, d.grp])).toEqual([[ITEM, orders.listDead()[0]!.grp]]);
    // Replayed as one transaction again, once fixed.
    orders.replayDead(orders.listDead()[0]!.seq);
    expect(items.fetchUnsynced(10).map((r) => r.tag)).toEqual([ITEM]);
    await s.remote.exec("UPDATE order_items SET id = 12 WHERE id = 11");
    await s.remote.exec("DELETE FROM applied");
    await s.drained();
    expect(await s.remote.ints("SELECT id, order_id FROM order_items ORDER BY id")).toEqual([
      [11, 2],
      [12, 1],
      [31, 3],
    ]);
    expect(await s.remote.ints("SELECT count(DISTINCT txn) FROM applied")).toEqual([[1]]);
  });

  test.each([
    ["order_items", "the second table's statement"],
    ["orders", "the first table's statement"],
  ])(
    "a transaction across tables whose %s row fails waits out its backoff between attempts, then is dead-lettered whole (%s)",
    async (failing) => {
      // backoff 0.25 s: attempt 1, then 2 × 0.25 = 0.5 s later attempt 2, then 1 s later attempt 3 → dead letter.
      const sent: number[] = [];
      const s = await setup({ maxAttempts: 3, backoffUnitSeconds: 0.25 }, (inner) => {
        const counting = new FaultyWriter(inner);
        counting.always = async (stmts) => {
          if (stmts.some((st) => st.unit !== undefined)) sent.push(performance.now());
          return inner.writeBatch(stmts);
        };
        return counting;
      });
      await s.remote.exec(
        failing === "orders"
          ? "INSERT INTO orders (id, total) VALUES (5, 0)"
          : "INSERT INTO orders (id, total) VALUES (9, 0)",
      );
      if (failing === "order_items")
        await s.remote.exec("INSERT INTO order_items (id, order_id, sku) VALUES (51, 9, 'x')");
      s.producer.transaction(() => {
        s.producer.push("orders", ORDER, [5, 5]); // with failing = orders: id 5 exists
        s.producer.push("order_items", ITEM, [51, 5, "a"]); // with failing = order_items: id 51 exists
      });
      await s.svc.start();
      const items = new Outbox(s.dbFile, "order_items");
      cleanups.push(() => items.close());
      await waitFor(() => items.listDead().length > 0, "the transaction dead-lettered", 20_000);
      expect(sent).toHaveLength(3);
      const gaps = [sent[1]! - sent[0]!, sent[2]! - sent[1]!];
      expect(gaps[0]!).toBeGreaterThanOrEqual(500 * 0.9);
      expect(gaps[1]!).toBeGreaterThanOrEqual(1000 * 0.9);
      // The error names the failing statement, once.
      const culprit = failing === "orders" ? "seq 1" : "seq 2";
      const failures = s.log.lines.filter((l) => l.includes("failed on target"));
      expect(failures).toHaveLength(2);
      for (const line of failures) expect(line).toContain(`${culprit} of the group of seq 1: `);
      const dead = items.listDead()[0]!;
      expect(dead.error).toStartWith(`${culprit} of the group of seq 1: `);
      expect(dead.error!.match(/of the group of/g)).toHaveLength(1);
    },
  );

  test("a transaction across tables counts its attempts as one, whichever of its tables' statements fails", async () => {
    let sends = 0;
    const s = await setup({ maxAttempts: 3, backoffUnitSeconds: 0.01 }, (inner) => {
      const faulty = new FaultyWriter(inner);
      faulty.always = async (stmts) => {
        if (!stmts.some((st) => st.unit !== undefined)) return inner.writeBatch(stmts);
        // The orders statement fails on odd sends, the order_items one on even sends; the rest of the unit is skipped.
        const culprit = ++sends % 2 === 1 ? "orders" : "order_items";
        const at = stmts.findIndex((st) => st.namespace === culprit && !st.fence);
        return stmts.map((_, i) =>
          i === at
            ? { ok: false, error: `injected: ${culprit} refused`, errorClass: "E_TEST" }
            : { ok: false, error: "injected: skipped", skipped: true },
        );
      };
      return faulty;
    });
    s.producer.transaction(() => {
      s.producer.push("orders", ORDER, [1, 1]);
      s.producer.push("order_items", ITEM, [11, 1, "a"]);
    });
    const items = new Outbox(s.dbFile, "order_items");
    cleanups.push(() => items.close());
    await waitFor(
      async () => (await s.svc.runOnce(), items.listDead().length > 0),
      "the transaction dead-lettered",
      20_000,
    );
    expect(sends).toBe(3);
    expect(s.log.has(/attempt 2\/3.*order_items refused/)).toBe(true);
  });

  test("a writer that applies one table of a transaction and not the other breaks the contract: both tables are held, loudly", async () => {
    const s = await setup({}, (inner) => {
      const faulty = new FaultyWriter(inner);
      faulty.always = async (stmts) => {
        if (!stmts.some((st) => st.unit !== undefined)) return inner.writeBatch(stmts); // setup, probes
        // Applies the orders part alone (its fence and rows), reports order_items failed.
        const orders = stmts.filter((st) => st.namespace === "orders").map(({ unit: _, ...st }) => st);
        const applied = await inner.writeBatch(orders);
        let i = 0;
        return stmts.map((st) =>
          st.namespace === "orders" ? applied[i++]! : { ok: false, error: "injected: not applied" },
        );
      };
      return faulty;
    });
    s.producer.transaction(() => {
      s.producer.push("orders", ORDER, [1, 1]);
      s.producer.push("order_items", ITEM, [11, 1, "a"]);
    });
    await s.svc.runOnce();
    const held = s.svc.targets()[0]!.tables.map((t) => [t.name, t.view().held?.reason ?? null]);
    expect(held).toEqual([
      ["orders", "writer contract"],
      ["order_items", "writer contract"],
    ]);
    expect(s.log.has(/applied part of a transaction spanning "orders", "order_items"/)).toBe(true);
  });
});
