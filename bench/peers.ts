// Side by side with plainjob, the SQLite job queue Bun users reach for (`bun run bench:peers`): the
// same statement, `INSERT INTO orders (id, total, note) VALUES (?, ?, ?)` with three arguments, given
// to our producer as a push and to plainjob as its job `{ sql, args }` (JSON, its default
// serializer), in one process. Each round measures every case of both, alternated (which goes first
// turns each round), each on a fresh file; each figure is the median of ROUNDS rounds. plainjob is
// used as its README says: `bun(new Database(path, { strict: true }))`, its own pragmas (WAL,
// synchronous=NORMAL, busy_timeout), a silent logger. One JSON line each:
// {"bench":"peers-single","queue":…,"api":"push"|"add","p50_us":…,"p99_us":…,"ops_per_s":…}
//   SINGLE_OPS calls one by one, each timed, after a warm-up.
// {"bench":"peers-bulk","queue":…,"api":"pushMany"|"addMany"|"enqueueBatch","batch_size":1|10|500,"per_item_us":…,"items_per_s":…}
//   calls of batch_size statements (one transaction each), BULK_ITEMS statements a round; per_item_us
//   is the median call over batch_size. `enqueueBatch`: our Outbox.enqueueBatch of rows encoded
//   beforehand, with the source a producer stores (its class name) — the row write, what pushMany
//   adds its checks to.
// {"bench":"peers-drain","queue":…,"target":"null"|"sqlite","rows":…,"rows_per_s":…,["workers":…]}
//   a backlog of DRAIN_ROWS items (pushed with pushMany / addMany, CHUNK a call) delivered, in this
//   process. Ours: the drain (OutboxSyncService, batch_size 500, flush_interval 5 ms, threshold 1),
//   to a writer that accepts everything (null) or the sqlite writer. plainjob's: its workers
//   (defineWorker, the job's JSON read; for sqlite its statement run on the same kind of file the
//   sqlite writer opens — WAL, SQLite's default synchronous=FULL, busy_timeout — one commit a job,
//   as a worker takes one job at a time), as many as did best on a probe of PROBE_ROWS at each
//   count of WORKER_COUNTS (its README's way to more throughput is more workers).
// {"bench":"peers-ratio","case":…,"sqloutbox_vs_plainjob":…}   each pair, ours over plainjob's
//   (times: below 1 is ahead; rates are turned into times first, so the same holds);
// {"bench":"peers-ratio","case":"pushMany vs enqueueBatch 500","vs_enqueue_batch":…}.
import { Database } from "bun:sqlite";
import fs from "node:fs";
import path from "node:path";
import { bun, defineQueue, defineWorker, type Queue } from "plainjob";
import { defineConfig } from "../src/config/define.ts";
import { OutboxSyncService } from "../src/drain/service.ts";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { encodeArgs } from "../src/outbox/payload.ts";
import { createWriter } from "../src/writers/registry.ts";
import type { OutboxWriter } from "../src/writers/writer.ts";
import { makeTempDir } from "../test/support/tmp.ts";
import { benchLogger, sized } from "./support/smoke.ts";
import { percentile, timeCalls } from "./support/timing.ts";

const SQL = "INSERT INTO orders (id, total, note) VALUES (?, ?, ?)";
const ARGS = [123456, 99.99, "a short note"];
const ROUNDS = sized(5, 1);
const SINGLE_OPS = sized(20_000, 200);
const WARMUP = sized(1_000, 20);
const BULK_SIZES = [1, 10, 500];
/** Statements a round per bulk case: calls = BULK_ITEMS / batch_size. */
const BULK_ITEMS = sized(20_000, 1_000);
const DRAIN_ROWS = sized(100_000, 1_000);
const DRAIN_ROUNDS = sized(3, 1);
const PROBE_ROWS = sized(10_000, 200);
const WORKER_COUNTS = sized([1, 2, 4, 8], [1, 2]);
/** Rows per drain batch (our batch_size) and per call when a backlog is written. */
const CHUNK = 500;

