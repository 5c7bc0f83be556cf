// The operator console: the page of the admin API's listener. It reads /api/v1 (every 2 s the
// status, the dead letters after every change: letters.ts; tenants: tenants.ts; the fleet: fleet.ts), offers
// actions only when the server says the caller holds the write token (GET /api/v1/access), and asks before
// each, with the count. The token is sent as a bearer header — never a cookie — and kept in this tab's
// sessionStorage only (session.ts). Everything shown goes in through textContent: no text from the API is
// ever parsed as HTML.

import type { Access, Status } from "./api.ts";
import { ApiError } from "./api.ts";
import { heldLaneCount } from "../../../drain/held-lanes.ts";
import { $, age, ago, button, cell, el, until, withClass } from "./dom.ts";
import { clearSelection, initLetters, loadLetters, openFromUrl } from "./letters.ts";
import { api, canAct, confirmAction, say, session, setToken } from "./session.ts";
import { renderFleet } from "./fleet.ts";
import { initTenants, renderTenants } from "./tenants.ts";

const STATUS_EVERY_MS = 2_000;
const LETTERS_EVERY_MS = 10_000;

/** The dead letters the last status counted: when it changes, the list is read again at once. */
let deadLetters: number | null = null;

// ── access ──────────────────────────────────────────────────────────────────────────────────

async function loadAccess(): Promise<void> {
  try {
    session.access = await api<Access>("/access");
  } catch (error) {
    session.access = null;
    if (error instanceof ApiError && error.status === 401) {
      if (session.token) {
        setToken(null);
        say("That token was refused: sign in again.", true);
      } else say("This console needs a token: sign in with the read or write token.");
    } else say(`Cannot reach the admin API: ${(error as Error).message}`, true);
  }
  const a = session.access;
  $("version").textContent = a ? a.version : "";
  $("who").textContent = a
    ? `${a.who}: ${a.can_act ? "may act" : a.write_configured ? "read-only (sign in with the write token to act)" : "read-only (no write token configured)"}`
    : "";
  $("sign-out").hidden = session.token === null;
  $("sign-in").hidden = session.token !== null;
  for (const node of document.querySelectorAll<HTMLElement>(".act-only")) node.hidden = !canAct();
  $("kick").hidden = !canAct();
}

$("sign-in").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = $<HTMLInputElement>("token");
  const token = input.value.trim();
  input.value = "";
  if (!token) return;
  setToken(token);
  $("message").hidden = true;
  void refreshAll();
});

$("sign-out").addEventListener("click", () => {
  setToken(null);
  clearSelection();
  void refreshAll();
});

// ── status: targets and tables ──────────────────────────────────────────────────────────────

async function loadStatus(): Promise<void> {
  const live = $("live");
  try {
    const status = await api<Status>("/status");
    renderStatus(status);
    if (deadLetters !== null && status.totals.deadLetters !== deadLetters) void loadLetters();
    deadLetters = status.totals.deadLetters;
    live.textContent = `live · updated ${new Date(status.generatedAt).toLocaleTimeString()}`;
    live.className = "live";
  } catch (error) {
    live.textContent = `connection lost: ${(error as Error).message}`;
    live.className = "live down";
  }
}

function renderStatus(status: Status): void {
  const now = Date.parse(status.generatedAt);
  const targets = $("targets").querySelector("tbody")!;
  targets.replaceChildren(
    ...status.targets.map((t) => {
      const bad = t.state === "outage" || t.state === "misconfigured";
      return el(
        "tr",
        {},
        cell("Target", t.target),
        cell(
          "State",
          el("span", {
            text: t.state === "outage" ? "DOWN" : t.state,
            className: bad ? "state-bad" : t.state === "ok" ? "state-ok" : "",
          }),
        ),
        cell("Since", t.downSince ? ago(t.downSince, now) : "-"),
        cell("Last answer", ago(t.lastSuccessAt, now)),
        cell("Round trip", t.lastRoundTripMs == null ? "-" : `${t.lastRoundTripMs} ms`, "num"),
        cell("Rows/s", t.rowsPerSecond === null ? "-" : t.rowsPerSecond.toFixed(t.rowsPerSecond >= 100 ? 0 : 1), "num"),
        cell("Lag", age(t.lagMs), "num"),
        cell("Delivered", String(t.totals.delivered), "num"),
        cell("Problem", t.lastError ?? t.setupProblem ?? "", "msg"),
      );
    }),
  );
  $("targets-empty").hidden = status.targets.length > 0;

  const tables = $("tables-table").querySelector("tbody")!;
  tables.replaceChildren(
    ...status.namespaces.map((h) => {
      const name = `${h.app ? `${h.app}/` : ""}${h.namespace}`;
      const actions = el("td", { label: "Actions" });
      if (canAct() && h.app !== null && h.headSeq !== null && (h.isStuck || h.nextAttemptAt !== null))
        actions.append(
          button(`Retry ${name} now`, () => void retryHead(h.app!, h.namespace)),
          " ",
          button(`Skip head ${h.headSeq}`, () => void skipHead(h.app!, h.namespace, h.headSeq!)),
        );
      const row = el(
        "tr",
        { attrs: { "data-table": name } },
        cell("Table", name),
        el("td", { label: "Depth", className: "num", attrs: { "data-depth": String(h.depth) } }, String(h.depth)),
        cell("Oldest", age(h.oldestPendingAgeMs), "num"),
        cell(
          "Head",
          h.headSeq === null
            ? "-"
            : `${h.headSeq} (${h.headAttempts} attempt${h.headAttempts === 1 ? "" : "s"})${h.isStuck ? " STUCK" : ""}`,
        ),
        cell("Next attempt", until(h.nextAttemptAt, now)),
        cell(
          "Held",
          h.held
            ? el("span", {
                text: h.held.message.startsWith(h.held.reason) ? h.held.message : `${h.held.reason}: ${h.held.message}`,
                className: "state-warn",
              })
            : h.lanes && h.lanes.held.length > 0
              ? el("span", { text: lanesHeld(h.lanes, now), className: "state-warn" })
              : "no",
          "msg",
        ),
        cell(
          "Dead",
          h.deadLetterCount > 0
            ? el("span", {
                text: h.deadLettersInDoubt
                  ? `${h.deadLetterCount} (${h.deadLettersInDoubt} in doubt)`
                  : String(h.deadLetterCount),
                className: "state-bad",
              })
            : "0",
          "num",
        ),
        cell("Head error", h.lastError ? withClass(h.lastError, h.lastErrorClass) : "", "msg"),
        actions,
      );
      return row;
    }),
  );
  renderTenants(status);
  renderFleet(status);
  const apps = [...new Set(status.dbDirs.map((d) => d.app).filter((a): a is string => a !== null))];
  const select = $("filter").querySelector<HTMLSelectElement>("select[name=app]")!;
  if (select.options.length - 1 !== apps.length) {
    const current = select.value;
    select.replaceChildren(
      el("option", { text: "all", attrs: { value: "" } }),
      ...apps.map((a) => el("option", { text: a, attrs: { value: a } })),
    );
    select.value = current;
  }
}

