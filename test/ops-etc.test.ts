// etc/prometheus/sqloutbox-alerts.yml and etc/grafana/sqloutbox-dashboard.json: their structure, that
// every PromQL expression in them parses, and that every metric they name is one a running drain
// really serves (scraped from `sqloutbox runservice --metrics-addr`, not taken from a list).
import { Database } from "bun:sqlite";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import { metricNames } from "../src/ops/metrics.ts";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";

const METRIC_NAMES = metricNames();
import { startCliDrain } from "./support/cli-drain.ts";
import { REPO } from "./support/cli.ts";
import type { Scrape } from "./support/prom-text.ts";
import { parsePromQL, PromQLError } from "./support/promql.ts";
import { seed } from "./support/queue.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";

const ALERTS = path.join(REPO, "etc/prometheus/sqloutbox-alerts.yml");
const ALERT_TESTS = path.join(REPO, "etc/prometheus/sqloutbox-alerts.test.yml");
const DASHBOARD = path.join(REPO, "etc/grafana/sqloutbox-dashboard.json");

/** The runbook sections the alerts link to: docs/operations.md must have each of these anchors. */
const RUNBOOK_ANCHORS = [
  "backlog-growing",
  "dead-letters",
  "drain-not-reporting",
  "fleet-host-behind",
  "hot-key",
  "oldest-pending",
  "stuck-head",
  "table-held",
  "target-down",
  "target-misconfigured",
  "tenant-held",
  "trace-spans-dropped",
  "wal-large",
];

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
interface Target {
  expr?: string;
  refId?: string;
  datasource?: { type?: string; uid?: string };
}
interface Panel {
  id: number;
  type: string;
  title: string;
  datasource?: { type?: string; uid?: string };
  targets?: Target[];
  gridPos: { h: number; w: number; x: number; y: number };
  panels?: Panel[];
}

const rules: Rule[] = (
  Bun.YAML.parse(fs.readFileSync(ALERTS, "utf8")) as { groups: { name: string; rules: Rule[] }[] }
).groups.flatMap((g) => g.rules);
const dashboard = JSON.parse(fs.readFileSync(DASHBOARD, "utf8"));
/** Every panel, including those inside collapsed rows. */
const panels: Panel[] = (dashboard.panels as Panel[]).flatMap((p) => [p, ...(p.panels ?? [])]);
const queryPanels = panels.filter((p) => p.type !== "row");
const variables: { name: string; type: string; query: unknown; datasource?: { uid?: string } }[] =
  dashboard.templating.list;

/** A dashboard query as Prometheus receives it: Grafana's interval macros replaced (`$var`s sit inside label matchers' strings). */
const grafanaExpr = (expr: string) =>
  expr.replaceAll("$__rate_interval", "5m").replaceAll("$__interval", "1m").replaceAll("$__range", "1h");
/** The selector a `label_values(selector, label)` variable query reads. */
const variableSelector = (query: string) => /^label_values\((.+),\s*[a-zA-Z_]\w*\)$/.exec(query)?.[1];

/** Every PromQL expression of both files, named for failure messages. */
const expressions: { where: string; expr: string }[] = [
  ...rules.map((r) => ({ where: `alert ${r.alert}`, expr: r.expr })),
  ...queryPanels.flatMap((p) =>
    (p.targets ?? []).map((t) => ({ where: `panel "${p.title}" ${t.refId}`, expr: grafanaExpr(t.expr ?? "") })),
  ),
  ...variables
    .filter((v) => v.type === "query")
    .map((v) => {
      const query = typeof v.query === "string" ? v.query : (v.query as { query: string }).query;
      return { where: `variable ${v.name}`, expr: variableSelector(query) ?? `not label_values(…): ${query}` };
    }),
];

