import { Database } from "bun:sqlite";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, expect, test } from "bun:test";
import { decodeArgs, healthAll, Outbox, verifyFile } from "../src/index.ts";
import { FORMAT_VERSION, LAYOUTS, TENANT_FORMAT } from "../src/outbox/schema.ts";
import { hashTree } from "./support/dir-hash.ts";
import { buildReferenceFile, referenceEnqueue } from "./support/reference-db.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";
import { waitFor } from "./support/wait.ts";
import { drainSide } from "./support/queue.ts";

let tmp: TempDir;
let file: string;
beforeEach(() => {
  tmp = makeTempDir();
  file = tmp.file("orders.db");
  buildReferenceFile(file);
});
afterEach(() => tmp.cleanup());

test("a reference file verifies read-only, reporting only its leftover synced=1 row", () => {
  const before = hashTree(tmp.path);
  const result = verifyFile(file);
  expect(hashTree(tmp.path)).toEqual(before);
  expect(result.problems).toEqual([]);
  const orders = result.namespaces.find((n) => n.namespace === "orders")!;
  expect(orders.gaps).toEqual([]);
  expect(orders.rows).toBe(2);
  expect(orders.problems).toHaveLength(1);
  expect(orders.problems[0]).toContain("synced=1");
  expect(result.namespaces.find((n) => n.namespace === "payments")).toEqual({
    namespace: "payments",
    rows: 2,
    gaps: [],
    problems: [],
  });
});

test("a reference file reports health read-only, without our migrations", () => {
  const before = hashTree(tmp.path);
  const health = healthAll(tmp.path, { now: new Date("2025-06-01T10:00:05.000000Z") });
  expect(hashTree(tmp.path)).toEqual(before);
  expect(health.map((h) => [h.namespace, h.depth, h.headSeq, h.isStuck, h.deadLetterCount])).toEqual([
    ["orders", 2, 4, false, 0],
    ["payments", 2, 6, false, 0],
  ]);
  expect(health[0]!.lastDeliveredAt).toBe("2025-06-01T10:01:00.000000+00:00");
  expect(health[0]!.oldestPendingAgeMs).toBe(1001); // 10:00:05.000 − 10:00:03.999(999)
});

test("a reference file opens for writing: leftovers are finished, rows fetch and decode, the chain continues", () => {
  const orders = new Outbox(file, "orders");
  const payments = new Outbox(file, "payments");
  try {
    const rows = orders.fetchUnsynced(10);
    expect(rows.map((r) => [r.seq, r.prevSeq, r.createdAt])).toEqual([
      [4, 3, "2025-06-01T10:00:03.999999+00:00"],
      [5, 4, "2025-06-01T10:00:04.000000+00:00"],
    ]);
    expect(orders.verifyChain(rows)).toEqual({ ok: true, gaps: [] }); // row 3 bridged via the sync log now
    expect(rows.map((r) => decodeArgs(r.payload))).toEqual([
      [4, "d é", 1.5, true, null],
      [12345678901234567890n, "big"],
    ]);
    expect(payments.fetchUnsynced(10).map((r) => decodeArgs(r.payload))).toEqual([[6], [9.99, 6]]);
    expect([orders.pendingCount(), payments.pendingCount()]).toEqual([2, 2]);

    const next = orders.enqueueBatch([
      { tag: "X", payload: "[]" },
      { tag: "Y", payload: "[]" },
    ]);
    expect(next).toEqual([8, 9]);
    expect(orders.fetchUnsynced(10).map((r) => r.prevSeq)).toEqual([3, 4, 5, 8]);
    const result = verifyFile(file);
    expect(result.ok).toBe(true);

    const db = new Database(file, { readonly: true });
    // The reference's redundant indexes are tolerated, not removed.
    expect(
      db
        .query("SELECT count(*) AS n FROM sqlite_schema WHERE name IN ('idx_outbox_prev', 'idx_outbox_prev_unique')")
        .get(),
    ).toEqual({ n: 2 });
    expect(db.query("SELECT seq FROM outbox_sync_log ORDER BY seq").all()).toEqual([
      { seq: 1 },
      { seq: 2 },
      { seq: 3 },
    ]);
    db.close();
  } finally {
    orders.close();
    payments.close();
  }
});

