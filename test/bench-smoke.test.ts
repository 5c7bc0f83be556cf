// Every `bun run bench:*` script of package.json in smoke mode (BENCH_SMOKE=1, see
// bench/support/smoke.ts): each of its lines — every engine, mode and case — at a tiny size, so a
// bench that no longer runs fails here rather than on the day someone measures with it. What is
// checked is that it ran: exit 0, no warning or error logged, and the lines it printed, each by
// its labels and the names of its figures. Never a figure: timing lives in bench/ only.
import { expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import pkg from "../package.json" with { type: "json" };
import { cleanEnv, REPO } from "./support/cli.ts";
import { describeSlow } from "./support/slow.ts";

/** The fields that say which line it is; every other field is a figure. */
const LABELS = new Set([
  "target",
  "batch_size",
  "pinned",
  "mode",
  "form",
  "case",
  "dialect",
  "shape",
  "writer",
  "drain",
  "group",
  "rtt_ms",
  "connections",
  "accounts_per_tx",
  "queue",
  "api",
  "stage",
]);

/** A printed line as compared here: `bench label=value …: figure figure …`. */
function lineShape(line: string): string {
  const { bench, ...fields } = JSON.parse(line) as Record<string, unknown>;
  const labels = Object.entries(fields)
    .filter(([key]) => LABELS.has(key))
    .map(([key, value]) => `${key}=${value}`);
  const figures = Object.keys(fields).filter((key) => !LABELS.has(key));
  return `${[bench, ...labels].join(" ")}: ${figures.join(" ")}`;
}

const ENQUEUE = "depth p50_us p99_us ops_per_s";
const DRAIN = "rows rows_per_s peak_rss_mb";
const TRACING = "off_rows_per_s on_rows_per_s on_vs_off runs_off runs_on spans_exported spans_dropped received_mb";
const TABLES = "tables idle_cpu_pct push_p50_ms push_p99_ms fds_per_table rss_kb_per_table";
const PUSH = "p50_us p99_us ops_per_s";
const CLI = "p50_ms p95_ms runs";
const TENANTS =
  "tenants rows rows_per_s complete exactly_once_in_order tenant_opens peak_open_tenants peak_fds peak_tenant_fds peak_rss_mb";

/** What each bench:* script prints in smoke mode, line by line, in order. */
const EXPECTED: Record<string, string[]> = {
  enqueue: [
    `enqueue case=raw-insert: ${ENQUEUE}`,
    `enqueue case=enqueue: ${ENQUEUE}`,
    `enqueue case=enqueue: ${ENQUEUE}`,
    `enqueue case=enqueue: ${ENQUEUE}`,
    `enqueue case=enqueue-max-pending: ${ENQUEUE}`,
    "inspect case=health: depth p50_ms runs",
    "inspect case=verifyFile: depth p50_ms runs",
    `enqueue case=enqueue-legacy: ${ENQUEUE}`,
    `enqueue case=enqueue-batch-500: ${ENQUEUE}`,
    `enqueue case=raw-batch-500: ${ENQUEUE}`,
    "enqueue-ratio case=enqueue: depth vs_raw",
    "enqueue-ratio case=enqueue: depth vs_raw",
    "enqueue-ratio case=enqueue: depth vs_raw",
    "enqueue-ratio case=enqueue-max-pending: depth vs_raw",
    "enqueue-ratio case=enqueue-legacy: depth vs_raw",
    "enqueue-ratio case=enqueue-batch-500: depth vs_raw_batch",
  ],
  rewrite: [
    ...["sqlite", "libsql", "postgres", "mysql"].flatMap((dialect) =>
      ["insert", "update"].map((shape) => `rewrite dialect=${dialect} shape=${shape}: ns_per_stmt`),
    ),
    "rewrite dialect=postgres shape=toDialect: ns_per_stmt",
    "rewrite dialect=any shape=validateStatement: ns_per_stmt",
  ],
  drain: [
    `drain target=null mode=ledger: ${DRAIN}`,
    "floor target=null: rows rows_per_s",
    "ratio target=null: drain_vs_floor",
    `drain target=sqlite mode=ledger: ${DRAIN}`,
    "limit target=sqlite form=multi-row VALUES: rows_per_s",
    "ratio target=sqlite: drain_vs_limit",
    `drain target=postgres mode=ledger: ${DRAIN}`,
    "limit target=postgres form=multi-row VALUES: rows_per_s",
    "limit target=postgres form=unnest: rows_per_s",
    "ratio target=postgres: drain_vs_limit",
    `drain target=mysql mode=ledger: ${DRAIN}`,
    "limit target=mysql form=multi-row VALUES: rows_per_s",
    "ratio target=mysql: drain_vs_limit",
    "fleet target=postgres: drains rows rows_per_s",
    "large target=postgres: rows row_kb rows_per_s peak_rss_mb",
    "large target=postgres: rows row_kb rows_per_s peak_rss_mb",
    "metrics target=postgres: off_rows_per_s on_rows_per_s on_vs_off",
    `tracing target=null: ${TRACING}`,
    `tracing target=postgres: ${TRACING}`,
    "latency target=sqlite: p50_ms p99_ms",
    "latency target=postgres: p50_ms p99_ms",
    // Against private servers, which CI can start: a `skipped` line instead fails here.
    `drain target=postgres pinned=true mode=ledger: ${DRAIN}`,
    "limit target=postgres pinned=true form=multi-row VALUES: rows_per_s",
    "limit target=postgres pinned=true form=unnest: rows_per_s",
    "ratio target=postgres pinned=true: drain_vs_limit",
    `drain target=mysql pinned=true mode=ledger: ${DRAIN}`,
    "limit target=mysql pinned=true form=multi-row VALUES: rows_per_s",
    "ratio target=mysql pinned=true: drain_vs_limit",
    // Through a delaying proxy: BENCH_RTT_MS (20 unless set), then 2 ms.
    ...[20, 2].flatMap((rtt) =>
      ["postgres", "mysql"].flatMap((target) => [
        ...[1, 2, 4, 8].map(
          (c) =>
            `wan target=${target} rtt_ms=${rtt} connections=${c} batch_size=50: rows rows_per_s round_trips_per_batch vs_connections_1 steady_rows_per_s steady_round_trips_per_batch steady_vs_connections_1`,
        ),
        `wan target=${target} rtt_ms=${rtt} connections=1 batch_size=200: rows rows_per_s round_trips_per_batch vs_batch_500 steady_rows_per_s steady_round_trips_per_batch steady_vs_batch_500`,
        ...[1, 2].map(
          (c) =>
            `wan target=${target} rtt_ms=${rtt} connections=${c} batch_size=50: lanes rows rows_per_s round_trips_per_batch vs_connections_1 steady_rows_per_s steady_round_trips_per_batch steady_vs_connections_1`,
        ),
        ...[1, 8].flatMap((c) => [
          `wan-limit target=${target} rtt_ms=${rtt} connections=${c} form=pipelined: rows_per_s round_trips_per_batch`,
          `wan-ratio target=${target} rtt_ms=${rtt} connections=${c}: drain_vs_limit steady_vs_limit`,
        ]),
      ]),
    ),
    ...["postgres", "mysql"].map((target) => `latency target=${target} rtt_ms=20: p50_ms p99_ms p50_round_trips`),
  ],
  cli: [
    `cli case=--version: ${CLI}`,
    `cli case=status --json (20 ns, 400 pending): ${CLI}`,
    `cli case=status (20 ns, 400 pending): ${CLI}`,
    `cli case=status --json --config (20 ns, 400 pending): ${CLI}`,
    `cli case=verify (20 ns, 400 pending): ${CLI}`,
  ],
  transactions: [
    "push-in-tx case=raw-insert: p50_us p99_us",
    "push-in-tx case=sqlite-alone: p50_us p99_us",
    "push-in-tx case=push: p50_us p99_us",
    "push-in-tx: push_vs_raw push_vs_sqlite_alone",
    "app-writes drain=false: tx tx_per_s p50_ms p99_ms busy_errors",
    "app-writes drain=true: tx tx_per_s p50_ms p99_ms busy_errors lock_hold_p99_ms lock_holds",
    "app-writes: p99_with_vs_without",
    "groups group=1: rows rows_per_s",
    "groups group=2: rows rows_per_s",
    "groups group=10: rows rows_per_s",
    "groups group=2: vs_single",
    "groups group=10: vs_single",
    "wal: seconds events_per_s pushed max_wal_bytes delivered",
  ],
  housekeeping: [
    "prune: log_rows prune_ms pushes push_p99_us push_max_us",
    "bytes-per-row: rows seconds ranges log_bytes bytes_per_row last_delivered",
    "backlog: rows rows_per_s peak_rss_mb peak_file_mb file_mb_60s_after after_vs_peak",
  ],
  tables: [`tables: ${TABLES}`, `tables: ${TABLES}`, "ratio case=tables: tables push_p50_vs_first idle_cpu_vs_first"],
  contention: [
    "contention: producers seconds pushes_per_s push_p50_ms push_p99_ms push_p999_ms push_max_ms pushes_over_100ms drain_rows_per_s",
  ],
  "writer-memory": [
    "writer-memory writer=sqlite: statements bytes_per_statement rss_mb",
    "writer-memory writer=libsql: statements bytes_per_statement rss_mb",
  ],
  lanes: [
    "lanes-poison case=clean: lanes rows rows_per_s",
    "lanes-poison case=poison: lanes rows rows_per_s",
    "lanes-poison-ratio: poison_vs_clean poison_rows_landed_early order_ok",
    ...["single", "group"].flatMap((shape) => [
      `lanes-drain shape=${shape}: lanes rows rows_per_s`,
      `lanes-drain shape=${shape}: lanes rows rows_per_s`,
      `lanes-drain-ratio shape=${shape}: lanes64_vs_lanes1`,
    ]),
  ],
  "lanes-hold": [1, 4].flatMap((c) =>
    ["1-4", "1"].map(
      (each) =>
        `lanes-hold connections=${c} accounts_per_tx=${each}: held_lane_accounts others_advanced others updates_per_s_before updates_per_s_during updates_per_s_after exactly_once_in_order`,
    ),
  ),
  peers: [
    "peers-single queue=sqloutbox api=push: p50_us p99_us ops_per_s",
    "peers-single queue=plainjob api=add: p50_us p99_us ops_per_s",
    ...[1, 10, 500].flatMap((size) =>
      [
        ["sqloutbox", "pushMany"],
        ["plainjob", "addMany"],
        ["sqloutbox", "enqueueBatch"],
      ].map(([queue, api]) => `peers-bulk queue=${queue} api=${api} batch_size=${size}: per_item_us items_per_s`),
    ),
    ...["null", "sqlite"].flatMap((target) => [
      `peers-drain target=${target} queue=sqloutbox: rows rows_per_s`,
      `peers-drain target=${target} queue=plainjob: rows rows_per_s workers`,
    ]),
    ...[
      "push vs add p50",
      "push vs add p99",
      "pushMany vs addMany 1",
      "pushMany vs addMany 10",
      "pushMany vs addMany 500",
      "drain null",
      "drain sqlite",
    ].map((c) => `peers-ratio case=${c}: sqloutbox_vs_plainjob`),
    "peers-ratio case=pushMany vs enqueueBatch 500: vs_enqueue_batch",
  ],
  "pushmany-profile": [500, 10].flatMap((size) => [
    ...[
      "statement check",
      "argument encoding",
      "trace context",
      "the door",
      "group bookkeeping",
      "row insert",
      "commit",
      "other",
    ].map((stage) => `pushmany-profile batch_size=${size} stage=${stage}: per_item_us share_pct`),
    `pushmany-profile batch_size=${size} stage=total: per_item_us samples`,
  ]),
  tenants: [
    ...["single", "interleaved", "sorted"].map((c) => `tenants target=sqlite case=${c}: ${TENANTS}`),
    ...["template", "single"].map((c) => `tenants-limit target=sqlite case=${c}: rows rows_per_s`),
    ...["interleaved", "sorted"].map(
      (c) => `tenants-ratio target=sqlite case=${c}: tenants_vs_single tenants_vs_limit`,
    ),
    "tenants-limit-ratio target=sqlite: template_vs_single",
    ...["single", "interleaved"].map((c) => `tenants target=postgres case=${c}: ${TENANTS}`),
    "tenants-ratio target=postgres case=interleaved: tenants_vs_single",
    `tenants-memory: ${TENANTS}`,
    `tenants-memory: ${TENANTS}`,
    "tenants-memory-ratio: fds_vs_first rss_vs_first",
  ],
  push: [
    ...["none", "given", "key", "otel-idle", "otel-active", "otel-with-given"].map((c) => `push case=${c}: ${PUSH}`),
    ...["given", "key", "otel-idle", "otel-active", "otel-with-given"].map((c) => `push-ratio case=${c}: vs_none`),
  ],
};

const SCRIPTS = Object.entries(pkg.scripts as Record<string, string>)
  .filter(([name]) => name.startsWith("bench:"))
  .map(([name, command]) => ({ name: name.slice("bench:".length), command }));

/** A smoke run ends in seconds; one that hangs (a drain waiting for rows that never land) is killed after this. */
const SMOKE_TIMEOUT_MS = 90_000;

/** `bun run bench:<name>` in smoke mode from the repository root, killed after SMOKE_TIMEOUT_MS. */
async function runSmoke(name: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const proc = Bun.spawn(["bun", "run", `bench:${name}`], {
    cwd: REPO,
    env: cleanEnv({ BENCH_SMOKE: "1" }),
    stdout: "pipe",
    stderr: "pipe",
    stdin: "ignore",
    timeout: SMOKE_TIMEOUT_MS,
    killSignal: "SIGTERM", // the benches stop their private servers and children on SIGTERM
  });
  const [stdout, stderr] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text()]);
  return { code: await proc.exited, stdout, stderr };
}

