// A queue file as a test sees it: seeded, opened, broken on purpose, and its highest seq.
import { Database } from "bun:sqlite";
import fs from "node:fs";
import path from "node:path";
import type { DrainQueue } from "../../src/outbox/drain-queue.ts";
import { drainQueueOn } from "../../src/outbox/queue-for-drain.ts";
import { Outbox } from "../../src/outbox/outbox.ts";
import type { QueueFile } from "../../src/outbox/queue-file.ts";

/**
 * The highest seq a queue file ever allocated or was seeded to, in either layout: the legacy
 * layout's AUTOINCREMENT counter, the lean layout's seed floor, and every seq still held in the
 * queue, the delivered log or the dead log. A new row's seq must be above it.
 */
export function highestSeq(file: string): number {
  const db = new Database(file, { readonly: true });
  try {
    const has = (table: string) => db.query("SELECT 1 FROM sqlite_schema WHERE name = ?").get(table) !== null;
    const parts = ["SELECT max(seq) AS s FROM outbox_queue"];
    if (has("sqlite_sequence")) parts.push("SELECT seq FROM sqlite_sequence WHERE name = 'outbox_queue'");
    if (has("outbox_meta")) parts.push("SELECT CAST(value AS INTEGER) FROM outbox_meta WHERE key = 'seq_floor'");
    if (has("outbox_sync_log")) parts.push("SELECT max(seq) FROM outbox_sync_log");
    if (has("outbox_delivered")) parts.push("SELECT max(last_seq) FROM outbox_delivered");
    if (has("outbox_dead_log")) parts.push("SELECT max(seq) FROM outbox_dead_log");
    return db.query<{ s: number | null }, []>(`SELECT max(s) AS s FROM (${parts.join(" UNION ALL ")})`).get()?.s ?? 0;
  } finally {
    db.close();
  }
}

/** Enqueues `count` INSERTs into `{dbDir}/{table}.db` and closes the queue. */
export function seed(dbDir: string, table: string, count: number): void {
  fs.mkdirSync(dbDir, { recursive: true });
  const outbox = new Outbox(path.join(dbDir, `${table}.db`), table);
  try {
    outbox.enqueueBatch(
      Array.from({ length: count }, (_, i) => ({
        tag: `INSERT INTO ${table} (id) VALUES (?)`,
        payload: JSON.stringify([i + 1]),
      })),
      "test",
      { grouped: false },
    );
  } finally {
    outbox.close();
  }
}

/** Opens the queue of `table` in `dbDir` for a test's direct manipulation. */
export function openQueue(dbDir: string, table: string): Outbox {
  return new Outbox(path.join(dbDir, `${table}.db`), table);
}

/** Deletes one queued row behind the chain's back: the next row's prev_seq then points nowhere. */
export function breakChain(dbDir: string, table: string, seq: number): void {
  const db = new Database(path.join(dbDir, `${table}.db`));
  try {
    db.run("DELETE FROM outbox_queue WHERE seq = ?", [seq]);
  } finally {
    db.close();
  }
}

const drainSides = new WeakMap<Outbox, DrainQueue>();

/**
 * The drain's face of the same queue (its bookkeeping: attempts, failures, confirmation, the sent
 * mark, moving the sequence), on the Outbox's own connection, for tests that play the drain's part
 * by hand. It closes with the Outbox.
 */
export function drainSide(outbox: Outbox): DrainQueue {
  let side = drainSides.get(outbox);
  if (side === undefined || side.closed) {
    // The library hands no one an Outbox's connection (the producers' registry keeps its own);
    // a test that plays both parts on one connection reads it here, and only here.
    const { queueDb } = (outbox as unknown as { queueFile: QueueFile }).queueFile;
    const queue = drainQueueOn(queueDb, outbox.namespace);
    const close = outbox.close.bind(outbox);
    outbox.close = () => {
      queue.close();
      close();
    };
    drainSides.set(outbox, (side = queue));
  }
  return side;
}
