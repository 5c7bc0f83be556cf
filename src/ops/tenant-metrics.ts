import client from "prom-client";
import type { TargetView } from "../drain/views.ts";
import { listTenantsWithRows } from "../outbox/tenant-backlog.ts";

/**
 * Tenants with rows a scrape counts in each table of a tenant template at most (one index seek each, see
 * listTenantsWithRows).
 */
export const TENANT_COUNT_CAP = 10_000;

type Labels = { app: string; target: string };

/**
 * The metrics of tenant templates (SPEC §4c), one series per template target and never a label per
 * tenant, so their count is bounded by the config whatever the tenants: tenants with backlog,
 * tenants held, tenant databases open (and at most), opens and closes. All but the first come from
 * the drain's view of the target (TenantsView); tenants with backlog from its tables' queue files at
 * scrape time, through their index by tenant: one seek per tenant, never a read of the rows, and at
 * most TENANT_COUNT_CAP per table, so a scrape's cost is bounded whatever the backlog.
 */
export function registerTenantMetrics(views: () => readonly TargetView[], registers: client.Registry[]): void {
  // One count per target and scrape: the scrape's views are the same objects until the next one.
  const counted = new WeakMap<TargetView, number | null>();
  const withBacklog = (v: TargetView): number | null => {
    if (!counted.has(v)) counted.set(v, countOf(v));
    return counted.get(v)!;
  };
  const metrics: Array<{
    name: string;
    help: string;
    type: "gauge" | "counter";
    value: (v: TargetView & { tenants: NonNullable<TargetView["tenants"]> }) => number | null;
  }> = [
    {
      name: "sqloutbox_tenants_with_backlog",
      help: `Tenants of a tenant template with rows waiting in any of its tables, counted up to ${TENANT_COUNT_CAP} a table (absent until the drain has indexed its tables by tenant).`,
      type: "gauge",
      value: withBacklog,
    },
    {
      name: "sqloutbox_tenants_held",
      help: "Tenants of a tenant template the drain holds now: their database is down, missing, refusing the drain, or lacks a table or the ledger. Their rows wait, nothing is charged; sqloutbox status names the first ones and why.",
      type: "gauge",
      value: (v) => v.tenants.held.length,
    },
    {
      name: "sqloutbox_tenant_databases_open",
      help: "Tenant databases a tenant template holds open now (at most sqloutbox_tenant_databases_max_open).",
      type: "gauge",
      value: (v) => v.tenants.open,
    },
    {
      name: "sqloutbox_tenant_databases_max_open",
      help: "The most tenant databases a tenant template holds open at once (max_open_tenants).",
      type: "gauge",
      value: (v) => v.tenants.maxOpen,
    },
    {
      name: "sqloutbox_tenant_database_opens_total",
      help: "Tenant databases a tenant template opened since the drain started. Opens much faster than deliveries: more tenants have rows at once than max_open_tenants lets stay open.",
      type: "counter",
      value: (v) => v.tenants.opened,
    },
    {
      name: "sqloutbox_tenant_database_closes_total",
      help: "Tenant databases a tenant template closed since the drain started (the least recently used, to make room, or a held tenant's).",
      type: "counter",
      value: (v) => v.tenants.closed,
    },
  ];
  const samples = (value: (typeof metrics)[number]["value"]): Array<[Labels, number]> =>
    views().flatMap((v) => {
      if (v.tenants === undefined) return [];
      const n = value(v as Parameters<typeof value>[0]);
      return n === null ? [] : [[{ app: v.app, target: v.target }, n]];
    });
  for (const m of metrics) {
    const config = { name: m.name, help: m.help, labelNames: ["app", "target"], registers };
    if (m.type === "counter")
      new client.Counter({
        ...config,
        collect() {
          this.reset();
          for (const [labels, n] of samples(m.value)) this.inc(labels, n);
        },
      });
    else
      new client.Gauge({
        ...config,
        collect() {
          this.reset();
          for (const [labels, n] of samples(m.value)) this.set(labels, n);
        },
      });
  }
}

/**
 * The tenants with rows in any of the target's tables, each table's counted up to the cap; null when none of
 * them can be counted now.
 */
function countOf(v: TargetView): number | null {
  const tenants = new Set<string>();
  let counted = false;
  for (const table of v.tables) {
    if (!table.health) continue; // not open now (a held table: its hold says why)
    try {
      const listed = listTenantsWithRows(table.health.file, table.namespace, TENANT_COUNT_CAP);
      if (listed === null) continue; // not indexed by tenant yet: a count would scan the queue
      for (const t of listed) tenants.add(t);
      counted = true;
    } catch {
      // Not readable now (status says why): the others still count.
    }
  }
  return counted ? tenants.size : null;
}
