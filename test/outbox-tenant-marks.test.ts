// A tenant template reads a queue tenant by tenant and applies its rows out of the queue's order:
// the queue indexes rows by tenant, marks rows applied out of order (synced = 1) and confirms them
// only with the prefix they end up in — the lean layout counts pending rows by position, so the
// queue must only ever lose a prefix. These check the file itself.
import { Database } from "bun:sqlite";
import { expect, test } from "bun:test";
import { openDrainQueue } from "../src/outbox/queue-for-drain.ts";
import { verifyFile } from "../src/outbox/inspect.ts";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";

const cleanups = cleanupsAfterEach();
cleanups.push(() => closeSharedOutboxes());

/** A queue of `tenants`' rows, interleaved, `rows` each (seq 1 is the first tenant's first row). */
function queueOf(tenants: string[], rows: number) {
  const dir = tempDirCleanedBy(cleanups);
  const producer = new SQLMiddleware({ dbDir: dir.path });
  for (let n = 1; n <= rows; n++)
    for (const t of tenants) producer.push("ev", "INSERT INTO ev (t, n) VALUES (?, ?)", [t, n], { tenant: t });
  const file = dir.file("ev.db");
  const queue = openDrainQueue(file, "ev");
  cleanups.push(() => queue.close());
  const seqsOf = (tenant: string) => [...pendingOf(queue, tenant)].map((r) => r.seq);
  return { dir, file, producer, queue, seqsOf };
}

function pendingOf(queue: ReturnType<typeof openDrainQueue>, tenant: string | null) {
  return queue.readTenantForDelivery(tenant, 1000, 1 << 20, () => true).rows;
}

test("a tenant's rows are read alone, in seq order, through the index by tenant; tenants are listed by name", () => {
  const { file, queue, seqsOf } = queueOf(["globex", "acme", "initech"], 3);
  expect(seqsOf("acme")).toEqual([2, 5, 8]);
  expect(seqsOf("globex")).toEqual([1, 4, 7]);
  expect(queue.tenantsWithRows(null, 2)).toEqual({ tenants: ["acme", "globex"], withoutTenant: false });
  expect(queue.tenantsWithRows("globex", 5)).toEqual({ tenants: ["initech"], withoutTenant: false });
  const db = new Database(file, { readonly: true });
  cleanups.push(() => db.close());
  const plan = db
    .query<{ detail: string }, []>(
      "EXPLAIN QUERY PLAN SELECT seq FROM outbox_queue WHERE namespace = 'ev' AND synced = 0 AND tenant IS 'acme' AND seq > 0 ORDER BY seq",
    )
    .all()
    .map((r) => r.detail)
    .join("; ");
  expect(plan).toContain("idx_outbox_tenant");
});

test("rows marked applied out of order are read no more, counted no more, and confirmed only with their prefix", () => {
  const { file, queue, seqsOf, producer } = queueOf(["acme", "globex"], 3); // acme 1 3 5, globex 2 4 6
  // globex's rows applied while acme's wait: marked, all but the queue's last row (6).
  expect(queue.markApplied([2, 4, 6])).toBe(2);
  expect(seqsOf("globex")).toEqual([6]);
  expect(queue.pendingCount()).toBe(4); // acme 1 3 5 and the last row
  expect(queue.markedThrough()).toBe(4);
  expect(verifyFile(file).ok).toBe(true);
  // A push after them gets its position after the last row, and the count stays true.
  producer.push("ev", "INSERT INTO ev (t, n) VALUES (?, ?)", ["acme", 4], { tenant: "acme" });
  expect(queue.pendingCount()).toBe(5);
  expect(verifyFile(file).ok).toBe(true);
  // Confirming the prefix through 3 takes acme's 1 and 3 and globex's marked 2 — not 4, behind 3.
  expect(queue.confirmThrough(3)).toBe(3);
  expect(queue.head()?.seq).toBe(4 + 1); // 4 is marked: the head is acme's 5
  expect(queue.pendingCount()).toBe(3); // 5, 6 and 7
  expect(verifyFile(file).ok).toBe(true);
  expect(queue.confirmThrough(7)).toBe(4); // 4 (marked), 5, 6, 7
  expect(queue.pendingCount()).toBe(0);
  const db = new Database(file, { readonly: true });
  cleanups.push(() => db.close());
  expect(db.query("SELECT count(*) AS n FROM outbox_queue").get()).toEqual({ n: 0 });
  expect(verifyFile(file).ok).toBe(true);
});

test("opening a file with rows marked applied keeps them (they are a tenant template's, not an interrupted reference confirm)", () => {
  const { file, queue } = queueOf(["acme", "globex"], 2); // acme 1 3, globex 2 4
  queue.markApplied([2]);
  queue.close();
  const again = openDrainQueue(file, "ev");
  cleanups.push(() => again.close());
  expect(again.pendingCount()).toBe(3);
  expect(again.markedThrough()).toBe(2);
  expect(pendingOf(again, "globex").map((r) => r.seq)).toEqual([4]);
});

test("a lane's head moved out from behind other rows leaves the count true with rows marked applied behind it", () => {
  // acme 1 3 5, globex 2 4 6; globex's 4 is marked applied (behind acme's pending 3).
  const { file, queue } = queueOf(["acme", "globex"], 3);
  expect(queue.markApplied([4])).toBe(1);
  expect(queue.pendingCount()).toBe(5);
  // globex's head (2) is dead-lettered from behind acme's head (1): a hole closed among the rows.
  queue.deadLetter(2, "max_attempts", "refused", "E_TEST");
  expect(queue.pendingCount()).toBe(4); // 1, 3, 5, 6 — marked 4 not counted, never below zero
  expect(queue.confirmThrough(5)).toBe(4); // 1, 3, 4 (marked), 5
  expect(queue.pendingCount()).toBe(1);
  expect(queue.head()?.seq).toBe(6);
  expect(verifyFile(file).ok).toBe(true);
});

test("a tenant's row heads its lane among that tenant's rows: another tenant's earlier row of the same key does not stop it", () => {
  const dir = tempDirCleanedBy(cleanups);
  const producer = new SQLMiddleware({ dbDir: dir.path });
  const sql = "INSERT INTO ev (t, n) VALUES (?, ?)";
  producer.push("ev", sql, ["acme", 1], { tenant: "acme", key: "k" }); // 1
  producer.push("ev", sql, ["globex", 1], { tenant: "globex", key: "k" }); // 2: heads globex's lane k
  producer.push("ev", sql, ["globex", 2], { tenant: "globex", key: "k" }); // 3: behind 2
  producer.push("ev", sql, ["globex", 3], { tenant: "globex" }); // 4: no key, behind every globex row
  const queue = openDrainQueue(dir.file("ev.db"), "ev");
  cleanups.push(() => queue.close());
  expect(() => queue.deadLetter(3, "max_attempts", "refused", "E_TEST")).toThrow(
    /not the head.*tenant "globex", key "k"/,
  );
  expect(() => queue.deadLetter(4, "max_attempts", "refused", "E_TEST")).toThrow(/tenant "globex"/);
  expect(queue.deadLetter(2, "max_attempts", "refused", "E_TEST").seqs).toEqual([2]);
  expect(queue.pendingCount()).toBe(3);
  expect(verifyFile(dir.file("ev.db")).ok).toBe(true);
});