describe("the Prometheus alert rules", () => {
  test("every rule is an alert with an expr, a for, a severity, a summary, a description and a runbook_url into docs/operations.md", () => {
    expect(rules.length).toBeGreaterThanOrEqual(8);
    const names = rules.map((r) => r.alert);
    expect(new Set(names).size).toBe(names.length);
    for (const r of rules) {
      const where = `alert ${r.alert ?? r.record}`;
      expect(r.alert, where).toMatch(/^Sqloutbox[A-Z][A-Za-z]+$/);
      expect(typeof r.expr, where).toBe("string");
      expect(r.for, where).toMatch(/^(\d+[smhd])+$/);
      expect(r.labels?.severity, where).toMatch(/^(critical|warning)$/);
      expect(r.annotations?.summary, where).toBeString();
      expect(r.annotations?.description, where).toBeString();
      expect(r.annotations?.runbook_url, where).toMatch(/^docs\/operations\.md#[a-z0-9-]+$/);
    }
  });

  test("the runbook anchors are the ones docs/operations.md is written against", () => {
    const anchors = new Set(rules.map((r) => r.annotations!.runbook_url!.split("#")[1]));
    expect([...anchors].sort()).toEqual(RUNBOOK_ANCHORS);
  });
});

describe("the Grafana dashboard", () => {
  test("is a schemaVersion 39 dashboard with a Prometheus datasource variable and app, target, table variables over it", () => {
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(39);
    expect(dashboard.uid).toBeString();
    expect(dashboard.title).toBeString();
    const byName = new Map(variables.map((v) => [v.name, v]));
    expect(byName.get("datasource")).toMatchObject({ type: "datasource", query: "prometheus" });
    for (const name of ["app", "target", "table"]) {
      expect(byName.get(name), name).toMatchObject({ type: "query", datasource: { uid: "${datasource}" } });
    }
    // Grafana shows `definition` and runs `query.query`: they must be the same text.
    for (const v of variables.filter((x) => x.type === "query"))
      expect((v as { definition?: string }).definition, v.name).toBe((v.query as { query: string }).query);
  });

  test("every panel has the datasource variable and at least one query; ids are unique and the grid has no overlap", () => {
    expect(queryPanels.length).toBeGreaterThanOrEqual(12);
    for (const p of queryPanels) {
      const where = `panel "${p.title}"`;
      expect(p.datasource, where).toEqual({ type: "prometheus", uid: "${datasource}" });
      expect(p.targets?.length, where).toBeGreaterThanOrEqual(1);
      const refs = p.targets!.map((t) => t.refId);
      expect(new Set(refs).size, where).toBe(refs.length);
      for (const t of p.targets!) {
        expect(t.expr, where).toBeString();
        expect(t.expr!.trim(), where).not.toBe("");
        expect(t.datasource, where).toEqual({ type: "prometheus", uid: "${datasource}" });
      }
    }
    const ids = panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    const cells = new Map<string, string>();
    for (const p of panels) {
      const { x, y, w, h } = p.gridPos;
      expect(x + w, `panel "${p.title}"`).toBeLessThanOrEqual(24);
      for (let i = x; i < x + w; i++) {
        for (let j = y; j < y + h; j++) {
          const taken = cells.get(`${i},${j}`);
          if (taken) throw new Error(`panels "${taken}" and "${p.title}" overlap at ${i},${j}`);
          cells.set(`${i},${j}`, p.title);
        }
      }
    }
  });

  test("has panels for the queues, the targets, the batches, held tables, the fleet's ledger and the process", () => {
    const uses = (metric: string) => queryPanels.filter((p) => p.targets!.some((t) => t.expr!.includes(metric))).length;
    for (const metric of [
      "sqloutbox_pending_rows",
      "sqloutbox_oldest_pending_age_seconds",
      "sqloutbox_delivered_rows_total",
      "sqloutbox_failed_rows_total",
      "sqloutbox_dead_lettered_rows_total",
      "sqloutbox_target_state",
      "sqloutbox_batch_duration_seconds_bucket",
      "sqloutbox_batch_rows_bucket",
      "sqloutbox_table_held",
      "sqloutbox_ledger_through",
      "sqloutbox_ledger_age_seconds",
      "process_resident_memory_bytes",
      "process_cpu_seconds_total",
    ]) {
      expect(uses(metric), metric).toBeGreaterThanOrEqual(1);
    }
    expect(
      queryPanels.some((p) =>
        p.targets!.some((t) =>
          /histogram_quantile\(0\.99, sum by \([^)]*\ble\b[^)]*\) \(rate\(sqloutbox_batch_duration_seconds_bucket/.test(
            t.expr!,
          ),
        ),
      ),
    ).toBe(true);
  });
});

describe("PromQL", () => {
  test.each(expressions.map((e) => [e.where, e.expr]))("%s parses", (_where, expr) => {
    const { type } = parsePromQL(expr);
    expect(type).toBe("vector");
  });

  // Each case was checked against promtool 2.42 (`promtool check rules`): the checker refuses what Prometheus refuses.
  test.each([
    ["rate(x)", "range vector"],
    ["sum(x[5m])", "instant vector"],
    ["1 > 1", "bool"],
    ["x and on (a) group_left y", "group_left"],
    ["histogram_quantile(sum by (le) (rate(x_bucket[5m])))", "argument"],
    ["topk(x)", "scalar parameter"],
    ["x{a=b}", "quoted label value"],
    ["sum(x", 'expected ")"'],
    ["sum by (a) x", 'expected "("'],
    ["x + y[5m]", "range vector"],
    ["x and 1", "instant vectors"],
    ["clamp(x, 0)", "argument"],
    ["foo(x)", "unknown function"],
    ["rate(x[$__rate_interval])", "unexpected character"],
    ["x[5]", "duration"],
  ])("refuses %s (%s)", (expr, why) => {
    expect(() => parsePromQL(expr)).toThrow(PromQLError);
    expect(() => parsePromQL(expr)).toThrow(why);
  });

  test.each([
    "x[5m:1m]",
    "rate(x[5m:])",
    "x offset 5m",
    "x @ 100",
    "- - x",
    "x ^ 2 ^ 3",
    "1 > bool 1",
    "count(x == 0) or vector(0)",
    'label_join(x, "a", ",", "b", "c")',
    'count_values("v", x)',
    "max(x) by (a,)",
    '{__name__="x"}',
    "quantile_over_time(0.5, x[1h])",
  ])("accepts %s", (expr) => {
    expect(() => parsePromQL(expr)).not.toThrow();
  });
});

describe("against a running drain", () => {
  let dir: TempDir;
  let scrape: Scrape;

  // A drain whose scrape has a sample of every metric: a delivered batch (histograms, last success),
  // a table missing on the remote (held, pending, oldest age), a ledger row it did not write
  // itself (the fleet view read at its first cycle) — left by a first run of the same queue — and
  // a tenant template with a tenant held.
  beforeAll(async () => {
    dir = makeTempDir("sqloutbox-ops-etc-");
    const remote = new Database(dir.file("remote.db"));
    remote.run("CREATE TABLE orders (id INTEGER)");
    remote.run("CREATE TABLE keyed (id INTEGER)");
    remote.close();
    const config = dir.file("outbox.toml");
    fs.writeFileSync(
      config,
      `[app.shop]\ndb_dir = "queue"\nflush_interval = 0.05\ntable_flush_threshold = 1\n\n[app.shop.db.local]\nwriter = "sqlite"\ntables = ["orders", { name = "late", lanes = 4 }, { name = "keyed", lanes = 2 }]\n\n[app.shop.db.local.connection]\npath = "remote.db"\n\n[app.shop.db.tenants]\nwriter = "sqlite"\ntables = ["per_tenant"]\n\n[app.shop.db.tenants.connection]\npath = "tenants/{tenant}/db.sqlite"\n`,
    );
    seed(dir.file("queue"), "orders", 3);
    seed(dir.file("queue"), "late", 2);
    // Keyed rows in a table with lanes: the key ranks have samples too.
    const producer = new SQLMiddleware({ dbDir: dir.file("queue") });
    producer.push("late", "INSERT INTO late (id) VALUES (?)", [3], { key: "k-1" });
    // A table with lanes that delivers: its lanes' ledger rows (the slowest lane's age).
    producer.push("keyed", "INSERT INTO keyed (id) VALUES (?)", [1], { key: "k-1" });
    // A tenant template whose one tenant has no database (its directory is missing): held, its row waiting.
    producer.push("per_tenant", "INSERT INTO per_tenant (id) VALUES (?)", [1], { tenant: "gone" });
    closeSharedOutboxes();
    const first = await startCliDrain(config);
    try {
      await first.until(
        (s) => s.value("sqloutbox_delivered_rows_total", { table: "orders" }) === 3,
        "the first run's delivery",
      );
    } finally {
      expect(await first.stop()).toBe(0);
    }

    seed(dir.file("queue"), "orders", 2);
    const second = await startCliDrain(config);
    try {
      scrape = await second.until(
        (s) =>
          s.value("sqloutbox_delivered_rows_total", { table: "orders" }) === 2 &&
          s.value("sqloutbox_table_held", { table: "late", reason: "remote schema" }) === 1 &&
          s.all("sqloutbox_key_backlog_info", { table: "late" }).length > 0 &&
          s.all("sqloutbox_ledger_age_seconds").length > 0 &&
          s.all("sqloutbox_ledger_slowest_lane_age_seconds").length > 0 &&
          s.value("sqloutbox_tenants_held", { target: "shop.tenants" }) === 1 &&
          s.value("sqloutbox_tenants_with_backlog", { target: "shop.tenants" }) === 1,
        "every metric sampled",
      );
    } finally {
      expect(await second.stop()).toBe(0);
    }
  }, 60_000);
  afterAll(() => dir?.cleanup());

  /** Whether the scrape has samples of `name` (a histogram's _bucket/_sum/_count included). */
  const served = (name: string) =>
    scrape.samples.some((s) => s.name === name || s.name.replace(/_(bucket|sum|count)$/, "") === name);
  /** Series Prometheus makes itself, not the drain. */
  const PROMETHEUS_OWN = new Set(["up", "scrape_duration_seconds", "scrape_samples_scraped"]);

  test("every metric an alert, a panel or a variable selects is in a real scrape", () => {
    const missing: string[] = [];
    for (const { where, expr } of expressions) {
      for (const name of parsePromQL(expr).metrics) {
        if (!PROMETHEUS_OWN.has(name) && !served(name)) missing.push(`${where}: ${name}`);
      }
    }
    expect(missing).toEqual([]);
  });

  test("every sqloutbox_, process_ or nodejs_ name written anywhere in either file (descriptions too) is in a real scrape", () => {
    const text =
      fs.readFileSync(ALERTS, "utf8") + fs.readFileSync(ALERT_TESTS, "utf8") + fs.readFileSync(DASHBOARD, "utf8");
    const names = new Set(text.match(/\b(sqloutbox|process|nodejs)_[a-z_]+\b/g) ?? []);
    expect(names.size).toBeGreaterThan(15);
    expect([...names].filter((n) => !served(n) && !scrape.declares(n))).toEqual([]);
    // The drain's own names are the documented ones (src/ops/metrics.ts metricNames(), from its registry).
    const base = (n: string) =>
      METRIC_NAMES.find((m) => n === m || n === `${m}_bucket` || n === `${m}_sum` || n === `${m}_count`);
    expect([...names].filter((n) => n.startsWith("sqloutbox_") && !base(n))).toEqual([]);
  });

  test("every metric the drain serves is used by an alert or the dashboard", () => {
    for (const name of METRIC_NAMES) expect(served(name), `${name} served`).toBe(true);
    const used = new Set(
      expressions
        .flatMap(({ expr }) => [...parsePromQL(expr).metrics])
        .map((n) => n.replace(/_(bucket|sum|count)$/, "")),
    );
    expect(METRIC_NAMES.filter((m) => !used.has(m))).toEqual([]);
  });
});

// promtool is the authority on PromQL; where it is installed (Debian: apt-get install prometheus, or
// SQLOUTBOX_PROMTOOL=/path/to/promtool) it checks the rules, runs their unit tests and parses every
// dashboard query. Without it the checks above stand alone.
const promtool = process.env.SQLOUTBOX_PROMTOOL ?? Bun.which("promtool");
describe.skipIf(!promtool)(`promtool (${promtool ?? "not installed: skipped"})`, () => {
  const run = (args: string[]) => {
    const p = Bun.spawnSync([promtool!, ...args], { stdout: "pipe", stderr: "pipe" });
    return { code: p.exitCode, out: `${p.stdout.toString()}${p.stderr.toString()}` };
  };

  test("accepts the alert rules", () => {
    const r = run(["check", "rules", ALERTS]);
    expect(r.out).toContain("SUCCESS");
    expect(r.code).toBe(0);
  });

  test("passes the rules' unit tests", () => {
    const r = run(["test", "rules", ALERT_TESTS]);
    expect(r.out).toContain("SUCCESS");
    expect(r.code).toBe(0);
  });

  test("parses every dashboard query", () => {
    const dir = makeTempDir("sqloutbox-promtool-");
    try {
      const queries = expressions.filter((e) => !e.where.startsWith("alert "));
      const file = dir.file("dashboard-rules.yml");
      fs.writeFileSync(
        file,
        `groups:\n  - name: dashboard\n    rules:\n${queries.map((q, i) => `      - record: dashboard:query${i}\n        expr: ${JSON.stringify(q.expr)}\n`).join("")}`,
      );
      const r = run(["check", "rules", file]);
      expect(r.out).toContain(`SUCCESS: ${queries.length} rules found`);
      expect(r.code).toBe(0);
    } finally {
      dir.cleanup();
    }
  });
});
