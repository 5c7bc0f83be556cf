// The operator console: the page of the admin API's listener. It reads /api/v1 (every 2 s the
// status, the dead letters after every change), offers actions only when the server says the
// caller holds the write token (GET /api/v1/access), and asks before each, with the count. The
// token is sent as a bearer header — never a cookie — and kept in this tab's sessionStorage only.
// Everything shown goes in through textContent: no text from the API is ever parsed as HTML.

import { type Access, api as call, ApiError, type Letter, type Status } from "./api.ts";
import { heldLaneCount } from "../../../drain/held-lanes.ts";
import { $, age, ago, button, cell, el, until, withClass } from "./dom.ts";

const STATUS_EVERY_MS = 2_000;
const LETTERS_EVERY_MS = 10_000;
const TOKEN_KEY = "sqloutbox.token";

const state = {
  token: sessionStorage.getItem(TOKEN_KEY),
  access: null as Access | null,
  letters: [] as Letter[],
  total: 0,
  cursor: null as string | null,
  selected: new Set<string>(),
  filter: {} as Record<string, string>,
  detail: null as Letter | null,
  /** The dead letters the last status counted: when it changes, the list is read again at once. */
  deadLetters: null as number | null,
};

/** The admin API, asked with this tab's token. */
const api = <T>(path: string, init: { method?: string; body?: unknown } = {}) => call<T>(path, state.token, init);

function say(text: string, bad = false): void {
  const m = $("message");
  m.textContent = text;
  m.className = bad ? "message bad" : "message";
  m.hidden = false;
}

// ── access ──────────────────────────────────────────────────────────────────────────────────

const canAct = () => state.access?.can_act === true;

async function loadAccess(): Promise<void> {
  try {
    state.access = await api<Access>("/access");
  } catch (error) {
    state.access = null;
    if (error instanceof ApiError && error.status === 401) {
      if (state.token) {
        state.token = null;
        sessionStorage.removeItem(TOKEN_KEY);
        say("That token was refused: sign in again.", true);
      } else say("This console needs a token: sign in with the read or write token.");
    } else say(`Cannot reach the admin API: ${(error as Error).message}`, true);
  }
  const a = state.access;
  $("version").textContent = a ? a.version : "";
  $("who").textContent = a
    ? `${a.who}: ${a.can_act ? "may act" : a.write_configured ? "read-only (sign in with the write token to act)" : "read-only (no write token configured)"}`
    : "";
  $("sign-out").hidden = state.token === null;
  $("sign-in").hidden = state.token !== null;
  for (const node of document.querySelectorAll<HTMLElement>(".act-only")) node.hidden = !canAct();
  $("kick").hidden = !canAct();
}

$("sign-in").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = $<HTMLInputElement>("token");
  const token = input.value.trim();
  input.value = "";
  if (!token) return;
  state.token = token;
  sessionStorage.setItem(TOKEN_KEY, token);
  $("message").hidden = true;
  void refreshAll();
});

$("sign-out").addEventListener("click", () => {
  state.token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  state.selected.clear();
  void refreshAll();
});

// ── status: targets and tables ──────────────────────────────────────────────────────────────

async function loadStatus(): Promise<void> {
  const live = $("live");
  try {
    const status = await api<Status>("/status");
    renderStatus(status);
    if (state.deadLetters !== null && status.totals.deadLetters !== state.deadLetters) void loadLetters();
    state.deadLetters = status.totals.deadLetters;
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
          h.deadLetterCount > 0 ? el("span", { text: String(h.deadLetterCount), className: "state-bad" }) : "0",
          "num",
        ),
        cell("Head error", h.lastError ? withClass(h.lastError, h.lastErrorClass) : "", "msg"),
        actions,
      );
      return row;
    }),
  );
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

// ── dead letters ────────────────────────────────────────────────────────────────────────────

function readFilter(): Record<string, string> {
  const form = $<HTMLFormElement>("filter");
  const out: Record<string, string> = {};
  for (const [name, value] of new FormData(form)) {
    const v = String(value).trim();
    if (!v) continue;
    // datetime-local is the browser's local time: the API takes an absolute ISO time.
    out[name] = name === "since" || name === "until" ? new Date(v).toISOString() : v;
  }
  if (out.state === "dead") delete out.state;
  return out;
}

