// The console's tenants (SPEC §4c): per tenant template, from each status, how many tenants the
// drain holds and the first few with why and since — never all of them, whatever the tenant count
// — and a search by name that shows one tenant's rows per table and its hold
// (GET /api/v1/tenants/{tenant}). A held tenant is retried from either place, asked first.

import type { Status, TenantStatus } from "./api.ts";
import { $, age, ago, button, cell, el, until, withClass } from "./dom.ts";
import { api, canAct, confirmAction, say } from "./session.ts";

/** Held tenants shown per template; the others are counted (`status --json` lists them all). */
const HELD_SHOWN = 5;

/** The tenant the search shows, if any: shown again after each action. */
let searched: string | null = null;
let afterAction: () => Promise<void> = async () => {};

/** Wires the search and the detail's retry; `refresh` runs after each action. */
export function initTenants(refresh: () => Promise<void>): void {
  afterAction = refresh;
  $("tenant-search").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = $<HTMLInputElement>("tenant-name");
    const tenant = input.value.trim();
    if (tenant) void showTenant(tenant);
  });
  $("tenant-retry").addEventListener("click", () => {
    if (searched !== null) void retryTenant(searched);
  });
}

/** The templates' held tenants, from a status; the section shows only where a tenant template is. */
export function renderTenants(status: Status): void {
  const now = Date.parse(status.generatedAt);
  $("tenants").hidden = status.tenants.length === 0;
  $("tenant-templates").replaceChildren(
    ...status.tenants.map((t) => {
      const name = t.target ?? `${t.app ? `${t.app}: ` : ""}${t.tables.join(", ")}`;
      const facts = [
        t.held === null ? "no drain is running: which tenants are held is not known" : `${t.held.count} held`,
        ...(t.databases ? [`${t.databases.open}/${t.databases.maxOpen} databases open`] : []),
      ];
      const block = el(
        "div",
        { className: "template", attrs: { "data-template": name } },
        el("h3", { text: `${name} · ${facts.join(" · ")}` }),
      );
      const held = t.held?.tenants.slice(0, HELD_SHOWN) ?? [];
      if (held.length === 0) return block;
      const rows = held.map((h) => {
        const actions = el("td", { label: "Actions" });
        actions.append(button(`Show ${h.tenant}`, () => void showTenant(h.tenant), ""));
        if (canAct())
          actions.append(
            " ",
            button(`Retry ${h.tenant}`, () => void retryTenant(h.tenant)),
          );
        return el(
          "tr",
          { attrs: { "data-tenant": h.tenant } },
          cell("Tenant", h.tenant),
          cell("Held", el("span", { text: h.reason, className: "state-warn" })),
          cell("Since", ago(h.since, now)),
          cell("Retry", until(h.until, now)),
          cell("Why", h.message, "msg"),
          actions,
        );
      });
      const more = t.held!.count - held.length;
      block.append(
        el(
          "div",
          { className: "scroll" },
          el(
            "table",
            { className: "cards" },
            el(
              "thead",
              {},
              el(
                "tr",
                {},
                ...["Tenant", "Held", "Since", "Retry", "Why"].map((h) =>
                  el("th", { text: h, attrs: { scope: "col" } }),
                ),
                el("th", { attrs: { scope: "col" } }, el("span", { text: "Actions", className: "sr-only" })),
              ),
            ),
            el("tbody", {}, ...rows),
          ),
        ),
      );
      if (more > 0)
        block.append(el("p", { className: "empty", text: `and ${more} more held: search one by its name below` }));
      return block;
    }),
  );
}

/** Looks one tenant up and shows its holds and its rows per table. */
async function showTenant(tenant: string): Promise<void> {
  let doc: TenantStatus;
  try {
    doc = await api<TenantStatus>(`/tenants/${encodeURIComponent(tenant)}`);
  } catch (error) {
    say(`Cannot show tenant ${tenant}: ${(error as Error).message}`, true);
    return;
  }
  searched = doc.tenant;
  $<HTMLInputElement>("tenant-name").value = doc.tenant;
  const now = Date.parse(doc.generatedAt);
  $("tenant-detail").hidden = false;
  $("tenant-holds").replaceChildren(
    ...doc.targets.map((t) =>
      el(
        "p",
        { className: t.held ? "state-warn" : "" },
        t.target === null
          ? `${doc.tenant}: no drain is running, its hold is not known`
          : t.held === null
            ? `${doc.tenant} at ${t.target}: not held`
            : `${doc.tenant} at ${t.target}: held (${t.held.reason}) since ${ago(t.held.since, now)}, retried ${until(t.held.until, now)}: ${t.held.message}`,
      ),
    ),
  );
  $("tenant-table")
    .querySelector("tbody")!
    .replaceChildren(
      ...doc.tables.map((r) => {
        const failing = r.failing ?? r.head;
        return el(
          "tr",
          { attrs: { "data-tenant-table": `${r.app ? `${r.app}/` : ""}${r.namespace}` } },
          cell("Table", `${r.app ? `${r.app}/` : ""}${r.namespace}`),
          cell("Pending", String(r.pending), "num"),
          cell("Oldest", age(r.oldestPendingAgeMs), "num"),
          cell("Head", r.head === null ? "-" : String(r.head.seq), "num"),
          cell("Attempts", String(failing?.attempts ?? 0), "num"),
          cell("Next attempt", until(failing?.nextAttemptAt ?? null, now)),
          cell("Dead", String(r.deadLetters), "num"),
          cell("Last error", failing?.lastError ? withClass(failing.lastError, failing.lastErrorClass) : "", "msg"),
        );
      }),
    );
  const empty = $("tenant-empty");
  empty.hidden = doc.tables.length > 0;
  empty.textContent = `Tenant ${doc.tenant} has no rows queued and no dead letters.`;
}

async function retryTenant(tenant: string): Promise<void> {
  if (
    !(await confirmAction(
      `Retry tenant ${tenant} now? The backoff of its failed rows ends, in place, with their attempts; every held tenant's database is tried again at once.`,
      "Retry now",
    ))
  )
    return;
  try {
    const r = await api<{ heads: unknown[] }>(`/tenants/${encodeURIComponent(tenant)}/retry`, {
      method: "POST",
      body: {},
    });
    say(`Tenant ${tenant} is tried again at the drain's next look (${r.heads.length} row(s) were backing off).`);
  } catch (error) {
    say(`Retry refused: ${(error as Error).message}`, true);
  }
  await afterAction();
  if (searched === tenant) await showTenant(tenant);
}
