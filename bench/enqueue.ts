// Enqueue latency vs. queue depth (`bun run bench:enqueue`). Prints one JSON line per case:
// {"bench":"enqueue","case":…,"depth":…,"p50_us":…,"p99_us":…,"ops_per_s":…}
// then each case's p50 over the raw INSERT's, measured in this same run (the machine is shared):
// {"bench":"enqueue-ratio","case":…,"depth":…,"vs_raw":…}
// The `enqueue-legacy` case is a file in the reference's layout (what every file was before the
// lean layout), so the two layouts are compared on the same disk in the same run.
// `raw-batch-500` is the floor of a batch: the same 500-row transactions written with bun:sqlite
// straight into a file of the lean layout (its index and its foreign-insert trigger included),
// nothing else; `enqueue-batch-500` is then also given over it ({"bench":"enqueue-ratio",
// "case":"enqueue-batch-500","vs_raw_batch":…}).
// and, on the 1M-deep file it built, the read-only inspection the README quotes:
// {"bench":"inspect","case":"health"|"verifyFile","depth":…,"p50_ms":…,"runs":…}
// All cases run on the same disk (a temp dir under /tmp) with the same pragmas (the page size of
// new outbox files, WAL, NORMAL), the same timing loop, warm-up and timestamp function.
import { Database } from "bun:sqlite";
import { mkdtempSync, rmSync } from "node:fs";
import { join } from "node:path";
import { Outbox } from "../src/outbox/outbox.ts";
import { isoTimestamp } from "../src/outbox/timestamp.ts";
import { NEW_FILE_PAGE_SIZE } from "../src/outbox/sqlite-open.ts";
import { fileHealth } from "../src/outbox/health.ts";
import { verifyFile } from "../src/outbox/inspect.ts";
import { NEXT_SEQ_SQL, pendingCountSql } from "../src/outbox/schema.ts";
import { sized } from "./support/smoke.ts";
import { percentile, timeCalls } from "./support/timing.ts";

const OPS = sized(10_000, 200);
const WARMUP = sized(500, 20);
const BATCHES = sized(200, 3);
/** The deep cases' queue depths; the last one is also the inspected file's. */
const DEPTHS = sized([100_000, 1_000_000], [300, 600]);
const DEEPEST = DEPTHS.at(-1)!;
/** Timed reads of the deep file per inspection case. */
const INSPECT_RUNS = { health: sized(50, 3), verifyFile: sized(5, 2) };
const TAG = "INSERT INTO orders (id, customer, amount, note) VALUES (?, ?, ?, ?)";
const PAYLOAD = '[123456,"customer-42",99.99,"a short note"]';

const dir = mkdtempSync("/tmp/sqloutbox-bench-");

const round = (x: number) => Math.round(x * 100) / 100;
const p50s: Array<{ case: string; depth: number; p50: number }> = [];

function report(name: string, depth: number, sortedNs: number[], ops: number, totalNs: number): void {
  const pct = (p: number) => percentile(sortedNs, p) / 1000;
  p50s.push({ case: name, depth, p50: pct(0.5) });
  console.log(
    JSON.stringify({
      bench: "enqueue",
      case: name,
      depth,
      p50_us: round(pct(0.5)),
      p99_us: round(pct(0.99)),
      ops_per_s: Math.round(ops / (totalNs / 1e9)),
    }),
  );
}

function ratios(): void {
  const raw = p50s.find((p) => p.case === "raw-insert")!.p50;
  const rawBatch = p50s.find((p) => p.case === "raw-batch-500")!.p50;
  for (const p of p50s) {
    if (p.case === "raw-insert" || p.case === "raw-batch-500") continue;
    if (p.case === "enqueue-batch-500")
      console.log(
        JSON.stringify({ bench: "enqueue-ratio", case: p.case, depth: p.depth, vs_raw_batch: round(p.p50 / rawBatch) }),
      );
    else
      console.log(JSON.stringify({ bench: "enqueue-ratio", case: p.case, depth: p.depth, vs_raw: round(p.p50 / raw) }));
  }
}

function measure(name: string, depth: number, op: () => void): void {
  const { sortedNs, totalNs } = timeCalls(op, OPS, WARMUP);
  report(name, depth, sortedNs, OPS, totalNs);
}

/** The floor: a plain autocommit INSERT into a table with the same columns and only its primary key. */
function rawInsert(): void {
  const db = new Database(join(dir, "raw.db"));
  db.run(`PRAGMA page_size = ${NEW_FILE_PAGE_SIZE}`);
  db.run("PRAGMA journal_mode = WAL");
  db.run("PRAGMA synchronous = NORMAL");
  db.run(`CREATE TABLE raw (seq INTEGER PRIMARY KEY, created_at TEXT NOT NULL, namespace TEXT NOT NULL,
    source TEXT NOT NULL DEFAULT '', tag TEXT NOT NULL, payload TEXT NOT NULL, prev_seq INTEGER, synced INTEGER NOT NULL DEFAULT 0)`);
  const insert = db.prepare(
    "INSERT INTO raw (created_at, namespace, source, tag, payload, prev_seq) VALUES (?, ?, ?, ?, ?, ?)",
  );
  let prev = 0;
  measure("raw-insert", 0, () => {
    prev = Number(insert.run(isoTimestamp(), "orders", "", TAG, PAYLOAD, prev).lastInsertRowid);
  });
  insert.finalize();
  db.close();
}

