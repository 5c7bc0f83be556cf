// /metrics, /healthz and /readyz of a running `sqloutbox runservice --metrics-addr` against a real
// PostgreSQL: the values follow rows as they are produced, delivered, failed and dead-lettered, a
// missing remote table, an outage (a cut TCP proxy) and the fleet view of the delivery ledger.
import { expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import { serveOps } from "../src/ops/http.ts";
import { createDrainMetrics } from "../src/ops/metrics.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { cleanupsAfterEach } from "./support/cleanups.ts";
import { type CliDrain, startCliDrain } from "./support/cli-drain.ts";
import { parsePrometheusText, type Scrape } from "./support/prom-text.ts";
import { openRemote, type ServerRemote } from "./support/remote.ts";
import { describeSlow } from "./support/slow.ts";
import { pgBehindProxy } from "./support/tcp-proxy.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();

/** A temp dir and a fresh PostgreSQL database, both removed after the test. */
async function setup(): Promise<{ dir: TempDir; remote: ServerRemote }> {
  const dir = makeTempDir("sqloutbox-ops-");
  cleanups.push(() => dir.cleanup());
  return { dir, remote: await openRemote("postgres", { cleanups }) };
}

/** Writes outbox.toml for one app "shop" with one postgres target "shop.pg"; `tuning` lines go in [app.shop]. */
function writeConfig(
  dir: TempDir,
  url: string,
  tables: string[],
  tuning: string,
  name = "outbox.toml",
  dbDir = "queue",
  connectTimeoutS = 1,
): string {
  const file = dir.file(name);
  fs.writeFileSync(
    file,
    `[app.shop]
db_dir = "${dbDir}"
flush_interval = 0.05
outage_backoff_cap_minutes = 0.005
write_timeout = 3
${tuning}

[app.shop.db.pg]
writer = "postgres"
tables = ${JSON.stringify(tables)}

[app.shop.db.pg.connection]
url = "${url}"
connect_timeout = ${connectTimeoutS}
`,
  );
  return file;
}

/** Starts the drain and stops it (expecting exit 0) after the test. */
async function drain(config: string): Promise<CliDrain> {
  const d = await startCliDrain(config);
  cleanups.push(async () => {
    const code = await d.stop();
    if (code !== 0) throw new Error(`runservice exited ${code}:\n${d.log()}`);
  });
  return d;
}

/** Opens a table's queue as a producer would (closed after the test). */
function producer(dir: TempDir, table: string, dbDir = "queue"): Outbox {
  fs.mkdirSync(dir.file(dbDir), { recursive: true });
  const q = new Outbox(path.join(dir.file(dbDir), `${table}.db`), table);
  cleanups.push(() => q.close());
  return q;
}

function insert(q: Outbox, table: string, ids: number[]): void {
  q.enqueueBatch(
    ids.map((id) => ({ tag: `INSERT INTO ${table} (id) VALUES (?)`, payload: JSON.stringify([id]) })),
    "test",
    { grouped: false },
  );
}

const T = { app: "shop", target: "shop.pg" };
const orders = { ...T, table: "orders" };
/** sqloutbox_table_held summed over reasons: 1 while held, whatever the reason. */
const held = (s: Scrape, table: string) =>
  s.all("sqloutbox_table_held", { ...T, table }).reduce((n, x) => n + x.value, 0);

test("before the drain exists /healthz says starting (200) and /readyz 503; /metrics serves; other paths 404, other methods 405 with Allow", async () => {
  // Wired as runservice wires them, with no service yet: the moment between the listener and startup.
  const server = serveOps(
    { hostname: "127.0.0.1", port: 0 },
    () => null,
    createDrainMetrics(() => null),
  );
  cleanups.push(() => server.stop());
  expect(server.port).toBeGreaterThan(0);
  expect(server.url).toBe(`http://127.0.0.1:${server.port}`);
  const get = async (path: string, method = "GET") => {
    const res = await fetch(`${server.url}${path}`, { method });
    return { status: res.status, headers: res.headers, body: await res.text() };
  };

  const health = await get("/healthz");
  expect(health.status).toBe(200); // a liveness probe must not kill a slow start
  expect(JSON.parse(health.body)).toEqual({ status: "starting", targets: {} });
  const ready = await get("/readyz");
  expect(ready.status).toBe(503);
  expect(JSON.parse(ready.body)).toEqual({ status: "starting", targets: {} });

  const metrics = await get("/metrics");
  expect(metrics.status).toBe(200);
  expect(metrics.headers.get("content-type")).toStartWith("text/plain; version=0.0.4");
  const s = parsePrometheusText(metrics.body);
  expect(s.value("process_resident_memory_bytes")).toBeGreaterThan(0);
  expect(s.types.get("sqloutbox_pending_rows")).toBe("gauge"); // declared, no series until there are tables
  expect(s.all("sqloutbox_pending_rows")).toEqual([]);
  expect((await get("/metrics?x=1", "HEAD")).status).toBe(200);

  expect((await get("/nope")).status).toBe(404);
  const post = await get("/metrics", "POST");
  expect(post.status).toBe(405);
  expect(post.headers.get("allow")).toBe("GET, HEAD");
});

describeSlow(
  "a running drain scraped",
  "start runservice against PostgreSQL and scrape it through deliveries, failures and outages",
  () => {
    test("rows produced, delivered, failed and dead-lettered move the gauges, counters and batch histograms", async () => {
      const { dir, remote } = await setup();
      await remote.exec("CREATE TABLE orders (id BIGINT PRIMARY KEY CHECK (id > 0))");
      // Rows wait table_max_wait (nothing reaches the threshold), so a scrape sees them pending first.
      // backoff_unit_seconds 0.5: a failed head waits 1 s, then 2 s — long enough to be scraped at 1 and at 2 attempts.
      const config = writeConfig(
        dir,
        remote.url,
        ["orders"],
        "table_flush_threshold = 1000\ntable_max_wait = 2\nmax_attempts = 3\nbackoff_unit_seconds = 0.5",
      );
      const d = await drain(config);
      const q = producer(dir, "orders");

      let s = await d.until(
        (x) => x.value("sqloutbox_target_state", { ...T, state: "ok" }) === 1,
        "the target to be up",
      );
      expect(s.value("sqloutbox_target_up", T)).toBe(1);
      expect(s.value("sqloutbox_pending_rows", orders)).toBe(0);
      expect(s.value("sqloutbox_delivered_rows_total", orders)).toBe(0);
      expect(s.value("sqloutbox_oldest_pending_age_seconds", orders)).toBeUndefined(); // absent when nothing waits
      expect(s.value("sqloutbox_batch_rows_count", T)).toBeUndefined(); // no batch yet
      expect(s.types.get("sqloutbox_delivered_rows_total")).toBe("counter");
      expect(s.types.get("sqloutbox_batch_duration_seconds")).toBe("histogram");

      insert(
        q,
        "orders",
        Array.from({ length: 20 }, (_, i) => i + 1),
      );
      s = await d.scrape(); // at once: every scrape reads the queues afresh, however soon after the last one
      expect(s.value("sqloutbox_pending_rows", orders)).toBe(20);
      expect(s.value("sqloutbox_oldest_pending_age_seconds", orders)).toBeGreaterThanOrEqual(0);
      expect(s.value("sqloutbox_delivered_rows_total", orders)).toBe(0);

      s = await d.until(
        (x) =>
          x.value("sqloutbox_delivered_rows_total", orders) === 20 && x.value("sqloutbox_pending_rows", orders) === 0,
        "20 rows delivered",
      );
      expect(await remote.count("orders")).toBe(20);
      expect(s.value("sqloutbox_oldest_pending_age_seconds", orders)).toBeUndefined();
      // One batch of 20 rows (the ledger's fence is not a row), timed once.
      expect(s.value("sqloutbox_batch_rows_count", T)).toBe(1);
      expect(s.value("sqloutbox_batch_rows_sum", T)).toBe(20);
      expect(s.value("sqloutbox_batch_rows_bucket", { ...T, le: "10" })).toBe(0);
      expect(s.value("sqloutbox_batch_rows_bucket", { ...T, le: "25" })).toBe(1);
      expect(s.value("sqloutbox_batch_duration_seconds_count", T)).toBe(1);
      expect(s.value("sqloutbox_batch_duration_seconds_bucket", { ...T, le: "+Inf" })).toBe(1);
      expect(s.value("sqloutbox_batch_duration_seconds_sum", T)).toBeGreaterThan(0);
      expect(s.value("sqloutbox_target_last_success_age_seconds", T)).toBeGreaterThanOrEqual(0);
      expect(s.value("sqloutbox_loop_last_beat_age_seconds", T)).toBeLessThan(5);

      // A poison row between two good ones: the check constraint refuses it on every attempt.
      insert(q, "orders", [21, -1, 22]);
      // A head is charged before delivery (crash-loop protection), so a scrape during a healthy batch
      // may read 1 attempt too; the failure counter says the attempt failed.
      s = await d.until(
        (x) => x.value("sqloutbox_failed_rows_total", orders) === 1 && x.value("sqloutbox_head_attempts", orders) === 1,
        "the poison head failed once",
      );
      expect(s.value("sqloutbox_delivered_rows_total", orders)).toBe(21); // the row before it went first
      expect(s.value("sqloutbox_pending_rows", orders)).toBe(2); // the poison and the row it holds back
      s = await d.until(
        (x) => x.value("sqloutbox_failed_rows_total", orders) === 2 && x.value("sqloutbox_head_attempts", orders) === 2,
        "the poison head failed twice (stuck)",
      );
      expect(s.value("sqloutbox_dead_letters", orders)).toBe(0);

      s = await d.until(
        (x) =>
          x.value("sqloutbox_dead_lettered_rows_total", orders) === 1 &&
          x.value("sqloutbox_pending_rows", orders) === 0,
        "the poison dead-lettered and the row behind it delivered",
      );
      expect(s.value("sqloutbox_failed_rows_total", orders)).toBe(3);
      expect(s.value("sqloutbox_dead_letters", orders)).toBe(1);
      expect(s.value("sqloutbox_delivered_rows_total", orders)).toBe(22);
      expect(s.value("sqloutbox_head_attempts", orders)).toBe(0);
      expect(held(s, "orders")).toBe(0);
      expect(s.value("sqloutbox_target_consecutive_failures", T)).toBe(0); // the rows' fault, not the target's

      const health = await d.get("/healthz");
      expect(health.status).toBe(200);
      expect(health.contentType).toStartWith("application/json");
      expect(JSON.parse(health.body)).toEqual({ status: "ok", targets: { "shop.pg": { ok: true } } });
      expect(d.log()).toContain("dead-lettered seq");
    }, 40_000);

    test('a missing remote table is held (reason "remote schema"), charges nothing, and is released once the table exists — even across an outage', async () => {
      const { dir, remote } = await setup();
      await remote.exec("CREATE TABLE orders (id BIGINT)");
      const { proxy, url } = pgBehindProxy(remote, cleanups);
      const config = writeConfig(
        dir,
        url,
        ["orders", "late"],
        "table_flush_threshold = 1\nmax_attempts = 2\nbackoff_unit_seconds = 0.01",
      );
      const d = await drain(config);
      const late = { ...T, table: "late" };
      insert(producer(dir, "late"), "late", [1, 2, 3]);
      insert(producer(dir, "orders"), "orders", [1]);

      let s = await d.until(
        (x) => x.value("sqloutbox_table_held", { ...late, reason: "remote schema" }) === 1,
        "late held for its remote schema",
      );
      expect(s.value("sqloutbox_pending_rows", late)).toBe(3);
      expect(s.value("sqloutbox_head_attempts", late)).toBe(0); // nothing charged, nothing dead-lettered
      expect(s.value("sqloutbox_failed_rows_total", late)).toBe(0);
      expect(s.value("sqloutbox_dead_letters", late)).toBe(0);
      s = await d.until(
        (x) => x.value("sqloutbox_delivered_rows_total", orders) === 1,
        "the other table delivered meanwhile",
      );
      expect(held(s, "orders")).toBe(0);
      // Readiness is the target's: reachable and set up. A held table is for the alerts (SqloutboxTableHeld).
      expect((await d.get("/readyz")).status).toBe(200);

      // While the target is down the hold's retry time passes without a retry: the table is still
      // held (nothing changed on the remote), and the metric must keep saying so, as `status` does.
      proxy.cut();
      insert(producer(dir, "orders"), "orders", [2]); // the next batch finds the target down
      await d.until((x) => x.value("sqloutbox_target_up", T) === 0, "the target down");
      const until = Date.now() + 3000; // past the first schema retry (2 s)
      while (Date.now() < until) {
        s = await d.scrape();
        expect(held(s, "late")).toBe(1);
        await Bun.sleep(100);
      }
      proxy.restore();

      await remote.exec("CREATE TABLE late (id BIGINT)");
      s = await d.until(
        (x) => held(x, "late") === 0 && x.value("sqloutbox_delivered_rows_total", late) === 3,
        "late released and delivered",
      );
      expect(s.value("sqloutbox_table_held", { ...late, reason: "remote schema" })).toBeUndefined();
      expect(s.value("sqloutbox_pending_rows", late)).toBe(0);
      expect(s.value("sqloutbox_dead_lettered_rows_total", late)).toBe(0);
      expect(await remote.count("late")).toBe(3);
    }, 40_000);

    test("a target behind a cut TCP proxy reads down and not ready while the loop stays healthy, and recovers by itself", async () => {
      const { dir, remote } = await setup();
      await remote.exec("CREATE TABLE orders (id BIGINT)");
      const { proxy, url } = pgBehindProxy(remote, cleanups);
      const config = writeConfig(
        dir,
        url,
        ["orders"],
        "table_flush_threshold = 1\nmax_attempts = 2\nbackoff_unit_seconds = 0.01",
      );
      const d = await drain(config);
      const q = producer(dir, "orders");

      insert(q, "orders", [1, 2, 3, 4, 5]);
      let s = await d.until((x) => x.value("sqloutbox_delivered_rows_total", orders) === 5, "delivery before the cut");
      let ready = await d.get("/readyz");
      expect(ready.status).toBe(200);
      expect(JSON.parse(ready.body)).toEqual({ status: "ok", targets: { "shop.pg": { ok: true } } });

      proxy.cut();
      insert(q, "orders", [6, 7, 8, 9, 10]); // an idle target does not notice an outage: give it a batch
      s = await d.until(
        (x) =>
          x.value("sqloutbox_target_up", T) === 0 && (x.value("sqloutbox_target_consecutive_failures", T) ?? 0) > 0,
        "the target down",
      );
      expect(s.value("sqloutbox_target_state", { ...T, state: "outage" })).toBe(1);
      expect(s.value("sqloutbox_target_state", { ...T, state: "ok" })).toBe(0);
      expect(s.value("sqloutbox_target_state", { ...T, state: "misconfigured" })).toBe(0);
      expect(s.value("sqloutbox_pending_rows", orders)).toBe(5);
      expect(s.value("sqloutbox_failed_rows_total", orders)).toBe(0); // an outage charges no row
      expect(s.value("sqloutbox_dead_lettered_rows_total", orders)).toBe(0);
      s = await d.until(
        (x) => (x.value("sqloutbox_target_consecutive_failures", T) ?? 0) >= 2,
        "the target retried with backoff",
      );
      expect(s.value("sqloutbox_target_last_success_age_seconds", T)).toBeGreaterThan(0);

      ready = await d.get("/readyz");
      expect(ready.status).toBe(503);
      const why = JSON.parse(ready.body);
      expect(why.status).toBe("failing");
      expect(why.targets["shop.pg"].ok).toBe(false);
      expect(why.targets["shop.pg"].why).toStartWith("down: ");
      // The loop is alive (it polls while backing off): a liveness probe must not restart the drain for a remote's outage.
      const health = await d.get("/healthz");
      expect(health.status).toBe(200);
      expect(JSON.parse(health.body)).toEqual({ status: "ok", targets: { "shop.pg": { ok: true } } });
      expect(s.value("sqloutbox_loop_last_beat_age_seconds", T)).toBeLessThan(5);

      proxy.restore();
      s = await d.until(
        (x) =>
          x.value("sqloutbox_target_up", T) === 1 &&
          x.value("sqloutbox_delivered_rows_total", orders) === 10 &&
          x.value("sqloutbox_pending_rows", orders) === 0,
        "recovery after the restore",
      );
      expect(s.value("sqloutbox_target_state", { ...T, state: "ok" })).toBe(1);
      expect(s.value("sqloutbox_target_state", { ...T, state: "outage" })).toBe(0);
      expect(s.value("sqloutbox_target_consecutive_failures", T)).toBe(0);
      expect(s.value("sqloutbox_failed_rows_total", orders)).toBe(0);
      expect((await d.get("/readyz")).status).toBe(200);

      // And back to 503 on the next cut.
      proxy.cut();
      insert(q, "orders", [11]);
      await waitFor(
        async () => (ready = await d.get("/readyz")).status === 503,
        () => `/readyz to answer 503 while cut (it answered ${ready.status}); the drain logged:\n${d.log()}`,
      );
      expect((await d.get("/healthz")).status).toBe(200);
      proxy.restore();
      await d.until(
        (x) => x.value("sqloutbox_delivered_rows_total", orders) === 11,
        "the last row after the second restore",
      );
    }, 40_000);

    test("every drain of a fleet shows each origin's ledger row (through, age) once its fleet view is read", async () => {
      const { dir, remote } = await setup();
      await remote.exec("CREATE TABLE orders (id BIGINT)");
      const tuning = (label: string) => `table_flush_threshold = 1\norigin_label = "${label}"`;
      const web1 = await drain(writeConfig(dir, remote.url, ["orders"], tuning("web-1"), "web-1.toml", "q1"));
      const q1 = producer(dir, "orders", "q1");
      insert(q1, "orders", [1, 2, 3, 4]);
      await web1.until((x) => x.value("sqloutbox_delivered_rows_total", orders) === 4, "web-1 delivering");

      // web-2 starts after web-1 delivered: its first fleet read (before its own first batch) already has web-1's row.
      const q2 = producer(dir, "orders", "q2");
      insert(q2, "orders", [5, 6, 7]);
      const web2 = await drain(writeConfig(dir, remote.url, ["orders"], tuning("web-2"), "web-2.toml", "q2"));
      const row1 = { ...orders, origin: q1.origin, label: "web-1" };
      const row2 = { ...orders, origin: q2.origin, label: "web-2" };
      let s = await web2.until(
        (x) => x.value("sqloutbox_ledger_through", row1) !== undefined,
        "web-1's ledger row on web-2",
      );
      expect(s.value("sqloutbox_ledger_through", row1)).toBe(4); // seqs 1..4 applied
      expect(s.value("sqloutbox_ledger_age_seconds", row1)).toBeGreaterThanOrEqual(0);
      expect(s.value("sqloutbox_ledger_age_seconds", row1)).toBeLessThan(60);
      await web2.until((x) => x.value("sqloutbox_delivered_rows_total", orders) === 3, "web-2 delivering");
      await web2.until((x) => x.value("sqloutbox_ledger_through", row2) === 3, "web-2's own row on web-2", 5_000);

      // A drain shows its own row as soon as it moves, the others' at its next read of the fleet (every 15 s).
      for (const d of [web1, web2]) {
        s = await d.until(
          (x) => x.value("sqloutbox_ledger_through", row2) === 3 && x.value("sqloutbox_ledger_through", row1) === 4,
          "both origins on both drains",
          25_000,
        );
        expect(s.all("sqloutbox_ledger_through")).toHaveLength(2);
      }
    }, 60_000);

    test("a slow start (the target blackholed at startup) is alive for /healthz but not ready, until the target answers", async () => {
      const { dir, remote } = await setup();
      await remote.exec("CREATE TABLE orders (id BIGINT)");
      const { proxy, url } = pgBehindProxy(remote, cleanups);
      proxy.cut("blackhole"); // connections are accepted and never answered: startup waits out write_timeout
      // connect_timeout above write_timeout: startup is bounded by write_timeout (3 s) alone.
      const config = writeConfig(dir, url, ["orders"], "table_flush_threshold = 1", "outbox.toml", "queue", 10);
      const d = await drain(config);

      const health = await d.get("/healthz");
      expect(health.status).toBe(200); // a liveness probe must not kill a slow start
      expect(JSON.parse(health.body)).toEqual({ status: "ok", targets: { "shop.pg": { ok: true, why: "starting" } } });
      const ready = await d.get("/readyz");
      expect(ready.status).toBe(503);
      expect(JSON.parse(ready.body).targets["shop.pg"]).toEqual({ ok: false, why: "starting" });
      let s = await d.scrape();
      expect(s.value("sqloutbox_target_state", { ...T, state: "starting" })).toBe(1);

      // write_timeout (3 s) ends the startup wait: the target is down, the loop runs, /healthz still 200.
      s = await d.until(
        (x) => x.value("sqloutbox_target_state", { ...T, state: "outage" }) === 1,
        "the startup to time out",
      );
      expect((await d.get("/healthz")).status).toBe(200);
      expect(JSON.parse((await d.get("/readyz")).body).targets["shop.pg"].why).toStartWith("down: ");

      proxy.restore();
      insert(producer(dir, "orders"), "orders", [1]);
      await d.until(
        (x) => x.value("sqloutbox_delivered_rows_total", orders) === 1,
        "delivery once the target answers",
        20_000,
      );
      expect((await d.get("/readyz")).status).toBe(200);
    }, 40_000);
  },
);
