// The human view of tenant templates in `status` (SPEC §4c): a few lines per template whatever its
// tenant count — how many tenants have rows waiting, the oldest, the databases open, and the
// first held tenants with why and since — and `status --tenant T`: one tenant, table by table.
import type { StatusTenants, TenantStatus } from "./tenant-report.ts";
import {
  type Column,
  fitLastColumn,
  formatAge,
  oneLine,
  type OutputStyle,
  paint,
  PLAIN,
  renderTable,
} from "./text-output.ts";

/** Held tenants `status` lists per template; the rest are counted (`status --json` lists them all). */
export const HELD_TENANTS_SHOWN = 5;

/** The tenant templates' section of `status`: per template, its summary line and its first held tenants. */
export function renderTenants(
  entries: readonly StatusTenants[],
  generatedAt: string,
  style: OutputStyle = PLAIN,
): string[] {
  const now = Date.parse(generatedAt);
  const lines: string[] = [];
  for (const t of entries) {
    // A target's name says its app (`shop.tenants`); without a drain, the app and its tables say where.
    const name =
      t.target === null ? `${t.app ? `app ${t.app}, ` : ""}the tables ${t.tables.join(", ")}` : `target ${t.target}`;
    lines.push("", `tenants of ${name}: ${summary(t, style)}`);
    if (t.held === null) {
      lines.push("  no drain is running: which tenants are held is not known");
      continue;
    }
    if (t.held.count === 0) continue;
    const shown = t.held.tenants.slice(0, HELD_TENANTS_SHOWN);
    const columns: Column[] = [
      { header: "tenant" },
      { header: "held" },
      { header: "since", right: true },
      { header: "retry", right: true },
      { header: "why" },
    ];
    const rows = shown.map((h) => [
      h.tenant,
      paint(h.reason, "yellow", style),
      `${formatAge(now - Date.parse(h.since))} ago`,
      retryIn(h.until, now),
      oneLine(h.message),
    ]);
    const { rows: fitted } = fitLastColumn(columns, rows, style.width === null ? null : style.width - 2);
    lines.push(
      ...renderTable(columns, fitted)
        .split("\n")
        .map((l) => `  ${l}`),
    );
    if (t.held.count > shown.length)
      lines.push(
        `  and ${t.held.count - shown.length} more (status --json lists them all; status --tenant T shows one)`,
      );
  }
  return lines;
}

/**
 * `3 with backlog (120 rows; 2 without a tenant), the oldest acme 5m12s (ev seq 17); 12/64 databases open
 * (…); 2 held, the oldest first:`.
 */
function summary(t: StatusTenants, style: OutputStyle): string {
  const parts: string[] = [];
  const b = t.backlog;
  if (b !== null) {
    const without = b.rowsWithoutTenant > 0 ? `; ${b.rowsWithoutTenant} without a tenant` : "";
    parts.push(
      b.rows === 0
        ? "no backlog"
        : `${b.tenants} with backlog (${b.rows} rows${without})${b.oldest ? `, the oldest ${b.oldest.tenant} ${formatAge(b.oldest.ageMs)} (${b.oldest.namespace} seq ${b.oldest.seq})` : ""}`,
    );
  }
  if (t.databases !== null)
    parts.push(
      `${t.databases.open}/${t.databases.maxOpen} databases open (${t.databases.opened} opened, ${t.databases.closed} closed)`,
    );
  if (t.held !== null)
    parts.push(t.held.count > 0 ? `${paint(`${t.held.count} held`, "red", style)}, the oldest first:` : "none held");
  return parts.join("; ") || "-";
}

/** When a held tenant (or a row backing off) is tried again: `in 28s`, `now` once due. */
function retryIn(until: string, now: number): string {
  const due = Date.parse(until) - now;
  return due > 0 ? `in ${formatAge(due)}` : "now";
}

/** `status --tenant T`: its hold at each template, then its rows table by table (or that it has none). */
export function renderTenantStatus(doc: TenantStatus, style: OutputStyle = PLAIN): string {
  const now = Date.parse(doc.generatedAt);
  const lines: string[] = [];
  if (doc.targets.length === 0) lines.push("no tenant template serves these tables, and no file holds tenants' rows");
  for (const t of doc.targets) {
    const where = t.target === null ? "" : ` at target ${t.target}`;
    if (t.target === null)
      lines.push(`tenant ${doc.tenant}: no drain is running${t.app ? ` for app ${t.app}` : ""}, its hold is not known`);
    else if (t.held === null) lines.push(`tenant ${doc.tenant}${where}: not held`);
    else
      lines.push(
        `tenant ${doc.tenant}${where}: ${paint(`HELD (${t.held.reason})`, "red", style)} since ${t.held.since} (${formatAge(now - Date.parse(t.held.since))} ago), retried ${retryIn(t.held.until, now)}: ${oneLine(t.held.message)}`,
      );
  }
  for (const u of doc.unreadable) lines.push(`UNREADABLE ${u.file}: ${u.error}`);
  if (doc.tables.length === 0) {
    lines.push(`tenant ${doc.tenant} has no rows queued and no dead letters`);
    return lines.join("\n");
  }
  const withApp = doc.tables.some((r) => r.app !== null);
  const columns: Column[] = [
    ...(withApp ? [{ header: "app" }] : []),
    { header: "table" },
    { header: "pending", right: true },
    { header: "oldest", right: true },
    { header: "head", right: true },
    { header: "attempts", right: true },
    { header: "next", right: true },
    { header: "dead", right: true },
    { header: "last error" },
  ];
  const rows = doc.tables.map((r) => {
    const failing = r.failing ?? r.head;
    return [
      ...(withApp ? [r.app ?? "-"] : []),
      r.namespace,
      String(r.pending),
      formatAge(r.oldestPendingAgeMs),
      r.head === null ? "-" : String(r.head.seq),
      failing === null ? "0" : String(failing.attempts),
      failing?.nextAttemptAt ? retryIn(failing.nextAttemptAt, now) : "-",
      r.deadLetters > 0 ? paint(String(r.deadLetters), "red", style) : "0",
      failing?.lastError
        ? `${failing.seq === r.head?.seq ? "" : `seq ${failing.seq}: `}${oneLine(failing.lastError)}`
        : "-",
    ];
  });
  const { rows: fitted } = fitLastColumn(columns, rows, style.width);
  lines.push("", renderTable(columns, fitted));
  const pending = doc.tables.reduce((n, r) => n + r.pending, 0);
  const dead = doc.tables.reduce((n, r) => n + r.deadLetters, 0);
  lines.push(
    "",
    `${pending} row(s) pending in ${doc.tables.filter((r) => r.pending > 0).length} table(s), ${dead} dead letter(s)${dead > 0 ? ` (sqloutbox dead-letter list --tenant ${doc.tenant})` : ""}`,
  );
  return lines.join("\n");
}
