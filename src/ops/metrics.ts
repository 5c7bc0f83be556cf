import client from "prom-client";
import type { BatchEvent } from "../drain/delivery.ts";
import type { LockHoldEvent } from "../drain/queue-pool.ts";
import type { OutboxSyncService } from "../drain/service.ts";
import type { TableView, TargetState, TargetView } from "../drain/views.ts";
import { heldLaneCount } from "../drain/held-lanes.ts";
import { type KeyBacklog, sampleKeyBacklog } from "../outbox/key-backlog.ts";
import { registerTenantMetrics } from "./tenant-metrics.ts";
import type { TraceCounts } from "./tracing/tracing.ts";

const TARGET_STATES: readonly TargetState[] = ["starting", "ok", "outage", "misconfigured"];

/** Rows read from the front of a table with lanes per scrape to rank its keys (see sampleKeyBacklog). */
export const KEY_SAMPLE_ROWS = 10_000;
/** Ranks of keys served per table with lanes: the label `rank` is 1 … KEY_RANKS, never the key's text. */
export const KEY_RANKS = 5;

/** The drain's Prometheus metrics: read from the service when scraped, plus batch histograms fed by `observeBatch`. */
export interface DrainMetrics {
  readonly registry: client.Registry;
  /** Records one answered batch (pass as the service's `onBatch`). */
  observeBatch(event: BatchEvent): void;
  /** Records one of the drain's write-lock holds on a queue file (pass as the service's `onLockHold`). */
  observeLockHold(event: LockHoldEvent): void;
  /** The Prometheus text exposition of every metric. */
  text(): Promise<string>;
  readonly contentType: string;
}

/** prom-client's per-heap-space gauges, which the drain does not serve (see createDrainMetrics). */
const HEAP_SPACE_METRICS = [
  "nodejs_heap_space_size_total_bytes",
  "nodejs_heap_space_size_used_bytes",
  "nodejs_heap_space_size_available_bytes",
] as const;

type Labels = Record<string, string>;
/** One series: its labels and its value. */
type Sample = [labels: Labels, value: number];

/** A table of a target's view, with the labels every table metric carries. */
interface TableOf {
  target: TargetView;
  table: TableView;
  labels: { app: string; target: string; table: string };
}

const ageSeconds = (iso: string | null, now: number): number | null =>
  iso === null ? null : Math.max(0, (now - Date.parse(iso)) / 1000);
const targetLabels = (v: TargetView) => ({ app: v.app, target: v.target });
const tablesOf = (views: readonly TargetView[]): TableOf[] =>
  views.flatMap((target) =>
    target.tables.map((table) => ({ target, table, labels: { ...targetLabels(target), table: table.namespace } })),
  );
/** What a scrape reads besides the views, once per scrape and table: the key sample of a table with lanes. */
interface ScrapeReads {
  /** Null for a table without lanes, or whose file is not open (a held table) or cannot be read now. */
  keyBacklog(t: TableOf): KeyBacklog | null;
}

/** Lanes held by a head backing off (every lane when a row without a key holds them); 0 without lanes. */
const lanesHeld = (table: TableView): number => (table.lanes ? heldLaneCount(table.lanes) : 0);
/** One series per rank of a table's key sample: `value` of the rank-th key. */
const perRank = (
  views: readonly TargetView[],
  reads: ScrapeReads,
  value: (key: KeyBacklog["top"][number], rank: string) => Sample,
): Sample[] =>
  tablesOf(views).flatMap((t) =>
    (reads.keyBacklog(t)?.top ?? []).map((key, i) => {
      const [labels, v] = value(key, String(i + 1));
      return [{ ...t.labels, ...labels }, v] as Sample;
    }),
  );
/** One series per table, for the tables whose value is known. */
const perTable = (views: readonly TargetView[], value: (t: TableOf) => number | null | undefined): Sample[] =>
  tablesOf(views).flatMap((t) => {
    const v = value(t);
    return v === null || v === undefined ? [] : [[t.labels, v] as Sample];
  });
