// Moving onto the delivery ledger without redelivering what landed and without losing what did
// not: from the Python reference's files, from this project's outbox_seq mode, and a queue file
// restored from an older copy while the remote is ahead.
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import fs from "node:fs";
import { defineConfig } from "../src/config/define.ts";
import { OutboxSyncService } from "../src/drain/service.ts";
import { verifyFile } from "../src/outbox/inspect.ts";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { createWriter } from "../src/writers/registry.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { FAST, memoryLogger, oneApp } from "./support/drain-harness.ts";
import { buildReferenceFile, referenceEnqueue } from "./support/reference-db.ts";
import type { TempDir } from "./support/tmp.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();
const tmp = (): TempDir => tempDirCleanedBy(cleanups);

/** A local SQLite remote with `t`/`orders` tables as given. */
function remoteDb(dir: TempDir, ddl: string[]): Database {
  const db = new Database(dir.file("remote.db"), { create: true });
  db.run("PRAGMA journal_mode = WAL");
  for (const s of ddl) db.run(s);
  cleanups.push(() => db.close());
  return db;
}

async function drainAll(
  dir: TempDir,
  tables: Array<string | { name: string; injectOutboxSeq?: boolean }>,
  log = memoryLogger(),
) {
  const config = oneApp(dir.file("outbox"), {
    r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables },
  });
  const svc = new OutboxSyncService(
    config,
    { "app.r": createWriter("sqlite", { path: dir.file("remote.db") }) },
    { logger: log },
  );
  await svc.start();
  await waitFor(() => svc.totalPending() === 0, "the drain to empty the queues");
  await svc.stop();
  return log;
}

