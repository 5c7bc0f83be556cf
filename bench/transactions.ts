// Transactions (`bun run bench:transactions [push|app|wal|groups …]`), one JSON line per figure:
// {"bench":"push-in-tx","case":"raw-insert"|"sqlite-alone"|"push","p50_us":…,"p99_us":…}   inside one open
//   transaction of the application's own database (BEGIN IMMEDIATE, 1 000 statements), the cost of
//   one plain INSERT of the same text into an application table ("raw-insert"), of SQLite alone
//   writing a push's row (its columns, values and indexes) into a copy of outbox_queue
//   ("sqlite-alone"), and of one outbox push; then {"bench":"push-in-tx","push_vs_raw":…,
//   "push_vs_sqlite_alone":…} (targets ≤ 2.0 and ≤ 1.3).
// {"bench":"app-writes","drain":false|true,"tx":…,"p50_ms":…,"p99_ms":…,"busy_errors":…}   the
//   application's transactions (its own UPDATE + a push, BEGIN IMMEDIATE … COMMIT, busy_timeout
//   5 s) with no drain, then with `sqloutbox runservice` delivering the same file at full speed
//   from a process of its own; then {"bench":"app-writes","p99_with_vs_without":…} (target ≤ 2).
//   The drain's line adds "lock_hold_p99_ms" and "lock_holds": its write-lock holds on the file,
//   from its own sqloutbox_local_write_lock_seconds scraped once the run is over (the p99 as
//   Prometheus's histogram_quantile interpolates it in its bucket; target ≤ 0.5).
// {"bench":"wal","seconds":…,"events_per_s":…,"max_wal_bytes":…,"delivered":…}   an application
//   pushing 2 000 events/s into its own database for BENCH_WAL_SECONDS (default 300) while the drain
//   delivers: the WAL's largest size, sampled every 100 ms.
// {"bench":"groups","group":1|2|10,"rows":…,"rows_per_s":…}   a 100 000-row backlog of single rows,
//   of groups of 2 and of 10, drained to a SQLite file (batch_size 500) in this process, the same
//   run; then {"bench":"groups","group":…,"vs_single":…} (target ≥ 0.8).
import { Database } from "bun:sqlite";
import { mkdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { defineConfig } from "../src/config/define.ts";
import { OutboxSyncService } from "../src/drain/service.ts";
import { SQLMiddleware, closeSharedOutboxes } from "../src/outbox/middleware.ts";
import { createWriter } from "../src/writers/registry.ts";
import { parsePrometheusText } from "../test/support/prom-text.ts";
import { makeTempDir } from "../test/support/tmp.ts";
import { benchLogger, sized } from "./support/smoke.ts";
import { percentile } from "./support/timing.ts";

const round = (x: number, digits = 2) => Math.round(x * 10 ** digits) / 10 ** digits;
const line = (o: Record<string, unknown>) => console.log(JSON.stringify(o));
const SQL_TEXT = "INSERT INTO credits (account, amount, note) VALUES (?, ?, ?)";
const ARGS = (i: number) => [i, i * 1.5, "a short note"];

/** An application database in WAL with an accounts table. */
function appDatabase(file: string): Database {
  const db = new Database(file, { create: true });
  db.run("PRAGMA journal_mode = WAL");
  db.run("PRAGMA synchronous = NORMAL");
  db.run("PRAGMA busy_timeout = 5000");
  db.run("CREATE TABLE IF NOT EXISTS accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)");
  db.run("INSERT OR IGNORE INTO accounts VALUES (1, 0)");
  return db;
}

function pushInTransaction(): void {
  const dir = makeTempDir("sqloutbox-bench-tx-");
  const db = appDatabase(join(dir.path, "app.db"));
  db.run(
    "CREATE TABLE raw_events (id INTEGER PRIMARY KEY, created_at TEXT NOT NULL, tag TEXT NOT NULL, payload TEXT NOT NULL)",
  );
  const outbox = new SQLMiddleware({ database: db });
  outbox.outbox("credits");
  const raw = db.prepare("INSERT INTO raw_events (created_at, tag, payload) VALUES (?, ?, ?)");
  // SQLite alone writing a push's row — the same columns, values and indexes — into a copy of outbox_queue.
  const queueDdl = db.query<{ sql: string }, []>("SELECT sql FROM sqlite_schema WHERE tbl_name = 'outbox_queue'").all();
  for (const { sql } of queueDdl)
    db.run(sql.replace(/outbox_queue/g, "queue_copy").replace(/ INDEX (\w+)/, " INDEX copy_$1"));
  const copy = db.prepare(
    "INSERT INTO queue_copy (seq, ord, grp, created_at, namespace, source, tag, payload, prev_seq, traceparent, tracestate, lane_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
  );
  let copySeq = 0;
  const ROUNDS = sized(30, 2);
  const PER = sized(1_000, 100);
  const samples = { raw: [] as number[], alone: [] as number[], push: [] as number[] };
  for (let round_ = 0; round_ < ROUNDS + 3; round_++) {
    const keep = round_ >= 3; // warm-up rounds
    db.run("BEGIN IMMEDIATE");
    for (let i = 0; i < PER; i++) {
      const t = Bun.nanoseconds();
      raw.run(new Date().toISOString(), SQL_TEXT, JSON.stringify(ARGS(i)));
      if (keep) samples.raw.push(Bun.nanoseconds() - t);
    }
    const group = copySeq + 1;
    for (let i = 0; i < PER; i++) {
      const t = Bun.nanoseconds();
      copySeq += 1;
      const at = new Date().toISOString();
      copy.run(
        copySeq,
        copySeq,
        group,
        at,
        "credits",
        "SQLMiddleware",
        SQL_TEXT,
        JSON.stringify(ARGS(i)),
        copySeq - 1,
        null,
        null,
        null,
      );
      if (keep) samples.alone.push(Bun.nanoseconds() - t);
    }
    db.run("COMMIT");
    outbox.transaction(() => {
      for (let i = 0; i < PER; i++) {
        const t = Bun.nanoseconds();
        outbox.push("credits", SQL_TEXT, ARGS(i));
        if (keep) samples.push.push(Bun.nanoseconds() - t);
      }
    });
  }
  const p50 = { raw: 0, alone: 0, push: 0 };
  const cases = { raw: "raw-insert", alone: "sqlite-alone", push: "push" } as const;
  for (const name of ["raw", "alone", "push"] as const) {
    const sorted = samples[name].sort((a, b) => a - b);
    p50[name] = percentile(sorted, 0.5) / 1000;
    line({
      bench: "push-in-tx",
      case: cases[name],
      p50_us: round(p50[name]),
      p99_us: round(percentile(sorted, 0.99) / 1000),
    });
  }
  line({
    bench: "push-in-tx",
    push_vs_raw: round(p50.push / p50.raw),
    push_vs_sqlite_alone: round(p50.push / p50.alone),
  });
  raw.finalize();
  copy.finalize();
  closeSharedOutboxes();
  db.close();
  dir.cleanup();
}

/** A drain startDrain started, and where it serves /metrics. */
interface Drain {
  process: Bun.Subprocess;
  metricsUrl: string;
}

/** Starts `sqloutbox runservice` on `dbFile` → a SQLite file; resolves once it says it started. */
async function startDrain(dir: string, dbFile: string, table: string): Promise<Drain> {
  const remote = new Database(join(dir, "remote.db"), { create: true });
  remote.run("PRAGMA journal_mode = WAL");
  remote.run(`CREATE TABLE IF NOT EXISTS ${table} (account INTEGER, amount REAL, note TEXT)`);
  remote.close();
  const toml = join(dir, "outbox.toml");
  writeFileSync(
    toml,
    `[app.app]\ndb_file = "${dbFile}"\nflush_interval = 0.005\ntable_flush_threshold = 1\ntable_max_wait = 0\n[app.app.db.r]\nwriter = "sqlite"\ntables = ["${table}"]\n[app.app.db.r.connection]\npath = "${join(dir, "remote.db")}"\n`,
  );
  const port = freePort();
  const drain = Bun.spawn(
    [
      "bun",
      join(import.meta.dir, "../src/cli/bin.ts"),
      "runservice",
      "--config",
      toml,
      "--log-level",
      "warn",
      "--metrics-addr",
      `127.0.0.1:${port}`,
    ],
    { stdout: "pipe", stderr: "inherit" },
  );
  await Bun.sleep(sized(1_000, 500)); // started and set up (its state file appears later)
  if (drain.exitCode !== null) throw new Error(`sqloutbox runservice exited ${drain.exitCode} at start`);
  return { process: drain, metricsUrl: `http://127.0.0.1:${port}/metrics` };
}

/** A TCP port nothing listens on now. */
function freePort(): number {
  const probe = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const { port } = probe;
  probe.stop(true);
  return port;
}

/** The drain's write-lock holds on `file` so far, from its /metrics: how many, and their p99 (ms) as histogram_quantile interpolates it. */
async function lockHolds(drain: Drain, file: string): Promise<{ holds: number; p99Ms: number | null }> {
  const scrape = parsePrometheusText(await (await fetch(drain.metricsUrl)).text());
  const buckets = scrape
    .all("sqloutbox_local_write_lock_seconds_bucket", { file })
    .map((b) => ({ le: Number(b.labels.le), count: b.value }))
    .sort((a, b) => a.le - b.le);
  const total = buckets.at(-1)?.count ?? 0;
  if (total === 0) return { holds: 0, p99Ms: null };
  const rank = 0.99 * total;
  let below = { le: 0, count: 0 };
  for (const b of buckets) {
    if (b.count >= rank) {
      // Beyond the last finite bucket there is nothing to interpolate to: its bound, as Prometheus says.
      if (!Number.isFinite(b.le)) return { holds: total, p99Ms: below.le * 1000 };
      const p99 = below.le + ((b.le - below.le) * (rank - below.count)) / (b.count - below.count);
      return { holds: total, p99Ms: p99 * 1000 };
    }
    below = b;
  }
  return { holds: total, p99Ms: null };
}

/** Stops a drain startDrain started; it must leave as SIGTERM asks (exit 0), or the run measured a broken drain. */
async function stopDrain(drain: Drain): Promise<void> {
  drain.process.kill("SIGTERM");
  const code = await drain.process.exited;
  if (code !== 0) throw new Error(`sqloutbox runservice exited ${code} on SIGTERM`);
}

async function appWrites(): Promise<void> {
  const dir = makeTempDir("sqloutbox-bench-app-");
  const file = join(dir.path, "app.db");
  const db = appDatabase(file);
  const outbox = new SQLMiddleware({ database: db });
  outbox.outbox("credits");
  const TX = sized(20_000, 200);
  const pace = Number(process.env.BENCH_APP_TX_PER_S ?? 0); // 0: flat out
  const run = async (drain: Drain | null) => {
    const samples: number[] = [];
    let busy = 0;
    const started = performance.now();
    for (let i = 0; i < TX; i++) {
      if (pace > 0 && i % 20 === 0) {
        const due = started + (i / pace) * 1000;
        if (performance.now() < due) await Bun.sleep(due - performance.now());
      }
      const t = Bun.nanoseconds();
      try {
        outbox.transaction(() => {
          db.run("UPDATE accounts SET balance = balance + 1 WHERE id = 1");
          outbox.push("credits", SQL_TEXT, ARGS(i));
        });
      } catch (error) {
        if (/BUSY|locked/i.test(String(error))) busy += 1;
        else throw error;
      }
      samples.push(Bun.nanoseconds() - t);
    }
    samples.sort((a, b) => a - b);
    const p99 = percentile(samples, 0.99) / 1e6;
    const holds = drain === null ? null : await lockHolds(drain, file);
    line({
      bench: "app-writes",
      drain: drain !== null,
      tx: TX,
      tx_per_s: pace || "flat out",
      p50_ms: round(percentile(samples, 0.5) / 1e6, 3),
      p99_ms: round(p99, 3),
      busy_errors: busy,
      ...(holds === null
        ? {}
        : { lock_hold_p99_ms: holds.p99Ms === null ? null : round(holds.p99Ms, 3), lock_holds: holds.holds }),
    });
    return p99;
  };
  const without = await run(null);
  const drain = await startDrain(dir.path, file, "credits");
  const withDrain = await run(drain);
  await stopDrain(drain);
  line({ bench: "app-writes", p99_with_vs_without: round(withDrain / without) });
  closeSharedOutboxes();
  db.close();
  dir.cleanup();
}

async function walBound(): Promise<void> {
  const seconds = Number(process.env.BENCH_WAL_SECONDS ?? sized(300, 1));
  const rate = 2_000;
  const dir = makeTempDir("sqloutbox-bench-wal-");
  const file = join(dir.path, "app.db");
  const db = appDatabase(file);
  const outbox = new SQLMiddleware({ database: db });
  outbox.outbox("credits");
  const drain = await startDrain(dir.path, file, "credits");
  const wal = () => {
    try {
      return statSync(`${file}-wal`).size;
    } catch {
      return 0;
    }
  };
  let max = 0;
  let pushed = 0;
  const started = performance.now();
  let nextSample = started;
  // 20 events every 10 ms, in transactions of 4 (the application's rows with their events).
  while (performance.now() - started < seconds * 1000) {
    const due = Math.floor(((performance.now() - started) / 1000) * rate);
    while (pushed < due) {
      outbox.transaction(() => {
        db.run("UPDATE accounts SET balance = balance + 1 WHERE id = 1");
        for (let k = 0; k < 4 && pushed < due; k++) outbox.push("credits", SQL_TEXT, ARGS(pushed++));
      });
    }
    if (performance.now() >= nextSample) {
      max = Math.max(max, wal());
      nextSample += 100;
    }
    await Bun.sleep(10);
  }
  await Bun.sleep(sized(2_000, 500)); // let the drain catch up
  await stopDrain(drain);
  const remote = new Database(join(dir.path, "remote.db"), { readonly: true });
  const delivered = remote.query<{ n: number }, []>("SELECT count(*) AS n FROM credits").get()!.n;
  remote.close();
  line({ bench: "wal", seconds, events_per_s: rate, pushed, max_wal_bytes: max, delivered });
  closeSharedOutboxes();
  db.close();
  dir.cleanup();
}

async function groups(): Promise<void> {
  const ROWS = sized(100_000, 600);
  /** Rows per producer transaction: ROWS is a multiple, and so of every group size. */
  const CHUNK = sized(1_000, 100);
  const results: Array<{ group: number; rate: number }> = [];
  for (const size of [1, 2, 10]) {
    const dir = makeTempDir("sqloutbox-bench-groups-");
    mkdirSync(join(dir.path, "outbox"));
    const producer = new SQLMiddleware({ dbDir: join(dir.path, "outbox") });
    const q = producer.outbox("credits");
    for (let i = 0; i < ROWS; i += CHUNK) {
      if (size === 1)
        q.enqueueBatch(
          Array.from({ length: CHUNK }, (_, k) => ({ tag: SQL_TEXT, payload: JSON.stringify(ARGS(i + k)) })),
          "",
          { grouped: false },
        );
      else
        q.transaction(() => {
          for (let k = 0; k < CHUNK; k += size)
            q.enqueueBatch(
              Array.from({ length: size }, (_, j) => ({ tag: SQL_TEXT, payload: JSON.stringify(ARGS(i + k + j)) })),
            );
        });
    }
    closeSharedOutboxes();
    const remote = new Database(join(dir.path, "remote.db"), { create: true });
    remote.run("PRAGMA journal_mode = WAL");
    remote.run("CREATE TABLE credits (account INTEGER, amount REAL, note TEXT)");
    remote.close();
    const config = defineConfig({
      app: {
        app: {
          dbDir: join(dir.path, "outbox"),
          flushInterval: 0.005,
          tableFlushThreshold: 1,
          tableMaxWait: 0,
          db: { r: { writer: "sqlite", connection: { path: join(dir.path, "remote.db") }, tables: ["credits"] } },
        },
      },
    });
    const svc = new OutboxSyncService(
      config,
      { "app.r": createWriter("sqlite", { path: join(dir.path, "remote.db") }) },
      { logger: benchLogger },
    );
    await svc.runOnce(); // setup
    const started = performance.now();
    while (svc.totalPending() > 0) await svc.runOnce();
    const rate = ROWS / ((performance.now() - started) / 1000);
    await svc.stop();
    line({ bench: "groups", group: size, rows: ROWS, rows_per_s: Math.round(rate) });
    results.push({ group: size, rate });
    dir.cleanup();
  }
  const single = results[0]!.rate;
  for (const r of results.slice(1)) line({ bench: "groups", group: r.group, vs_single: round(r.rate / single) });
}

const which = new Set(process.argv.slice(2));
const all = which.size === 0;
if (all || which.has("push")) pushInTransaction();
if (all || which.has("app")) await appWrites();
if (all || which.has("groups")) await groups();
if (all || which.has("wal")) await walBound();