/** One series per target. */
const perTarget = (views: readonly TargetView[], value: (v: TargetView, now: number) => number | null): Sample[] => {
  const now = Date.now();
  return views.flatMap((v) => {
    const value_ = value(v, now);
    return value_ === null ? [] : [[targetLabels(v), value_] as Sample];
  });
};
/** One series per origin's ledger row of a served table. */
const perLedgerRow = (
  views: readonly TargetView[],
  value: (row: TargetView["fleet"][number], now: number) => number | null,
): Sample[] => {
  const now = Date.now();
  return views.flatMap((v) =>
    v.fleet.flatMap((row) => {
      const value_ = value(row, now);
      return value_ === null || !Number.isFinite(value_)
        ? []
        : [[{ ...targetLabels(v), table: row.namespace, origin: row.origin, label: row.label }, value_] as Sample];
    }),
  );
};

/**
 * Every gauge and counter the drain serves, as a function of the views `status` reads too
 * (TargetView, TableView with its queue health): the metrics read no drain internals, and a value
 * status shows and the one a dashboard shows cannot disagree.
 */
const FROM_VIEWS: ReadonlyArray<{
  name: string;
  help: string;
  type: "gauge" | "counter";
  labels: string[];
  samples: (views: readonly TargetView[], reads: ScrapeReads) => Sample[];
}> = [
  {
    name: "sqloutbox_pending_rows",
    help: "Rows waiting in the table's queue.",
    type: "gauge",
    labels: ["app", "target", "table"],
    samples: (views) => perTable(views, (t) => t.table.health?.depth),
  },
  {
    name: "sqloutbox_oldest_pending_age_seconds",
    help: "How long the oldest pending row has waited (absent when none).",
    type: "gauge",
    labels: ["app", "target", "table"],
    samples: (views) =>
      perTable(views, (t) => {
        const ms = t.table.health?.oldestPendingAgeMs;
        return ms == null ? null : ms / 1000;
      }),
  },
  {
    name: "sqloutbox_head_attempts",
    help: "Delivery attempts charged to the head row: 0, or 1 while its batch is in flight (charged before it is sent) and, once that attempt failed, until its retry; 2 or more: it failed at least once, or a drain died delivering it.",
    type: "gauge",
    labels: ["app", "target", "table"],
    samples: (views) => perTable(views, (t) => t.table.health?.headAttempts),
  },
  {
    name: "sqloutbox_dead_letters",
    help: "Dead letters present (not yet replayed).",
    type: "gauge",
    labels: ["app", "target", "table"],
    samples: (views) => perTable(views, (t) => t.table.health?.deadLetterCount),
  },
  {
    name: "sqloutbox_table_held",
    help: '1 while the drain holds the table back, with the reason (file, local, remote schema, chain gap, origin, writer contract, compat setup, late answer); 0 with reason "none" while it does not.',
    type: "gauge",
    labels: ["app", "target", "table", "reason"],
    // As `status` shows it: until released, not only until its retry time.
    samples: (views) =>
      tablesOf(views).map((t) => [{ ...t.labels, reason: t.table.held?.reason ?? "none" }, t.table.held ? 1 : 0]),
  },
  {
    name: "sqloutbox_lanes_held",
    help: "Lanes of the table held by a head backing off (all of them while a row without a key does); 0 for a table without lanes. The table's other lanes deliver meanwhile.",
    type: "gauge",
    labels: ["app", "target", "table"],
    samples: (views) => perTable(views, (t) => lanesHeld(t.table)),
  },
  {
    name: "sqloutbox_key_sample_rows",
    help: `Rows read from the front of a table with lanes to rank its keys: its first ${KEY_SAMPLE_ROWS} rows by seq, or fewer when the queue holds fewer (rows without a key included). Absent for a table without lanes.`,
    type: "gauge",
    labels: ["app", "target", "table"],
    samples: (views, reads) => perTable(views, (t) => reads.keyBacklog(t)?.rows),
  },
  {
    name: "sqloutbox_key_backlog_rows",
    help: `Rows of the rank-th most frequent key (rank 1 … ${KEY_RANKS}) among the sampled rows of a table with lanes (sqloutbox_key_sample_rows). rank 1 near the sample: one key holds the front of the queue (a hot key).`,
    type: "gauge",
    labels: ["app", "target", "table", "rank"],
    samples: (views, reads) => perRank(views, reads, (key, rank) => [{ rank }, key.rows]),
  },
  {
    name: "sqloutbox_key_backlog_info",
    help: `1 for the key at each rank of sqloutbox_key_backlog_rows, with its text as label key: at most ${KEY_RANKS} series per table, whose key label changes as the queue does (drop it by relabelling if keys are personal data).`,
    type: "gauge",
    labels: ["app", "target", "table", "rank", "key"],
    samples: (views, reads) => perRank(views, reads, (key, rank) => [{ rank, key: key.key }, 1]),
  },
  {
    name: "sqloutbox_delivered_rows_total",
    help: "Rows delivered since the drain started (settled from the ledger included).",
    type: "counter",
    labels: ["app", "target", "table"],
    samples: (views) => perTable(views, (t) => t.table.counts.delivered),
  },
  {
    name: "sqloutbox_failed_rows_total",
    help: "Failed delivery attempts charged to rows since the drain started.",
    type: "counter",
    labels: ["app", "target", "table"],
    samples: (views) => perTable(views, (t) => t.table.counts.failed),
  },
  {
    name: "sqloutbox_dead_lettered_rows_total",
    help: "Rows moved to the dead-letter log since the drain started.",
    type: "counter",
    labels: ["app", "target", "table"],
    samples: (views) => perTable(views, (t) => t.table.counts.deadLettered),
  },
  {
    name: "sqloutbox_target_state",
    help: "1 for the target's current state: starting, ok, outage (down, retried with backoff) or misconfigured (a person must act).",
    type: "gauge",
    labels: ["app", "target", "state"],
    samples: (views) =>
      views.flatMap((v) =>
        TARGET_STATES.map((state) => [{ ...targetLabels(v), state }, v.state === state ? 1 : 0] as Sample),
      ),
  },
  {
    name: "sqloutbox_target_up",
    help: "1 when the target answered its last call, 0 while down or misconfigured.",
    type: "gauge",
    labels: ["app", "target"],
    samples: (views) => perTarget(views, (v) => (v.state === "outage" || v.state === "misconfigured" ? 0 : 1)),
  },
  {
    name: "sqloutbox_target_consecutive_failures",
    help: "Failed attempts to reach the target in a row.",
    type: "gauge",
    labels: ["app", "target"],
    samples: (views) => perTarget(views, (v) => v.failures),
  },
  {
    name: "sqloutbox_batches_in_flight",
    help: "Batches sent to the target and not answered yet (at most its connections).",
    type: "gauge",
    labels: ["app", "target"],
    samples: (views) => perTarget(views, (v) => v.batchesInFlight),
  },
  {
    name: "sqloutbox_target_round_trip_seconds",
    help: "How long the target's last answered batch took from sent to answered (absent before the first).",
    type: "gauge",
    labels: ["app", "target"],
    samples: (views) => perTarget(views, (v) => (v.lastRoundTripMs === null ? null : v.lastRoundTripMs / 1000)),
  },
  {
    name: "sqloutbox_target_last_success_age_seconds",
    help: "Seconds since the target last answered a batch (absent before the first).",
    type: "gauge",
    labels: ["app", "target"],
    samples: (views) => perTarget(views, (v, now) => ageSeconds(v.lastSuccessAt, now)),
  },
  {
    name: "sqloutbox_loop_last_beat_age_seconds",
    help: "Seconds since the target's loop last ran (a cycle or an idle poll): its liveness.",
    type: "gauge",
    labels: ["app", "target"],
    samples: (views) => perTarget(views, (v, now) => ageSeconds(v.lastBeatAt, now)),
  },
  {
    name: "sqloutbox_ledger_through",
    help: "Each origin's ledger rows for a served table: the highest local seq of that queue file applied to the target (in any lane, with lanes).",
    type: "gauge",
    labels: ["app", "target", "table", "origin", "label"],
    samples: (views) => perLedgerRow(views, (row) => row.through),
  },
  {
    name: "sqloutbox_ledger_age_seconds",
    help: "Seconds since each origin's ledger rows of a served table last moved — any of them, with lanes (the target's clock), as last read: how far behind a host of the fleet is.",
    type: "gauge",
    labels: ["app", "target", "table", "origin", "label"],
    samples: (views) => perLedgerRow(views, (row, now) => ageSeconds(row.updatedAt, now)),
  },
  {
    name: "sqloutbox_ledger_slowest_lane_age_seconds",
    help: "Tables with lanes: seconds since the ledger row of each origin's slowest lane last moved (the target's clock), as last read.",
    type: "gauge",
    labels: ["app", "target", "table", "origin", "label"],
    samples: (views) =>
      perLedgerRow(views, (row, now) => (row.lanes ? ageSeconds(row.lanes.slowest.updatedAt, now) : null)),
  },
  {
    name: "sqloutbox_wal_bytes",
    help: "Size of each served queue file's write-ahead log, as last looked after (a checkpoint every second keeps it bounded).",
    type: "gauge",
    labels: ["app", "file"],
    // A file several targets serve is one series.
    samples: (views) => [
      ...new Map(
        views.flatMap((v) =>
          v.files.map((f) => [`${v.app}\0${f.file}`, [{ app: v.app, file: f.file }, f.walBytes] as Sample]),
        ),
      ).values(),
    ],
  },
];