const silent = { debug() {}, info() {}, warn: benchLogger.warn, error: benchLogger.error };
const round = (x: number, digits = 2) => Math.round(x * 10 ** digits) / 10 ** digits;
const median = (xs: readonly number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const scratch = makeTempDir("sqloutbox-bench-peers-");
let fresh = 0;
/** A new, empty directory for one measurement: every case starts on files of its own. */
function freshDir(): string {
  const dir = path.join(scratch.path, `${fresh++}`);
  fs.mkdirSync(dir);
  return dir;
}

function plainjobQueue(dir: string): Queue {
  return defineQueue({
    connection: bun(new Database(path.join(dir, "plainjob.db"), { strict: true })),
    logger: silent,
  });
}

// ── the producers ─────────────────────────────────────────────────────────────────────────────

/** What one measurement of one queue's producer case gives: a named figure set. */
type Figures = Record<string, number>;

interface ProducerCase {
  /** The line's labels (besides queue and api). */
  labels: Record<string, string | number>;
  /** Each queue's api name and its measurement on a fresh directory. */
  sides: Array<{ queue: string; api: string; measure: (dir: string) => Figures }>;
}

function single(op: () => void): Figures {
  const { sortedNs, totalNs } = timeCalls(op, SINGLE_OPS, WARMUP);
  return {
    p50_us: percentile(sortedNs, 0.5) / 1000,
    p99_us: percentile(sortedNs, 0.99) / 1000,
    ops_per_s: SINGLE_OPS / (totalNs / 1e9),
  };
}

function bulk(size: number, op: () => void): Figures {
  const calls = BULK_ITEMS / size;
  const { sortedNs, totalNs } = timeCalls(op, calls, Math.max(2, Math.ceil(calls / 20)));
  return { per_item_us: percentile(sortedNs, 0.5) / size / 1000, items_per_s: BULK_ITEMS / (totalNs / 1e9) };
}

/** Our producer on a fresh directory: `fn` given it, its queues closed after. */
function withProducer(dir: string, fn: (mw: SQLMiddleware) => Figures): Figures {
  try {
    return fn(new SQLMiddleware({ dbDir: dir }));
  } finally {
    closeSharedOutboxes();
  }
}

function withPlainjob(dir: string, fn: (queue: Queue) => Figures): Figures {
  const queue = plainjobQueue(dir);
  try {
    return fn(queue);
  } finally {
    queue.close();
  }
}

const producerCases: ProducerCase[] = [
  {
    labels: {},
    sides: [
      {
        queue: "sqloutbox",
        api: "push",
        measure: (dir) => withProducer(dir, (mw) => single(() => mw.push("orders", SQL, ARGS))),
      },
      {
        queue: "plainjob",
        api: "add",
        measure: (dir) => withPlainjob(dir, (q) => single(() => q.add("orders", { sql: SQL, args: ARGS }))),
      },
    ],
  },
  ...BULK_SIZES.map(
    (size): ProducerCase => ({
      labels: { batch_size: size },
      sides: [
        {
          queue: "sqloutbox",
          api: "pushMany",
          measure: (dir) => {
            const stmts = Array.from({ length: size }, () => [SQL, ARGS] as const);
            return withProducer(dir, (mw) => bulk(size, () => mw.pushMany("orders", stmts)));
          },
        },
        {
          queue: "plainjob",
          api: "addMany",
          measure: (dir) => {
            const jobs = Array.from({ length: size }, () => ({ sql: SQL, args: ARGS }));
            return withPlainjob(dir, (q) => bulk(size, () => q.addMany("orders", jobs)));
          },
        },
        {
          queue: "sqloutbox",
          api: "enqueueBatch",
          measure: (dir) => {
            const items = Array.from({ length: size }, () => ({ tag: SQL, payload: encodeArgs(ARGS) }));
            const outbox = new Outbox(path.join(dir, "orders.db"), "orders");
            try {
              return bulk(size, () => outbox.enqueueBatch(items, "SQLMiddleware"));
            } finally {
              outbox.close();
            }
          },
        },
      ],
    }),
  ),
];

/** Every producer case, alternated round by round; the medians, one line per queue and api. */
function producers(): Map<string, Figures> {
  const got = new Map<string, Figures[]>();
  const keyOf = (c: ProducerCase, side: ProducerCase["sides"][number]) =>
    JSON.stringify({ queue: side.queue, api: side.api, ...c.labels });
  for (let r = 0; r < ROUNDS; r++) {
    for (const c of producerCases) {
      const sides = r % 2 === 0 ? c.sides : [...c.sides].reverse();
      for (const side of sides) {
        const key = keyOf(c, side);
        got.set(key, [...(got.get(key) ?? []), side.measure(freshDir())]);
      }
    }
  }
  const medians = new Map<string, Figures>();
  for (const c of producerCases) {
    for (const side of c.sides) {
      const rounds = got.get(keyOf(c, side))!;
      const figures: Figures = {};
      for (const name of Object.keys(rounds[0]!)) figures[name] = median(rounds.map((f) => f[name]!));
      medians.set(`${side.api} ${c.labels.batch_size ?? ""}`.trim(), figures);
      const bench = c.labels.batch_size === undefined ? "peers-single" : "peers-bulk";
      const shown = Object.fromEntries(
        Object.entries(figures).map(([k, v]) => [k, k.endsWith("_per_s") ? Math.round(v) : round(v, 3)]),
      );
      console.log(JSON.stringify({ bench, queue: side.queue, api: side.api, ...c.labels, ...shown }));
    }
  }
  return medians;
}

// ── the drains ────────────────────────────────────────────────────────────────────────────────

type DrainTarget = "null" | "sqlite";

/** Accepts everything at once: what is left is the drain's own work (read, decode, settle). */
const nullWriter: OutboxWriter = {
  dialect: "sqlite",
  writeBatch: async (stmts) => stmts.map(() => ({ ok: true as const, rowsAffected: 1 })),
};

/** The remote file of the sqlite target, with the table of the statement. */
function remoteFile(dir: string): string {
  const file = path.join(dir, "remote.db");
  const db = new Database(file, { create: true });
  db.run("PRAGMA journal_mode = WAL");
  db.run("CREATE TABLE orders (id INTEGER, total REAL, note TEXT)");
  db.close();
  return file;
}

function remoteCount(file: string): number {
  const db = new Database(file, { readonly: true });
  try {
    return db.query<{ n: number }, []>("SELECT count(*) AS n FROM orders").get()!.n;
  } finally {
    db.close();
  }
}

/** Our drain of `rows` items pushed beforehand (pushMany, CHUNK a call), to `target`: seconds. */
async function ourDrain(target: DrainTarget, rows: number): Promise<number> {
  const dir = freshDir();
  const mw = new SQLMiddleware({ dbDir: path.join(dir, "queue") });
  const stmts = Array.from({ length: CHUNK }, () => [SQL, ARGS] as const);
  for (let i = 0; i < rows; i += CHUNK) mw.pushMany("orders", stmts.slice(0, Math.min(CHUNK, rows - i)));
  closeSharedOutboxes();
  const remote = target === "sqlite" ? remoteFile(dir) : null;
  const config = defineConfig({
    app: {
      bench: {
        dbDir: path.join(dir, "queue"),
        batchSize: CHUNK,
        flushInterval: 0.005,
        tableFlushThreshold: 1,
        tableMaxWait: 0,
        db: {
          remote: { writer: "sqlite", connection: { path: remote ?? path.join(dir, "unused.db") }, tables: ["orders"] },
        },
      },
    },
  });
  const writer = remote === null ? nullWriter : createWriter("sqlite", { path: remote });
  const svc = new OutboxSyncService(config, { "bench.remote": writer }, { logger: benchLogger });
  const start = performance.now();
  await svc.start();
  while (svc.totalPending() > 0) await Bun.sleep(5);
  const seconds = (performance.now() - start) / 1000;
  await svc.stop();
  if (remote !== null && remoteCount(remote) !== rows)
    throw new Error(`our drain landed ${remoteCount(remote)} of ${rows} rows`);
  return seconds;
}

/** plainjob's workers (`workers` of them, one queue) on `rows` items added beforehand (addMany, CHUNK a call): seconds. */
async function plainjobDrain(target: DrainTarget, rows: number, workers: number): Promise<number> {
  const dir = freshDir();
  const queue = plainjobQueue(dir);
  const jobs = Array.from({ length: CHUNK }, () => ({ sql: SQL, args: ARGS }));
  for (let i = 0; i < rows; i += CHUNK) queue.addMany("orders", jobs.slice(0, Math.min(CHUNK, rows - i)));
  const remote = target === "sqlite" ? new Database(remoteFile(dir)) : null;
  remote?.run("PRAGMA busy_timeout = 5000"); // as the sqlite writer opens its file
  let done = 0;
  let finished: () => void = () => {};
  const allDone = new Promise<void>((resolve) => (finished = resolve));
  const handle = (job: { data: string }) => {
    const { sql, args } = JSON.parse(job.data) as { sql: string; args: Array<string | number> };
    remote?.query(sql).run(...args);
    if (++done === rows) finished();
  };
  const running = Array.from({ length: workers }, () =>
    defineWorker("orders", handle, { queue, logger: silent, pollIntervall: 5 }),
  );
  const start = performance.now();
  const loops = running.map((w) => w.start());
  await allDone;
  const seconds = (performance.now() - start) / 1000;
  await Promise.all(running.map((w) => w.stop()));
  await Promise.all(loops);
  queue.close();
  if (remote !== null) {
    const landed = remote.query<{ n: number }, []>("SELECT count(*) AS n FROM orders").get()!.n;
    remote.close();
    if (landed !== rows) throw new Error(`plainjob's workers landed ${landed} of ${rows} rows`);
  }
  return seconds;
}

/** Both drains on each target: plainjob's best worker count found on a probe, then DRAIN_ROUNDS alternated rounds. */
async function drains(): Promise<Map<string, number>> {
  const rates = new Map<string, number>();
  for (const target of ["null", "sqlite"] as const) {
    const probe: Array<{ workers: number; seconds: number }> = [];
    for (const workers of WORKER_COUNTS)
      probe.push({ workers, seconds: await plainjobDrain(target, PROBE_ROWS, workers) });
    const best = probe.reduce((a, b) => (b.seconds < a.seconds ? b : a)).workers;
    const ours: number[] = [];
    const theirs: number[] = [];
    for (let r = 0; r < DRAIN_ROUNDS; r++) {
      if (r % 2 === 0) {
        ours.push(await ourDrain(target, DRAIN_ROWS));
        theirs.push(await plainjobDrain(target, DRAIN_ROWS, best));
      } else {
        theirs.push(await plainjobDrain(target, DRAIN_ROWS, best));
        ours.push(await ourDrain(target, DRAIN_ROWS));
      }
    }
    const ourRate = DRAIN_ROWS / median(ours);
    const theirRate = DRAIN_ROWS / median(theirs);
    rates.set(`sqloutbox ${target}`, ourRate);
    rates.set(`plainjob ${target}`, theirRate);
    const line = { bench: "peers-drain", target, rows: DRAIN_ROWS };
    console.log(JSON.stringify({ ...line, queue: "sqloutbox", rows_per_s: Math.round(ourRate) }));
    console.log(JSON.stringify({ ...line, queue: "plainjob", rows_per_s: Math.round(theirRate), workers: best }));
  }
  return rates;
}

// ── the ratios ────────────────────────────────────────────────────────────────────────────────

function ratios(p: Map<string, Figures> | null, d: Map<string, number> | null): void {
  const line = (c: string, ours: number, theirs: number) =>
    console.log(JSON.stringify({ bench: "peers-ratio", case: c, sqloutbox_vs_plainjob: round(ours / theirs, 3) }));
  if (p !== null) {
    line("push vs add p50", p.get("push")!.p50_us!, p.get("add")!.p50_us!);
    line("push vs add p99", p.get("push")!.p99_us!, p.get("add")!.p99_us!);
    for (const size of BULK_SIZES)
      line(
        `pushMany vs addMany ${size}`,
        p.get(`pushMany ${size}`)!.per_item_us!,
        p.get(`addMany ${size}`)!.per_item_us!,
      );
  }
  if (d !== null)
    for (const target of ["null", "sqlite"])
      line(`drain ${target}`, d.get(`plainjob ${target}`)!, d.get(`sqloutbox ${target}`)!); // rates: time is 1/rate
  if (p !== null) {
    const vs = p.get("pushMany 500")!.per_item_us! / p.get("enqueueBatch 500")!.per_item_us!;
    console.log(
      JSON.stringify({ bench: "peers-ratio", case: "pushMany vs enqueueBatch 500", vs_enqueue_batch: round(vs, 3) }),
    );
  }
}

// Arguments pick lines: producers drains (none: both).
const only = process.argv.slice(2);
try {
  const p = only.length === 0 || only.includes("producers") ? producers() : null;
  const d = only.length === 0 || only.includes("drains") ? await drains() : null;
  ratios(p, d);
} finally {
  closeSharedOutboxes();
  scratch.cleanup();
}