test("the pending counter stays exact when the reference writes a migrated file", () => {
  new Outbox(file, "orders").close(); // migrate
  const db = new Database(file);
  const a = referenceEnqueue(db, "orders", "INSERT A", "[1]");
  referenceEnqueue(db, "refunds", "INSERT R", "[2]");
  db.run("UPDATE outbox_queue SET synced = 1 WHERE seq IN (4, 5)"); // reference mark_synced
  db.run(
    "INSERT INTO outbox_sync_log SELECT seq, namespace, '2025-06-02T00:00:00.000000+00:00' FROM outbox_queue WHERE seq IN (4, 5)",
  );
  db.run("DELETE FROM outbox_queue WHERE seq IN (4, 5)"); // reference delete_synced
  db.close();
  const orders = new Outbox(file, "orders");
  const refunds = new Outbox(file, "refunds");
  try {
    expect(orders.pendingCount()).toBe(1);
    expect(refunds.pendingCount()).toBe(1);
    expect(orders.head()!.seq).toBe(a);
    expect(orders.verifyChain(orders.fetchUnsynced(10)).ok).toBe(true);
    expect(verifyFile(file).ok).toBe(true);
  } finally {
    orders.close();
    refunds.close();
  }
});

test("opening a namespace the reference left half-confirmed waits out another writer's lock instead of failing with SQLITE_BUSY", async () => {
  new Outbox(file, "payments").close(); // migrated: opening "orders" now takes no lock before it finishes the confirm
  const holder = Bun.spawn(
    [
      process.execPath,
      "-e",
      `const { Database } = require("bun:sqlite"); const db = new Database(${JSON.stringify(file)});
       db.run("BEGIN IMMEDIATE"); console.log("locked"); Bun.sleepSync(300); db.run("COMMIT"); db.close();`,
    ],
    { stdout: "pipe", stderr: "inherit" },
  );
  const reader = holder.stdout.getReader();
  expect(new TextDecoder().decode((await reader.read()).value)).toContain("locked");
  const orders = new Outbox(file, "orders"); // its leftover synced=1 row is confirmed once the lock is free
  orders.close();
  expect(await holder.exited).toBe(0);
  const db = new Database(file, { readonly: true });
  expect(db.query("SELECT count(*) AS n FROM outbox_queue WHERE synced = 1").get()).toEqual({ n: 0 });
  db.close();
});

test("migrating a reference file while the reference keeps writing it leaves exact counters and intact chains", async () => {
  const stop = tmp.file("stop");
  const queueRows = () => {
    const db = new Database(file, { readonly: true });
    try {
      db.run("PRAGMA busy_timeout = 5000"); // the reference may be committing right now
      return db.query<{ n: number }, []>("SELECT count(*) AS n FROM outbox_queue").get()!.n;
    } finally {
      db.close();
    }
  };
  const before = queueRows();
  const writer = Bun.spawn(
    [process.execPath, join(import.meta.dir, "support", "children", "reference-writer.ts"), file, stop],
    { stdout: "pipe", stderr: "pipe" },
  );
  try {
    await waitFor(() => queueRows() > before, "the reference to write"); // migrate while it writes
    const orders = new Outbox(file, "orders"); // migrates under the write lock, between the reference's commits
    const payments = new Outbox(file, "payments");
    for (let i = 0; i < 50; i++) {
      orders.enqueue("INSERT INTO orders (id) VALUES (?)", `[${-i}]`);
      await Bun.sleep(2);
    }
    writeFileSync(stop, "");
    expect(await writer.exited).toBe(0);
    expect(await new Response(writer.stderr).text()).toBe("");
    expect(JSON.parse(await new Response(writer.stdout).text()).written).toBeGreaterThan(0);
    const db = new Database(file, { readonly: true });
    const count = (ns: string) =>
      db
        .query<{ n: number }, [string]>("SELECT count(*) AS n FROM outbox_queue WHERE namespace = ? AND synced = 0")
        .get(ns)!.n;
    expect([orders.pendingCount(), payments.pendingCount()]).toEqual([count("orders"), count("payments")]);
    db.close();
    for (const ob of [orders, payments])
      expect(ob.verifyChain(ob.fetchUnsynced(1_000_000))).toEqual({ ok: true, gaps: [] });
    orders.close();
    payments.close();
    expect(verifyFile(file)).toMatchObject({ ok: true, problems: [] });
  } finally {
    writeFileSync(stop, "");
    await writer.exited;
  }
}, 20_000);

