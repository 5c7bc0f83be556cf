// One tenant's rows in a queue file (SPEC §4c), as operators read and repair them: the backlog by
// tenant, one tenant's rows table by table, its rows' backoff ended, and its whole backlog moved
// aside into the dead letters — whole groups, the queue's count and chain kept right — from where
// a replay brings it back.
import { Database } from "bun:sqlite";
import { expect, test } from "bun:test";
import { dirname } from "node:path";
import { SelectionChangedError } from "../src/errors.ts";
import { findDeadLetters, readDeadLetters } from "../src/outbox/dead-letters.ts";
import { SQLMiddleware } from "../src/outbox/middleware.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { backedOffTenantRows, planTenantSkip, TENANT_GONE, withTenantQueue } from "../src/outbox/tenant-actions.ts";
import {
  listTenantsWithRows,
  mayHoldTenantRows,
  readTenantBacklog,
  readTenantRows,
} from "../src/outbox/tenant-backlog.ts";
import { verifyFile } from "../src/outbox/inspect.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { drainSide } from "./support/queue.ts";

const cleanups = cleanupsAfterEach();

/** One db_file holding `orders` and `items`: rows of acme, globex and none interleaved, and a transaction of acme across both tables (its first row without a tenant). */
function queue() {
  const dir = tempDirCleanedBy(cleanups);
  const file = dir.file("app.db");
  const producer = new SQLMiddleware({ dbFile: file });
  const push = (table: string, n: number, tenant?: string) =>
    producer.push(table, `INSERT INTO ${table} (n) VALUES (?)`, [n], tenant === undefined ? {} : { tenant });
  push("orders", 1, "acme"); // seq 1
  push("orders", 2, "globex"); // 2
  push("orders", 3); // 3: no tenant
  producer.transaction(() => {
    push("items", 4); // 4: before the push that names the transaction's tenant, it has none
    push("orders", 5, "acme"); // 5
  });
  push("orders", 6, "globex"); // 6
  push("items", 7, "acme"); // 7
  push("orders", 8, "acme"); // 8
  return { file, producer };
}

const pending = (file: string) => {
  const db = new Database(file, { readonly: true });
  try {
    return db
      .query<{ seq: number; namespace: string; tenant: string | null }, []>(
        "SELECT seq, namespace, tenant FROM outbox_queue ORDER BY seq",
      )
      .all();
  } finally {
    db.close();
  }
};

test("the backlog by tenant counts each table's rows per tenant, rows without one apart, and the first row of each", () => {
  const { file } = queue();
  expect(mayHoldTenantRows(file)).toBe(true);
  const rows = readTenantBacklog(file).map(({ firstCreatedAt, ...r }) => {
    expect(Date.parse(firstCreatedAt)).toBeGreaterThan(0);
    return r;
  });
  expect(rows.sort((a, b) => a.firstSeq - b.firstSeq)).toEqual([
    { namespace: "orders", tenant: "acme", rows: 3, firstSeq: 1 },
    { namespace: "orders", tenant: "globex", rows: 2, firstSeq: 2 },
    { namespace: "orders", tenant: null, rows: 1, firstSeq: 3 },
    { namespace: "items", tenant: null, rows: 1, firstSeq: 4 },
    { namespace: "items", tenant: "acme", rows: 1, firstSeq: 7 },
  ]);
  expect(listTenantsWithRows(file, "orders", 10)).toEqual(["acme", "globex"]);
  expect(listTenantsWithRows(file, "orders", 1)).toEqual(["acme"]);
  expect(listTenantsWithRows(file, "items", 10)).toEqual(["acme"]);
});

test("a file that never held a tenant's row is not read for tenants", () => {
  const dir = tempDirCleanedBy(cleanups);
  new SQLMiddleware({ dbDir: dir.path }).push("orders", "INSERT INTO orders (n) VALUES (?)", [1]);
  expect(mayHoldTenantRows(dir.file("orders.db"))).toBe(false);
});

test("one tenant's rows: per table its count, first row, first failing row and dead letters", () => {
  const { file } = queue();
  const q = new Outbox(file, "orders");
  cleanups.push(() => q.close());
  q.deadLetter(1, "max_attempts");
  drainSide(q).recordAttempt(8);
  drainSide(q).recordFailure(8, "boom", "E1", new Date(Date.now() + 60_000));
  const rows = readTenantRows(file, "acme");
  expect(rows.map(({ oldestCreatedAt: _, ...r }) => r)).toEqual([
    {
      namespace: "items",
      file,
      pending: 1,
      head: { seq: 7, attempts: 0, lastError: null, lastErrorClass: null, nextAttemptAt: null },
      failing: null,
      deadLetters: 0,
    },
    {
      namespace: "orders",
      file,
      pending: 2,
      head: { seq: 5, attempts: 0, lastError: null, lastErrorClass: null, nextAttemptAt: null },
      // A lane's head behind the tenant's first row: why the tenant waits.
      failing: expect.objectContaining({ seq: 8, attempts: 1, lastError: "boom", lastErrorClass: "E1" }),
      deadLetters: 1,
    },
  ]);
  expect(readTenantRows(file, "nobody")).toEqual([]);
});

