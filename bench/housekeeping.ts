// Housekeeping at scale (`bun run bench:housekeeping [prune|bytes|backlog …]`), one JSON line each:
// {"bench":"prune","log_rows":4000000,"prune_ms":…,"push_p99_us":…,"push_max_us":…}
//   a file of the reference's layout whose per-row sync log holds 4 M delivered rows, all past
//   retention, pruned by a running drain (cleanup_every = 1) while a producer process pushes 2 000
//   events/s into it: the producer's worst push (target ≤ 20 ms) and how long the prune took.
// {"bench":"bytes-per-row","rows":…,"seconds":…,"log_bytes":…,"bytes_per_row":…}   the drain
//   delivering 2 000 events/s for BENCH_BYTES_SECONDS (default 150) into a SQLite file: the
//   delivered log's size (its table and index, by dbstat) per delivered row (target ≤ 1).
// {"bench":"backlog","rows":1000000,"rows_per_s":…,"peak_rss_mb":…,"peak_file_mb":…,"file_mb_60s_after":…,"after_vs_peak":…}
//   a 1 000 000-row backlog in one table drained by `sqloutbox runservice` (its own process: RSS
//   is the drain's) into a SQLite file; the queue file's size at its peak and 60 s after it drained
//   (target ≤ 0.2×), peak RSS (target ≤ 120 MB).
import { Database } from "bun:sqlite";
import { mkdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { defineConfig } from "../src/config/define.ts";
import { OutboxSyncService } from "../src/drain/service.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { createWriter } from "../src/writers/registry.ts";
import { buildReferenceFile } from "../test/support/reference-db.ts";
import { makeTempDir } from "../test/support/tmp.ts";
import { benchLogger, sized } from "./support/smoke.ts";

const line = (o: Record<string, unknown>) => console.log(JSON.stringify(o));
const mb = (bytes: number) => Math.round((bytes / 1024 / 1024) * 10) / 10;

async function prune(): Promise<void> {
  const LOG_ROWS = sized(4_000_000, 400);
  const dir = makeTempDir("sqloutbox-bench-prune-");
  const file = join(dir.path, "t.db");
  buildReferenceFile(file);
  const db = new Database(file);
  db.run("DELETE FROM outbox_queue");
  db.run("DELETE FROM outbox_sync_log");
  // 4 M delivered rows, a year old, in the reference's per-row log.
  db.run(`INSERT INTO outbox_sync_log (seq, namespace, synced_at)
    WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < ${LOG_ROWS}) SELECT n, 't', '2025-01-01T00:00:00.000000+00:00' FROM s`);
  db.run(`UPDATE sqlite_sequence SET seq = ${LOG_ROWS} WHERE name = 'outbox_queue'`);
  db.close();
  new Outbox(file, "t").close(); // migrates it (our columns, the pending counter)
  const remote = new Database(join(dir.path, "remote.db"), { create: true });
  remote.run("PRAGMA journal_mode = WAL");
  remote.run("CREATE TABLE t (id INTEGER)");
  remote.close();
  // The drain prunes after every batch (cleanup_every = 1), to one day, while it delivers the producer's rows.
  const config = defineConfig({
    app: {
      app: {
        dbDir: dir.path,
        cleanupEvery: 1,
        retainLogDays: 1,
        flushInterval: 0.01,
        tableFlushThreshold: 1,
        tableMaxWait: 0,
        db: { r: { writer: "sqlite", connection: { path: join(dir.path, "remote.db") }, tables: ["t"] } },
      },
    },
  });
  const svc = new OutboxSyncService(
    config,
    { "app.r": createWriter("sqlite", { path: join(dir.path, "remote.db") }) },
    { logger: benchLogger },
  );
  const stopFile = join(dir.path, "stop");
  const producer = Bun.spawn(
    [
      "bun",
      join(import.meta.dir, "children/push-latency.ts"),
      JSON.stringify({ file, ns: "t", stopFile, perSecond: 2_000 }),
    ],
    { stdout: "pipe", stderr: "inherit" },
  );
  await Bun.sleep(300);
  const started = performance.now();
  await svc.start();
  const log = new Database(file, { readonly: true });
  // The oldest entry left, by the log's index (the prune goes oldest first): a count of the old
  // entries would scan the 4 M-row log on the drain's own thread (this process) and keep a read
  // snapshot open almost all the time, so the WAL could never be reset.
  const oldest = log.query<{ at: string }, []>(
    "SELECT synced_at AS at FROM outbox_sync_log WHERE namespace = 't' ORDER BY seq LIMIT 1",
  );
  while ((oldest.get()?.at ?? "9") < "2026") await Bun.sleep(100);
  const pruneMs = Math.round(performance.now() - started);
  log.close();
  writeFileSync(stopFile, "");
  const printed = await new Response(producer.stdout).text();
  if ((await producer.exited) !== 0) throw new Error(`the producer exited ${producer.exitCode}`);
  const pushes = JSON.parse(printed.trim()) as { p99_us: number; max_us: number; pushes: number };
  await svc.stop();
  line({
    bench: "prune",
    log_rows: LOG_ROWS,
    prune_ms: pruneMs,
    pushes: pushes.pushes,
    push_p99_us: pushes.p99_us,
    push_max_us: pushes.max_us,
  });
  dir.cleanup();
}

async function bytesPerRow(): Promise<void> {
  const seconds = Number(process.env.BENCH_BYTES_SECONDS ?? sized(150, 1));
  const rate = 2_000;
  const dir = makeTempDir("sqloutbox-bench-bytes-");
  mkdirSync(join(dir.path, "outbox"));
  const remote = new Database(join(dir.path, "remote.db"), { create: true });
  remote.run("PRAGMA journal_mode = WAL");
  remote.run("CREATE TABLE t (id INTEGER)");
  remote.close();
  const config = defineConfig({
    app: {
      app: {
        dbDir: join(dir.path, "outbox"),
        flushInterval: 0.05,
        tableFlushThreshold: 1,
        tableMaxWait: 0,
        db: { r: { writer: "sqlite", connection: { path: join(dir.path, "remote.db") }, tables: ["t"] } },
      },
    },
  });
  const svc = new OutboxSyncService(
    config,
    { "app.r": createWriter("sqlite", { path: join(dir.path, "remote.db") }) },
    { logger: benchLogger },
  );
  await svc.start();
  const q = new Outbox(join(dir.path, "outbox/t.db"), "t");
  const started = performance.now();
  let pushed = 0;
  while (performance.now() - started < seconds * 1000) {
    const due = Math.floor(((performance.now() - started) / 1000) * rate);
    while (pushed < due) q.enqueue("INSERT INTO t (id) VALUES (?)", `[${pushed++}]`);
    await Bun.sleep(5);
  }
  while (q.pendingCount() > 0) await Bun.sleep(20);
  await svc.stop();
  const log = q.health();
  const db = new Database(join(dir.path, "outbox/t.db"), { readonly: true });
  const bytes = db
    .query<{ b: number }, []>("SELECT sum(pgsize) AS b FROM dbstat WHERE name IN ('outbox_delivered', 'idx_delivered')")
    .get()!.b;
  const ranges = db.query<{ n: number }, []>("SELECT count(*) AS n FROM outbox_delivered").get()!.n;
  db.close();
  // The log's pages are shared by many ranges: what a steady state keeps per row is its pages over the rows they log.
  line({
    bench: "bytes-per-row",
    rows: pushed,
    seconds,
    ranges,
    log_bytes: bytes,
    bytes_per_row: Math.round((bytes / pushed) * 10_000) / 10_000,
    last_delivered: log.lastDeliveredAt,
  });
  q.close();
  dir.cleanup();
}

async function backlog(): Promise<void> {
  const ROWS = sized(1_000_000, 500);
  const CHUNK = Math.min(5_000, ROWS);
  /** How long after the backlog drained its file is measured again (the file_mb_60s_after figure). */
  const AFTER_MS = sized(60_000, 500);
  const dir = makeTempDir("sqloutbox-bench-backlog-");
  const dbDir = join(dir.path, "outbox");
  mkdirSync(dbDir);
  const file = join(dbDir, "t.db");
  const q = new Outbox(file, "t");
  const note = "a row of a large backlog, with some text to make it realistic";
  for (let i = 0; i < ROWS; i += CHUNK)
    q.enqueueBatch(
      Array.from({ length: CHUNK }, (_, k) => ({
        tag: "INSERT INTO t (id, note) VALUES (?, ?)",
        payload: JSON.stringify([i + k, note]),
      })),
      "",
      { grouped: false },
    );
  q.close();
  const size = () =>
    statSync(file).size +
    (() => {
      try {
        return statSync(`${file}-wal`).size;
      } catch {
        return 0;
      }
    })();
  const remote = new Database(join(dir.path, "remote.db"), { create: true });
  remote.run("PRAGMA journal_mode = WAL");
  remote.run("CREATE TABLE t (id INTEGER, note TEXT)");
  remote.close();
  const toml = join(dir.path, "outbox.toml");
  writeFileSync(
    toml,
    `[app.app]\ndb_dir = "${dbDir}"\nflush_interval = 0.05\n[app.app.db.r]\nwriter = "sqlite"\ntables = ["t"]\n[app.app.db.r.connection]\npath = "${join(dir.path, "remote.db")}"\n`,
  );
  let peakFile = size();
  const drain = Bun.spawn(
    ["bun", join(import.meta.dir, "../src/cli/bin.ts"), "runservice", "--config", toml, "--log-level", "warn"],
    { stdout: "ignore", stderr: "inherit" },
  );
  const started = performance.now();
  let peakRss = 0;
  const check = new Database(join(dir.path, "remote.db"), { readonly: true });
  let delivered = 0;
  let doneAt = 0;
  while (doneAt === 0) {
    await Bun.sleep(200);
    const rss = Number((await Bun.$`ps -o rss= -p ${drain.pid}`.text()).trim()) * 1024;
    peakRss = Math.max(peakRss, rss);
    peakFile = Math.max(peakFile, size());
    delivered = check.query<{ n: number }, []>("SELECT count(*) AS n FROM t").get()!.n;
    if (delivered >= ROWS) doneAt = performance.now();
  }
  check.close();
  const rate = Math.round(ROWS / ((doneAt - started) / 1000));
  await Bun.sleep(AFTER_MS);
  const after = size();
  drain.kill("SIGTERM");
  if ((await drain.exited) !== 0) throw new Error(`sqloutbox runservice exited ${drain.exitCode} on SIGTERM`);
  line({
    bench: "backlog",
    rows: ROWS,
    rows_per_s: rate,
    peak_rss_mb: mb(peakRss),
    peak_file_mb: mb(peakFile),
    file_mb_60s_after: mb(after),
    after_vs_peak: Math.round((after / peakFile) * 100) / 100,
  });
  dir.cleanup();
}

const which = new Set(process.argv.slice(2));
const all = which.size === 0;
if (all || which.has("prune")) await prune();
if (all || which.has("bytes")) await bytesPerRow();
if (all || which.has("backlog")) await backlog();