$("kick").addEventListener("click", () => void kick());

// ── actions, each behind a confirmation that says how many ──────────────────────────────────

async function retryHead(app: string, namespace: string): Promise<void> {
  if (
    !(await confirmAction(
      `Retry the head of ${app}/${namespace} now? Its backoff ends; it keeps its attempts.`,
      "Retry now",
    ))
  )
    return;
  try {
    const r = await api<{ head: { seq: number } | null }>(
      `/tables/${encodeURIComponent(app)}/${encodeURIComponent(namespace)}/retry`,
      { method: "POST", body: {} },
    );
    say(
      r.head
        ? `The head ${r.head.seq} of ${app}/${namespace} is tried at the drain's next look.`
        : `Nothing of ${app}/${namespace} was backing off.`,
    );
  } catch (error) {
    say(`Retry refused: ${(error as Error).message}`, true);
  }
  await loadStatus();
}

async function skipHead(app: string, namespace: string, seq: number): Promise<void> {
  if (
    !(await confirmAction(
      `Skip the head ${seq} of ${app}/${namespace}? It moves (with its group) to the dead letters and the table flows on.`,
      `Skip ${seq}`,
    ))
  )
    return;
  try {
    const r = await api<{ moved: number[] }>(
      `/tables/${encodeURIComponent(app)}/${encodeURIComponent(namespace)}/skip`,
      { method: "POST", body: { seq } },
    );
    say(`Moved ${r.moved.length} row(s) of ${app}/${namespace} to the dead letters.`);
  } catch (error) {
    say(`Skip refused: ${(error as Error).message}`, true);
  }
  await Promise.all([loadLetters(), loadStatus()]);
}

async function kick(): Promise<void> {
  if (
    !(await confirmAction(
      "Retry everything now? Every backed-off head, target and timed hold is retried at once.",
      "Kick",
    ))
  )
    return;
  try {
    const r = await api<{ heads: unknown[] }>("/kick", { method: "POST", body: {} });
    say(`Kicked: ${r.heads.length} head(s) retried, every target's backoff ended.`);
  } catch (error) {
    say(`Kick refused: ${(error as Error).message}`, true);
  }
  await loadStatus();
}

// ── the loop ────────────────────────────────────────────────────────────────────────────────

async function refreshAll(): Promise<void> {
  await loadAccess();
  if (session.access === null) return;
  await Promise.all([loadStatus(), loadLetters(), openFromUrl()]);
}

initLetters(loadStatus);
initTenants(loadStatus);
void refreshAll();
setInterval(() => {
  if (session.access !== null && !document.hidden) void loadStatus();
}, STATUS_EVERY_MS);
setInterval(() => {
  if (session.access !== null && !document.hidden) void loadLetters();
}, LETTERS_EVERY_MS);

/** A table's held lanes, for its Held cell: how many of how many, and the oldest held key with its next attempt. */
function lanesHeld(
  lanes: {
    count: number;
    held: Array<{ lane: number | null; key: string | null; seq: number; nextAttemptAt: string }>;
  },
  now: number,
): string {
  const oldest = lanes.held[0]!;
  const key = oldest.key === null ? "a row without a key" : `key ${oldest.key}`;
  return `${heldLaneCount(lanes)}/${lanes.count} lanes held; oldest: ${key} (seq ${oldest.seq}), next ${until(oldest.nextAttemptAt, now)}`;
}