test("every bench:* script has its smoke lines listed here, and every bench/*.ts is a script or imported by one", () => {
  expect(SCRIPTS.map((s) => s.name).sort()).toEqual(Object.keys(EXPECTED).sort());
  const benchDir = path.join(REPO, "bench");
  const files = fs.readdirSync(benchDir).filter((f) => f.endsWith(".ts"));
  const run = new Set(SCRIPTS.map((s) => s.command.match(/^bun run bench\/(\S+\.ts)$/)?.[1]));
  const imported = (file: string) =>
    files.some((f) => fs.readFileSync(path.join(benchDir, f), "utf8").includes(`from "./${file}"`));
  expect(files.filter((f) => !run.has(f) && !imported(f))).toEqual([]);
});

describeSlow("the benches in smoke mode", "run every bench:* script at a tiny size (BENCH_SMOKE=1)", () => {
  for (const { name } of SCRIPTS) {
    test(
      `bench:${name} runs every line it has at a tiny size and prints each`,
      async () => {
        const { code, stdout, stderr } = await runSmoke(name);
        const problems = stderr.split("\n").filter((l) => /\[(warn|error)\]|error:/i.test(l));
        expect({ code, problems }, stderr).toEqual({ code: 0, problems: [] });
        expect(stdout.trim().split("\n").map(lineShape), stdout).toEqual(EXPECTED[name]!);
      },
      SMOKE_TIMEOUT_MS + 10_000,
    );
  }
});