async function loadLetters(append = false): Promise<void> {
  const query = new URLSearchParams({
    ...state.filter,
    limit: "50",
    ...(append && state.cursor ? { cursor: state.cursor } : {}),
  });
  try {
    const page = await api<{ total: number; letters: Letter[]; next_cursor: string | null }>(`/dead-letters?${query}`);
    state.letters = append ? [...state.letters, ...page.letters] : page.letters;
    state.total = page.total;
    state.cursor = page.next_cursor;
    const shown = new Set(state.letters.map((l) => l.id));
    for (const id of state.selected) if (!shown.has(id)) state.selected.delete(id);
    renderLetters();
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 401))
      say(`Cannot list the dead letters: ${(error as Error).message}`, true);
  }
}

function renderLetters(): void {
  $("letters-total").textContent = `(${state.total})`;
  const body = $("letters-table").querySelector("tbody")!;
  body.replaceChildren(
    ...state.letters.map((l) => {
      const pick = el("input", { attrs: { type: "checkbox", "aria-label": `Select ${l.id}` } });
      pick.checked = state.selected.has(l.id);
      pick.disabled = l.state !== "dead";
      pick.addEventListener("change", () => {
        if (pick.checked) state.selected.add(l.id);
        else state.selected.delete(l.id);
        renderSelection();
      });
      const open = el("button", { text: l.id, className: "link", attrs: { type: "button", "data-letter": l.id } });
      open.addEventListener("click", () => void openLetter(l.id));
      const select = el("td", { label: "Select", className: "act-only" }, pick);
      select.hidden = !canAct();
      return el(
        "tr",
        { className: state.selected.has(l.id) ? "selected" : "" },
        select,
        cell("Letter", open),
        cell("Dead at", new Date(l.dead_at).toLocaleString()),
        cell("Reason", l.reason),
        cell("Attempts", String(l.attempts), "num"),
        cell("State", l.state === "replayed" ? `replayed as ${l.replayed_as_seq}` : l.state),
        cell("Error", l.error ?? "", "msg"),
      );
    }),
  );
  $("letters-empty").hidden = state.letters.length > 0;
  $("more").hidden = state.cursor === null;
  $("letters-table").querySelector<HTMLElement>("thead th.act-only")!.hidden = !canAct();
  renderSelection();
}

function renderSelection(): void {
  const n = state.selected.size;
  const replay = $<HTMLButtonElement>("replay-selected");
  const skip = $<HTMLButtonElement>("skip-selected");
  replay.textContent = `Replay selected (${n})`;
  skip.textContent = `Skip selected (${n})`;
  replay.disabled = skip.disabled = n === 0;
  const all = state.filter.state === undefined && state.total > 0;
  const replayAll = $<HTMLButtonElement>("replay-all");
  const skipAll = $<HTMLButtonElement>("skip-all");
  replayAll.textContent = `Replay all ${state.total} that match`;
  skipAll.textContent = `Skip all ${state.total} that match`;
  replayAll.disabled = skipAll.disabled = !all;
}

$("filter").addEventListener("submit", (event) => {
  event.preventDefault();
  state.filter = readFilter();
  state.selected.clear();
  void loadLetters();
});
$("filter").addEventListener("reset", () => {
  setTimeout(() => {
    state.filter = {};
    state.selected.clear();
    void loadLetters();
  });
});
$("more").addEventListener("click", () => void loadLetters(true));