test("kick --tenant's end of backoff touches that tenant's rows only", () => {
  const { file } = queue();
  const q = new Outbox(file, "orders");
  cleanups.push(() => q.close());
  const later = new Date(Date.now() + 60_000);
  for (const seq of [5, 6]) {
    drainSide(q).recordAttempt(seq);
    drainSide(q).recordFailure(seq, "boom", "E1", later);
  }
  expect(backedOffTenantRows(file, "acme")).toMatchObject([{ namespace: "orders", seq: 5, attempts: 1 }]);
  const retried = withTenantQueue(file, "orders", (t) => t.retry("acme"));
  expect(retried).toMatchObject([{ namespace: "orders", seq: 5, attempts: 1, nextAttemptAt: expect.any(String) }]);
  expect(backedOffTenantRows(file, "acme")).toEqual([]);
  expect(backedOffTenantRows(file, "globex")).toMatchObject([{ seq: 6 }]);
});

test("skip --tenant's move takes every row of the tenant in every table, whole groups, keeps the rest in order with a right count and chain, and replays", () => {
  const { file, producer } = queue();
  const plan = planTenantSkip(file, "acme");
  expect(plan).toEqual([
    { namespace: "items", rows: 2, groups: 1, first: 4, last: 7 },
    { namespace: "orders", rows: 3, groups: 1, first: 1, last: 8 },
  ]);
  const moved = withTenantQueue(file, "orders", (t) => t.skip("acme", plan));
  expect(moved).toEqual(plan);
  expect(pending(file)).toEqual([
    { seq: 2, namespace: "orders", tenant: "globex" },
    { seq: 3, namespace: "orders", tenant: null },
    { seq: 6, namespace: "orders", tenant: "globex" },
  ]);
  // The pending count (by position, in a lean file) and the chain through the dead log are right.
  const orders = new Outbox(file, "orders");
  const items = new Outbox(file, "items");
  cleanups.push(
    () => orders.close(),
    () => items.close(),
  );
  expect([orders.pendingCount(), items.pendingCount()]).toEqual([3, 0]);
  expect(verifyFile(file)).toMatchObject({ ok: true, problems: [] });
  const letters = findDeadLetters({ dbDir: dirname(file), dbFile: file });
  expect(letters.map((l) => [l.namespace, l.seq, l.reason, l.tenant, l.grp])).toEqual([
    ["orders", 1, TENANT_GONE, "acme", null],
    ["items", 4, TENANT_GONE, null, 4],
    ["orders", 5, TENANT_GONE, "acme", 4],
    ["items", 7, TENANT_GONE, "acme", null],
    ["orders", 8, TENANT_GONE, "acme", null],
  ]);
  expect(findDeadLetters({ dbDir: dirname(file), dbFile: file }, { tenant: "acme" })).toHaveLength(4);
  const db = new Database(file, { readonly: true });
  cleanups.push(() => db.close());
  expect(db.query("SELECT grp FROM outbox_group").all()).toEqual([]);
  // New rows go on behind; a replay of the group brings it back whole, as one group again.
  producer.push("orders", "INSERT INTO orders (n) VALUES (?)", [9], { tenant: "globex" });
  expect(orders.pendingCount()).toBe(4);
  orders.replayDead(5);
  const back = pending(file).slice(-2);
  expect(back.map((r) => [r.namespace, r.tenant])).toEqual([
    ["items", null],
    ["orders", "acme"],
  ]);
  expect(readDeadLetters(file, { grp: 4 }).every((l) => l.replayedAt !== null)).toBe(true);
});

test("skip --tenant's move with a count that no longer holds moves nothing", () => {
  const { file, producer } = queue();
  const plan = planTenantSkip(file, "acme");
  producer.push("orders", "INSERT INTO orders (n) VALUES (?)", [10], { tenant: "acme" });
  let error: unknown;
  try {
    withTenantQueue(file, "orders", (t) => t.skip("acme", plan));
  } catch (e) {
    error = e;
  }
  expect(error).toBeInstanceOf(SelectionChangedError);
  expect((error as Error).message).toContain(
    'the rows of tenant "acme" changed since they were counted: 5 then, 6 now',
  );
  expect(pending(file)).toHaveLength(9);
  expect(findDeadLetters({ dbDir: dirname(file), dbFile: file })).toEqual([]);
});
