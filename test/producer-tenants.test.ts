// A push names its tenant (SPEC §4c): checked at the door, stored with the row and kept wherever the
// row goes; a transaction belongs to one tenant; a file that holds tenants' rows says so to an
// earlier sqloutbox, which would deliver them all to one database.
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { CrossTenantTransactionError, InvalidArgumentError } from "../src/errors.ts";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { LAYOUTS, TENANT_FORMAT } from "../src/outbox/schema.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { drainSide } from "./support/queue.ts";

const cleanups = cleanupsAfterEach();
cleanups.push(() => closeSharedOutboxes());

const INSERT = "INSERT INTO orders (id) VALUES (?)";

function setup() {
  const dir = tempDirCleanedBy(cleanups);
  const producer = new SQLMiddleware({ dbFile: dir.file("app.db") });
  const queue = (table = "orders") => {
    const q = new Outbox(dir.file("app.db"), table);
    cleanups.push(() => q.close());
    return q;
  };
  return { dir, producer, queue };
}

const tenants = (q: Outbox) => q.fetchUnsynced(100).map((r) => [r.seq, r.tenant]);

describe("a push names its tenant", () => {
  test("push, pushMany and every push inside a transaction store their tenant; a push without one stores none", () => {
    const { producer, queue } = setup();
    const a = producer.push("orders", INSERT, [1], { tenant: "acme" });
    const [b, c] = producer.pushMany(
      "orders",
      [
        [INSERT, [2]],
        [INSERT, [3]],
      ],
      { tenant: "globex" },
    ) as [number, number];
    const d = producer.push("orders", INSERT, [4]);
    const [e, f] = producer.transaction<[number, number]>(
      () => [producer.push("orders", INSERT, [5]), producer.push("items", "INSERT INTO items (id) VALUES (?)", [6])],
      { tenant: "initech" },
    );
    // The first push that names a tenant names the transaction's: the rest take it.
    const [g, h] = producer.transaction<[number, number]>(() => [
      producer.push("orders", INSERT, [7], { tenant: "acme" }),
      producer.push("orders", INSERT, [8]),
    ]);
    expect(tenants(queue())).toEqual([
      [a, "acme"],
      [b, "globex"],
      [c, "globex"],
      [d, null],
      [e, "initech"],
      [g, "acme"],
      [h, "acme"],
    ]);
    expect(tenants(queue("items"))).toEqual([[f, "initech"]]);
  });

  test.each([
    ["", "it is empty"],
    ["-acme", "start"],
    ["a/b", '"/"'],
    ["../x", '"."'],
    ["a b", '" "'],
    ["x".repeat(64), "64"],
    [42, "expected a string"],
  ])(
    "a bad tenant name (%p) is refused at the door, naming the rule and the table; nothing is written",
    (name, says) => {
      const { producer, queue } = setup();
      producer.push("orders", INSERT, [0]);
      let error: unknown;
      try {
        producer.push("orders", INSERT, [1], { tenant: name as string });
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as Error).message).toContain("tenant");
      expect((error as Error).message).toContain(says);
      expect((error as Error).message).toContain('table "orders"');
      expect(() => producer.transaction(() => 0, { tenant: name as string })).toThrow(InvalidArgumentError);
      expect(queue().pendingCount()).toBe(1);
    },
  );

  test("a transaction mixing two tenants is refused at the push that mixes them, and nothing of it is written", () => {
    const { producer, queue } = setup();
    let error: unknown;
    try {
      producer.transaction(() => {
        producer.push("orders", INSERT, [1], { tenant: "acme" });
        producer.push("items", "INSERT INTO items (id) VALUES (?)", [2], { tenant: "globex" });
      });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(CrossTenantTransactionError);
    expect(error).toMatchObject({ code: "E_TENANT", tenants: ["acme", "globex"], table: "items" });
    expect(() =>
      producer.transaction(() => producer.push("orders", INSERT, [3], { tenant: "globex" }), { tenant: "acme" }),
    ).toThrow(CrossTenantTransactionError);
    expect(queue().pendingCount()).toBe(0);
    expect(queue("items").pendingCount()).toBe(0);
  });

  test("a row keeps its tenant through the dead log, a replay and a move above a seq; Outbox refuses a bad one too", () => {
    const { producer, queue } = setup();
    const a = producer.push("orders", INSERT, [1], { tenant: "acme" });
    producer.push("orders", INSERT, [2]);
    const q = queue();
    q.deadLetter(a, "skipped");
    expect(q.getDead(a)?.tenant).toBe("acme");
    const replayed = q.replayDead(a);
    expect(q.fetchUnsynced(10).find((r) => r.seq === replayed)?.tenant).toBe("acme");
    drainSide(q).resequenceAbove(replayed + 10);
    expect(q.fetchUnsynced(10).map((r) => r.tenant)).toEqual([null, "acme"]);
    expect(() => q.enqueue(INSERT, "[3]", "", { traceparent: null, tracestate: null, tenant: "no/pe" })).toThrow(
      InvalidArgumentError,
    );
  });
});

describe("a file that holds tenants' rows", () => {
  const version = (file: string) => {
    const db = new Database(file, { readonly: true });
    try {
      return db.query<{ v: number }, []>("SELECT user_version AS v FROM pragma_user_version").get()!.v;
    } finally {
      db.close();
    }
  };

  test("says so once its first tenant's row is written (an earlier sqloutbox refuses it), and keeps saying so when opened again", () => {
    const { dir, producer } = setup();
    producer.push("orders", INSERT, [1]);
    expect(version(dir.file("app.db"))).toBe(LAYOUTS.lean.format); // still readable by an earlier version
    producer.push("orders", INSERT, [2], { tenant: "acme" });
    expect(version(dir.file("app.db"))).toBe(TENANT_FORMAT);
    closeSharedOutboxes();
    new Outbox(dir.file("app.db"), "orders").close();
    expect(version(dir.file("app.db"))).toBe(TENANT_FORMAT);
  });

  test("in the application's own database the mark is ours, in outbox_meta: its user_version stays the application's", () => {
    const dir = tempDirCleanedBy(cleanups);
    const app = new Database(dir.file("app.db"), { create: true });
    cleanups.push(() => app.close());
    app.run("PRAGMA journal_mode = WAL");
    app.run("PRAGMA user_version = 41");
    const producer = new SQLMiddleware({ database: app });
    producer.transaction(() => producer.push("orders", INSERT, [1], { tenant: "acme" }));
    expect(app.query("SELECT user_version AS v FROM pragma_user_version").get()).toEqual({ v: 41 });
    expect(app.query("SELECT value FROM outbox_meta WHERE key = 'format'").get()).toEqual({
      value: String(TENANT_FORMAT),
    });
  });
});