/**
 * Creates the drain's metrics on a registry of their own (plus prom-client's process metrics);
 * `tracing`, when on, supplies the span export's counts. Gauges and counters are read from the
 * service's views when scraped — one view per scrape, with a pending count and one head read per
 * table, nothing while nobody scrapes — so they cost the drain nothing between scrapes; a table
 * with lanes adds one bounded read of its queue's first KEY_SAMPLE_ROWS rows (the key ranks).
 * Labels: `app`, `target`, `table`; ledger metrics add the `origin` and its `label`, key ranks
 * their `rank` (and the info metric the `key`); a tenant template's are per target (tenant-metrics.ts).
 */
export function createDrainMetrics(
  service: () => OutboxSyncService | null,
  options: { tracing?: { counts(): TraceCounts } | null } = {},
): DrainMetrics {
  const registry = new client.Registry();
  client.collectDefaultMetrics({ register: registry });
  // Bun answers v8.getHeapSpaceStatistics() by walking the heap: a scrape would cost in proportion to
  // the drain's heap, far more than every other process metric together.
  for (const name of HEAP_SPACE_METRICS) registry.removeSingleMetric(name);
  const registers = [registry];

  // One view per scrape, shared by every metric of it (`text()` starts each scrape afresh).
  let viewed: { at: number; views: readonly TargetView[] } = { at: 0, views: [] };
  const views = (): readonly TargetView[] => {
    const now = Date.now();
    if (now - viewed.at >= 500) viewed = { at: now, views: service()?.views({ health: true }) ?? [] };
    return viewed.views;
  };

  // One key sample per table with lanes and scrape, shared by the metrics that show it.
  let sampled = new WeakMap<TableView, KeyBacklog | null>();
  const reads: ScrapeReads = {
    keyBacklog({ table }) {
      if (!table.lanes || !table.health) return null;
      if (sampled.has(table)) return sampled.get(table)!;
      let backlog: KeyBacklog | null = null;
      try {
        backlog = sampleKeyBacklog(table.health.file, table.namespace, KEY_SAMPLE_ROWS, KEY_RANKS);
      } catch {
        // Not readable now (the table's health, and status, say why): no key series this scrape.
      }
      sampled.set(table, backlog);
      return backlog;
    },
  };

  for (const m of FROM_VIEWS) {
    const samples = () => m.samples(views(), reads);
    const config = { name: m.name, help: m.help, labelNames: m.labels, registers };
    if (m.type === "counter") {
      new client.Counter({
        ...config,
        collect() {
          this.reset();
          for (const [labels, value] of samples()) this.inc(labels, value);
        },
      });
    } else {
      new client.Gauge({
        ...config,
        collect() {
          this.reset();
          for (const [labels, value] of samples()) this.set(labels, value);
        },
      });
    }
  }

  registerTenantMetrics(views, registers);

  const batchLabels = ["app", "target"];
  const duration = new client.Histogram({
    name: "sqloutbox_batch_duration_seconds",
    help: "How long the target took to answer a batch.",
    labelNames: batchLabels,
    registers,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  });
  const size = new client.Histogram({
    name: "sqloutbox_batch_rows",
    help: "Rows per batch.",
    labelNames: batchLabels,
    registers,
    buckets: [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500],
  });

  const lockHold = new client.Histogram({
    name: "sqloutbox_local_write_lock_seconds",
    help: "How long each of the drain's write transactions held the queue file's write lock (its confirmations, attempt records, prunes): every producer of the file, the application's own writes in a db_file included, waits meanwhile.",
    labelNames: ["app", "file"],
    registers,
    buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1],
  });
  // One child per file, looked up once: the drain reports every write transaction.
  const lockHoldOf = new Map<string, client.Histogram.Internal<"app" | "file">>();

  // Served with tracing off too (as 0), so an alert on drops needs no "absent" twin.
  const traceCounts = (): TraceCounts =>
    options.tracing?.counts() ?? { exported: 0, droppedQueueFull: 0, droppedBusy: 0, droppedExportFailed: 0 };
  new client.Counter({
    name: "sqloutbox_trace_spans_exported_total",
    help: "Delivery spans the collector accepted (0 while tracing is off).",
    registers,
    collect() {
      this.reset();
      this.inc(traceCounts().exported);
    },
  });
  new client.Counter({
    name: "sqloutbox_trace_spans_dropped_total",
    help: "Delivery spans lost — spans only, never rows: queue_full (the export queue was full: the collector is slower than the drain, or down), busy (the drain delivered more rows a second than max_spans_per_second: those batches go without spans) or export_failed (an export the collector refused or did not answer in time).",
    labelNames: ["reason"],
    registers,
    collect() {
      this.reset();
      const counts = traceCounts();
      this.inc({ reason: "queue_full" }, counts.droppedQueueFull);
      this.inc({ reason: "busy" }, counts.droppedBusy);
      this.inc({ reason: "export_failed" }, counts.droppedExportFailed);
    },
  });

  return {
    registry,
    observeBatch(event) {
      duration.observe({ app: event.app, target: event.target }, event.durationMs / 1000);
      size.observe({ app: event.app, target: event.target }, event.rows);
    },
    observeLockHold({ app, file, seconds }) {
      const key = `${app}\0${file}`;
      let child = lockHoldOf.get(key);
      if (child === undefined) lockHoldOf.set(key, (child = lockHold.labels({ app, file })));
      child.observe(seconds);
    },
    text: () => {
      // A scrape reads the views afresh: one left from a scrape less than 500 ms ago would pair old
      // pending counts with the live counters (pending 5 next to all 10 delivered).
      viewed = { at: 0, views: [] };
      sampled = new WeakMap();
      return registry.metrics();
    },
    contentType: registry.contentType,
  };
}

/**
 * Every metric name the drain serves (its own, not prom-client's process metrics), from its registry: the
 * alert rules and the dashboard may use only these (a test checks).
 */
export function metricNames(): string[] {
  return createDrainMetrics(() => null)
    .registry.getMetricsAsArray()
    .map((m) => m.name)
    .filter((name) => name.startsWith("sqloutbox_"));
}