async function openLetter(id: string): Promise<void> {
  try {
    const { letter, group } = await api<{ letter: Letter; group: Letter[] }>(
      `/dead-letters/${id.split("/").map(encodeURIComponent).join("/")}`,
    );
    state.detail = letter;
    const fields: Array<[string, string]> = [
      ["Letter", letter.id],
      [
        "State",
        letter.state === "replayed"
          ? `replayed as seq ${letter.replayed_as_seq} at ${letter.replayed_at}`
          : letter.state === "skipped"
            ? `given up at ${letter.replayed_at}`
            : "dead",
      ],
      ["Reason", letter.reason],
      ["Attempts", String(letter.attempts)],
      ["Created", letter.created_at],
      ["Dead at", letter.dead_at],
      ["Source", letter.source || "-"],
    ];
    $("detail-fields").replaceChildren(...fields.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })]));
    $("detail-sql").textContent = letter.sql;
    $("detail-args").textContent = JSON.stringify(letter.args, null, 2);
    $("detail-error").textContent = letter.error ? withClass(letter.error, letter.error_class) : "-";
    $("detail-group").replaceChildren(
      ...(group.length > 1
        ? group.map((g) => el("li", { text: `${g.id} (${g.state}): ${g.sql}` }))
        : [el("li", { text: "a row alone (no group)" })]),
    );
    const dead = letter.state === "dead";
    $<HTMLButtonElement>("detail-replay").disabled = !dead;
    $<HTMLButtonElement>("detail-skip").disabled = !dead;
    const panel = $("detail");
    panel.hidden = false;
    panel.focus();
  } catch (error) {
    say(`Cannot open ${id}: ${(error as Error).message}`, true);
  }
}
$("detail-close").addEventListener("click", () => {
  $("detail").hidden = true;
  state.detail = null;
});
$("detail-replay").addEventListener("click", () => state.detail && void act("replay", { ids: [state.detail.id] }, 1));
$("detail-skip").addEventListener("click", () => state.detail && void act("skip", { ids: [state.detail.id] }, 1));
$("replay-selected").addEventListener(
  "click",
  () => void act("replay", { ids: [...state.selected] }, state.selected.size),
);
$("skip-selected").addEventListener("click", () => void act("skip", { ids: [...state.selected] }, state.selected.size));
$("replay-all").addEventListener("click", () => void actOnFilter("replay"));
$("skip-all").addEventListener("click", () => void actOnFilter("skip"));
$("kick").addEventListener("click", () => void kick());

// ── actions, each behind a confirmation that says how many ──────────────────────────────────

function confirmAction(text: string, ok: string): Promise<boolean> {
  const dialog = $<HTMLDialogElement>("confirm");
  $("confirm-text").textContent = text;
  $("confirm-ok").textContent = ok;
  dialog.returnValue = "";
  dialog.showModal();
  $("confirm-cancel").focus();
  return new Promise((resolve) =>
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true }),
  );
}

const WHAT = {
  replay: "re-enqueued at the tail of its table (with its group) and delivered again",
  skip: "given up: never delivered, no longer counted as a dead letter (its group too)",
};

async function act(kind: "replay" | "skip", body: Record<string, unknown>, count: number): Promise<void> {
  const verb = kind === "replay" ? "Replay" : "Skip";
  if (
    !(await confirmAction(
      `${verb} ${count} dead letter${count === 1 ? "" : "s"}? Each is ${WHAT[kind]}.`,
      `${verb} ${count}`,
    ))
  )
    return;
  try {
    const report = await api<{ done: unknown[]; unchanged: unknown[] }>(`/dead-letters/${kind}`, {
      method: "POST",
      body,
    });
    say(
      `${kind === "replay" ? "Replayed" : "Skipped"} ${report.done.length} letter(s)${report.unchanged.length ? `; ${report.unchanged.length} were replayed or skipped before` : ""}.`,
    );
    state.selected.clear();
    $("detail").hidden = true;
  } catch (error) {
    say(`${verb} refused: ${(error as Error).message}`, true);
  }
  await Promise.all([loadLetters(), loadStatus()]);
}

async function actOnFilter(kind: "replay" | "skip"): Promise<void> {
  const { app, ...filter } = state.filter;
  // The count the operator saw goes with the filter: the server acts only if it still matches exactly that many.
  await act(kind, { filter: { ...(app ? { app } : {}), ...filter }, expect: state.total }, state.total);
}

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
  if (state.access === null) return;
  await Promise.all([loadStatus(), loadLetters()]);
}

void refreshAll();
setInterval(() => {
  if (state.access !== null && !document.hidden) void loadStatus();
}, STATUS_EVERY_MS);
setInterval(() => {
  if (state.access !== null && !document.hidden) void loadLetters();
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