test("files we write keep the reference's queue columns and worker index so its producer and readers can use them", () => {
  const ob = new Outbox(tmp.file("ours.db"), "t");
  ob.enqueue("INSERT INTO t (a) VALUES (?)", "[1]");
  ob.close();
  const db = new Database(tmp.file("ours.db"), { readonly: true });
  const cols = db
    .query<{ name: string }, []>("SELECT name FROM pragma_table_info('outbox_queue')")
    .all()
    .map((c) => c.name);
  expect(cols.slice(0, 8)).toEqual([
    "seq",
    "created_at",
    "namespace",
    "source",
    "tag",
    "payload",
    "prev_seq",
    "synced",
  ]);
  // Delivered rows are logged as ranges (format 3): the reference's per-row sync log is only in its own files.
  expect(
    db
      .query(
        "SELECT name FROM sqlite_schema WHERE name IN ('idx_outbox_worker', 'idx_sync_log', 'outbox_delivered') ORDER BY name",
      )
      .all(),
  ).toEqual([{ name: "idx_outbox_worker" }, { name: "outbox_delivered" }]);
  // The reference reads pending rows with exactly this query.
  expect(
    db
      .query("SELECT seq, tag, payload, prev_seq FROM outbox_queue WHERE namespace = 't' AND synced = 0 ORDER BY seq")
      .all(),
  ).toEqual([{ seq: 1, tag: "INSERT INTO t (a) VALUES (?)", payload: "[1]", prev_seq: null }]);
  db.close();
});

test("the reference writing a file we created: its rows are counted, and a drained-empty queue never hands it a delivered seq", () => {
  const path = tmp.file("ours.db");
  const ob = new Outbox(path, "t");
  const delivered = [ob.enqueue("A", "[1]"), ob.enqueue("B", "[2]")];
  ob.confirm(delivered);
  drainSide(ob).pruneSyncLog(0, new Date(Date.now() + 86_400_000)); // keeps only the newest entry
  ob.close();
  // The reference opens the file: adds its unique prev_seq indexes, then enqueues twice.
  const db = new Database(path);
  db.run("CREATE UNIQUE INDEX IF NOT EXISTS idx_outbox_prev ON outbox_queue (prev_seq)");
  referenceEnqueue(db, "t", "C", "[3]");
  referenceEnqueue(db, "t", "D", "[4]");
  db.close();
  const again = new Outbox(path, "t");
  try {
    const rows = again.fetchUnsynced(10);
    expect(rows.map((r) => r.tag)).toEqual(["C", "D"]);
    expect(rows.every((r) => r.seq > Math.max(...delivered))).toBe(true); // SQLite alone would have reused 1 and 2
    expect(again.pendingCount()).toBe(2);
    const e = again.enqueue("E", "[5]");
    expect(e).toBeGreaterThan(rows[1]!.seq);
    expect(again.pendingCount()).toBe(3);
  } finally {
    again.close();
  }
});

test("files we create carry the lean layout's format (the newest, but for a file holding tenants' rows); a reference file we migrate keeps its layout and format 1", () => {
  const versionOf = (path: string) => {
    const db = new Database(path, { readonly: true });
    try {
      return db.query<{ user_version: number }, []>("PRAGMA user_version").get()!.user_version;
    } finally {
      db.close();
    }
  };
  new Outbox(tmp.file("ours.db"), "t").close();
  new Outbox(file, "orders").close(); // the reference's file, migrated
  expect(versionOf(tmp.file("ours.db"))).toBe(LAYOUTS.lean.format);
  expect(FORMAT_VERSION).toBe(TENANT_FORMAT);
  // A sqloutbox that reads only the legacy format refuses ours and still reads a migrated reference file.
  expect(versionOf(file)).toBe(1);
  expect(versionOf(tmp.file("ours.db"))).toBeGreaterThan(versionOf(file));
});