/** Grows the namespace of a lean file to `target` pending rows with one bulk INSERT that keeps the chain and ords right. */
function fillTo(path: string, namespace: string, target: number): void {
  const db = new Database(path);
  const pending = db.query<{ pending: number }, [string]>(pendingCountSql("ord")).get(namespace)!.pending;
  const n = target - pending;
  if (n > 0) {
    db.transaction(() => {
      const tail = db
        .query<{ seq: number; ord: number }, [string]>(
          "SELECT seq, ord FROM outbox_queue WHERE namespace = ? AND synced = 0 ORDER BY seq DESC LIMIT 1",
        )
        .get(namespace);
      const base = db.query<{ seq: number }, []>(NEXT_SEQ_SQL).get()!.seq - 1;
      db.query(
        `WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < ?1)
         INSERT INTO outbox_queue (seq, ord, created_at, namespace, source, tag, payload, prev_seq)
         SELECT ?2 + i, ?8 + i, ?3, ?4, 'bench', ?5, ?6, CASE WHEN i = 1 THEN ?7 ELSE ?2 + i - 1 END FROM c`,
      ).run(n, base, isoTimestamp(), namespace, TAG, PAYLOAD, tail?.seq ?? null, tail?.ord ?? 0);
    }).immediate();
  }
  db.close();
}

function enqueueCases(): void {
  const path = join(dir, "orders.db");
  const ob = new Outbox(path, "orders");
  measure("enqueue", 0, () => ob.enqueue(TAG, PAYLOAD));
  ob.close();
  for (const depth of DEPTHS) {
    fillTo(path, "orders", depth);
    const deep = new Outbox(path, "orders");
    measure("enqueue", depth, () => deep.enqueue(TAG, PAYLOAD));
    deep.close();
  }
  fillTo(path, "orders", DEEPEST);
  const capped = new Outbox(path, "orders", { maxPending: 10 * DEEPEST });
  measure("enqueue-max-pending", DEEPEST, () => capped.enqueue(TAG, PAYLOAD));
  capped.close();
  inspectCases(path);
}

/** Read-only health (what `healthAll` does per file: open, counter, head) and a full verifyFile of a deep file. */
function inspectCases(path: string): void {
  const depth = fileHealth(path)[0]!.depth;
  for (const [name, runs, read] of [
    ["health", INSPECT_RUNS.health, () => fileHealth(path)],
    ["verifyFile", INSPECT_RUNS.verifyFile, () => verifyFile(path)],
  ] as const) {
    read(); // warm the page cache
    const samples: number[] = [];
    for (let i = 0; i < runs; i++) {
      const t = Bun.nanoseconds();
      read();
      samples.push((Bun.nanoseconds() - t) / 1e6);
    }
    samples.sort((a, b) => a - b);
    const p50 = Math.round(samples[Math.floor(runs / 2)]! * 100) / 100;
    console.log(JSON.stringify({ bench: "inspect", case: name, depth, p50_ms: p50, runs }));
  }
}

/** Enqueue into a file the reference created (its DDL: AUTOINCREMENT, UNIQUE prev_seq), migrated by us: the legacy layout. */
function legacyCase(): void {
  const path = join(dir, "legacy.db");
  const db = new Database(path);
  db.run(`PRAGMA page_size = ${NEW_FILE_PAGE_SIZE}`);
  db.run(`CREATE TABLE outbox_queue (seq INTEGER PRIMARY KEY AUTOINCREMENT, created_at TEXT NOT NULL, namespace TEXT NOT NULL,
    source TEXT NOT NULL DEFAULT '', tag TEXT NOT NULL, payload TEXT NOT NULL, prev_seq INTEGER UNIQUE, synced INTEGER NOT NULL DEFAULT 0)`);
  db.close();
  const ob = new Outbox(path, "orders");
  measure("enqueue-legacy", 0, () => ob.enqueue(TAG, PAYLOAD));
  ob.close();
}

function batchCase(): void {
  const ob = new Outbox(join(dir, "batch.db"), "orders");
  const items = Array.from({ length: 500 }, () => ({ tag: TAG, payload: PAYLOAD }));
  for (let i = 0; i < 10; i++) ob.enqueueBatch(items);
  const samples: number[] = [];
  const start = Bun.nanoseconds();
  for (let i = 0; i < BATCHES; i++) {
    const t = Bun.nanoseconds();
    ob.enqueueBatch(items);
    samples.push((Bun.nanoseconds() - t) / items.length);
  }
  report(
    "enqueue-batch-500",
    0,
    samples.sort((a, b) => a - b),
    BATCHES * items.length,
    Bun.nanoseconds() - start,
  );
  ob.close();
  rawBatchCase(items.length);
}

/** The floor of a batch: the appender's own INSERT, `rows` per transaction, into a lean file, with nothing around it. */
function rawBatchCase(rows: number): void {
  const path = join(dir, "raw-batch.db");
  new Outbox(path, "orders").close(); // the lean layout, as a producer creates it
  const db = new Database(path);
  db.run("PRAGMA synchronous = NORMAL");
  const insert = db.prepare(
    "INSERT INTO outbox_queue (seq, ord, created_at, namespace, source, tag, payload, prev_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
  );
  let seq = 1;
  const batch = () => {
    db.run("BEGIN IMMEDIATE");
    const now = isoTimestamp();
    for (let i = 0; i < rows; i++, seq++) insert.run(seq, seq, now, "orders", "", TAG, PAYLOAD, seq - 1);
    db.run("COMMIT");
  };
  for (let i = 0; i < 10; i++) batch();
  const samples: number[] = [];
  const start = Bun.nanoseconds();
  for (let i = 0; i < BATCHES; i++) {
    const t = Bun.nanoseconds();
    batch();
    samples.push((Bun.nanoseconds() - t) / rows);
  }
  report(
    "raw-batch-500",
    0,
    samples.sort((a, b) => a - b),
    BATCHES * rows,
    Bun.nanoseconds() - start,
  );
  db.close();
}

try {
  rawInsert();
  enqueueCases();
  legacyCase();
  batchCase();
  ratios();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