describe("migration onto the ledger", () => {
  test("from this project's outbox_seq mode: rows an interrupted pre-ledger batch applied are adopted, not sent again; the rest go verbatim", async () => {
    const dir = tmp();
    // What an earlier version's drain (injecting outbox_seq, no ledger) left behind: rows 1..13
    // applied remotely, 1..10 confirmed locally, 11..15 pending with the head marked as sent through 13.
    const remote = remoteDb(dir, [
      "CREATE TABLE t (id INTEGER NOT NULL, outbox_seq INTEGER NOT NULL DEFAULT 0)",
      "CREATE UNIQUE INDEX idx_t_outbox_seq ON t (outbox_seq) WHERE outbox_seq != 0",
    ]);
    for (let i = 1; i <= 13; i++) remote.run("INSERT INTO t (id, outbox_seq) VALUES (?, ?)", [i, i]);
    fs.mkdirSync(dir.file("outbox"));
    const q = new Outbox(dir.file("outbox/t.db"), "t");
    cleanups.push(() => q.close());
    for (let i = 1; i <= 15; i++) q.enqueue("INSERT INTO t (id) VALUES (?)", `[${i}]`);
    q.confirm([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    const raw = new Database(dir.file("outbox/t.db"));
    raw.run("UPDATE outbox_queue SET sent_through = 13, attempts = 1 WHERE seq = 11"); // the earlier version's mark
    raw.close();
    const log = await drainAll(dir, ["t"]); // inject_outbox_seq now defaults to false: the ledger
    expect(remote.query("SELECT id FROM t ORDER BY rowid").values().flat()).toEqual(
      [...Array(15).keys()].map((i) => i + 1),
    );
    expect(
      log.has(
        /"t" on app\.r starts on the delivery ledger: its earlier delivery reached outbox_seq 13 there, taken as applied/,
      ),
    ).toBe(true);
    expect(remote.query("SELECT through FROM sqloutbox_ledger WHERE origin = ?").values(q.origin)).toEqual([[15]]);
    expect(q.deadCount()).toBe(0);
  });

  test("from the Python reference's files: the file gains an origin when first written, applied rows are adopted, pending rows land once", async () => {
    const dir = tmp();
    fs.mkdirSync(dir.file("outbox"));
    const file = dir.file("outbox/orders.db");
    buildReferenceFile(file);
    const ref = new Database(file);
    ref.run("DELETE FROM outbox_queue"); // the fixture's own rows exercise payload decoding; write a simple history instead
    ref.run("DELETE FROM outbox_sync_log");
    const seqs = [1, 2, 3, 4, 5, 6].map((i) =>
      referenceEnqueue(ref, "orders", "INSERT INTO orders (id, note) VALUES (?, ?)", `[${i}, "n${i}"]`),
    );
    // The reference delivered ids 1..4 (it injects outbox_seq), confirmed 1..3, and died before confirming 4.
    ref.run(
      "INSERT INTO outbox_sync_log (seq, namespace, synced_at) SELECT seq, namespace, '2025-06-01T10:01:00.000000+00:00' FROM outbox_queue WHERE seq <= ?",
      [seqs[2]!],
    );
    ref.run("DELETE FROM outbox_queue WHERE seq <= ?", [seqs[2]!]);
    ref.close();
    const remote = remoteDb(dir, [
      "CREATE TABLE orders (id INTEGER NOT NULL, note TEXT, outbox_seq INTEGER NOT NULL DEFAULT 0)",
    ]);
    for (let i = 1; i <= 4; i++)
      remote.run("INSERT INTO orders (id, note, outbox_seq) VALUES (?, ?, ?)", [i, `n${i}`, seqs[i - 1]!]);
    const before = new Database(file, { readonly: true });
    expect(before.query("SELECT count(*) AS n FROM sqlite_schema WHERE name = 'outbox_meta'").get()).toEqual({ n: 0 });
    before.close();
    await drainAll(dir, ["orders"]);
    expect(remote.query("SELECT id, note FROM orders ORDER BY rowid").values()).toEqual(
      [1, 2, 3, 4, 5, 6].map((i) => [i, `n${i}`]),
    );
    const q = new Outbox(file, "orders");
    cleanups.push(() => q.close());
    expect(q.origin).toMatch(/^[0-9a-f-]{36}$/);
    expect(remote.query("SELECT origin, through FROM sqloutbox_ledger").values()).toEqual([[q.origin, seqs[5]!]]);
  });

  test("staying in the compatibility mode (inject_outbox_seq = true) needs no adoption: the remote absorbs what it already has", async () => {
    const dir = tmp();
    const remote = remoteDb(dir, [
      "CREATE TABLE t (id INTEGER NOT NULL, outbox_seq INTEGER NOT NULL DEFAULT 0)",
      "CREATE UNIQUE INDEX idx_t_outbox_seq ON t (outbox_seq) WHERE outbox_seq != 0",
    ]);
    for (let i = 1; i <= 8; i++) remote.run("INSERT INTO t (id, outbox_seq) VALUES (?, ?)", [i, i]);
    fs.mkdirSync(dir.file("outbox"));
    const q = new Outbox(dir.file("outbox/t.db"), "t");
    cleanups.push(() => q.close());
    for (let i = 1; i <= 10; i++) q.enqueue("INSERT INTO t (id) VALUES (?)", `[${i}]`);
    q.confirm([1, 2, 3, 4, 5]); // 6..8 applied but unconfirmed, 9..10 never sent
    await drainAll(dir, [{ name: "t", injectOutboxSeq: true }]);
    expect(remote.query("SELECT id, outbox_seq FROM t ORDER BY outbox_seq").values()).toEqual(
      [...Array(10).keys()].map((i) => [i + 1, i + 1]),
    );
  });
});

describe("the reference writing into a file we created", () => {
  test("while our drain delivers it and our producer pushes: every row lands once, and no delivered seq is handed out again", async () => {
    const dir = tmp();
    const remote = remoteDb(dir, [
      "CREATE TABLE orders (id INTEGER NOT NULL)",
      "CREATE TABLE payments (id INTEGER NOT NULL)",
    ]);
    const dbFile = dir.file("shop.db");
    const producer = new SQLMiddleware({ dbFile });
    producer.push("orders", "INSERT INTO orders (id) VALUES (?)", [1_000_000]); // the file is ours: lean
    const config = defineConfig({
      app: {
        shop: {
          dbFile,
          ...FAST,
          db: { r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["orders", "payments"] } },
        },
      },
    });
    const svc = new OutboxSyncService(config, { "shop.r": createWriter("sqlite", { path: dir.file("remote.db") }) });
    cleanups.push(() => svc.stop(2000));
    await svc.start();
    // The reference's producer: its own columns only, no seq, no ord — into a queue our drain keeps emptying.
    const stop = dir.file("stop");
    const writer = Bun.spawn(
      [process.execPath, `${import.meta.dir}/support/children/reference-writer.ts`, dbFile, stop],
      { stdout: "pipe", stderr: "pipe" },
    );
    cleanups.push(() => writer.kill());
    let ours = 1;
    const until = Date.now() + 1_500;
    while (Date.now() < until) {
      producer.push("orders", "INSERT INTO orders (id) VALUES (?)", [1_000_000 + ours++]);
      await Bun.sleep(2);
    }
    fs.writeFileSync(stop, "");
    expect(await writer.exited).toBe(0);
    const { written } = JSON.parse(await new Response(writer.stdout).text()) as { written: number };
    expect(written).toBeGreaterThan(20);
    await waitFor(() => svc.totalPending() === 0, "the drain to deliver every row", 20_000);
    const ids = (table: string) =>
      remote
        .query<{ id: number }, []>(`SELECT id FROM ${table} ORDER BY id`)
        .all()
        .map((r) => r.id);
    const theirs = Array.from({ length: written / 2 }, (_, i) => 2 * i);
    expect(ids("orders")).toEqual([...theirs, ...Array.from({ length: ours }, (_, i) => 1_000_000 + i)]);
    expect(ids("payments")).toEqual(theirs);
    closeSharedOutboxes();
    expect(verifyFile(dbFile).ok).toBe(true);
  }, 30_000);
});

describe("a queue file restored from an older copy", () => {
  test("while the remote is ahead: rows the copy never sent are moved above the ledger and delivered — never confirmed unsent — and new events land", async () => {
    const dir = tmp();
    const remote = remoteDb(dir, ["CREATE TABLE t (id INTEGER NOT NULL)"]);
    const dbDir = dir.file("outbox");
    const producer = new SQLMiddleware({ dbDir });
    const push = (id: number) => producer.push("t", "INSERT INTO t (id) VALUES (?)", [id]);
    for (let i = 1; i <= 5; i++) push(i);
    await drainAll(dir, ["t"]);
    for (let i = 6; i <= 8; i++) push(i);
    closeSharedOutboxes(); // the last connection checkpoints and removes the -wal: the .db alone is the copy
    fs.copyFileSync(`${dbDir}/t.db`, dir.file("backup.db"));
    for (let i = 9; i <= 10; i++) push(i);
    await drainAll(dir, ["t"]);
    expect(remote.query("SELECT id FROM t ORDER BY rowid").values().flat()).toEqual(
      [...Array(10).keys()].map((i) => i + 1),
    );

    // The host is restored from the copy: it still holds 6..8 as pending and never sent them.
    closeSharedOutboxes();
    for (const suffix of ["-wal", "-shm"]) fs.rmSync(`${dbDir}/t.db${suffix}`, { force: true });
    fs.copyFileSync(dir.file("backup.db"), `${dbDir}/t.db`);
    const log = memoryLogger();
    const config = oneApp(dbDir, {
      r: { writer: "sqlite", connection: { path: dir.file("remote.db") }, tables: ["t"] },
    });
    const svc = new OutboxSyncService(
      config,
      { "app.r": createWriter("sqlite", { path: dir.file("remote.db") }) },
      { logger: log },
    );
    cleanups.push(() => svc.stop(2000));
    await svc.start();
    await waitFor(
      () => log.has(/pending rows 6\.\.8 were never sent .*moved them, in order, to 11\.\.13/),
      "the settlement after the restore",
    );
    const fresh = push(11); // produced after the restore
    await waitFor(() => svc.totalPending() === 0, "delivery after the restore");
    expect(fresh).toBe(14); // the local sequence now runs above the ledger's through
    // 6..8 were delivered again (this copy cannot know they landed: at least once here), and 11 once.
    expect(remote.query("SELECT id FROM t ORDER BY rowid").values().flat()).toEqual([
      1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 6, 7, 8, 11,
    ]);
    const q = new Outbox(`${dbDir}/t.db`, "t");
    cleanups.push(() => q.close());
    expect(q.listDead().map((d) => [d.seq, d.reason])).toEqual([
      [6, "resequenced"],
      [7, "resequenced"],
      [8, "resequenced"],
    ]);
  });
});
