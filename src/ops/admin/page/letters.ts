// The console's dead letters: the filtered list (a page of 50, more on demand), one letter's detail
// — opened from the list or from its own URL, `#letter/{app}/{table}/{seq}` — and the two actions
// on letters: replay (re-enqueued at the tail) and discard (given up for good), each asked first
// with its count. A filter's action goes with the count shown (`expect`): the server acts only
// while it still selects exactly that many.

import { ApiError, type Letter } from "./api.ts";
import { $, cell, el, withClass } from "./dom.ts";
import { api, canAct, confirmAction, say } from "./session.ts";

const letters = {
  list: [] as Letter[],
  total: 0,
  cursor: null as string | null,
  selected: new Set<string>(),
  filter: {} as Record<string, string>,
  detail: null as Letter | null,
};

/** What an action on letters does, in the words the API, the CLI and the docs use. */
type LetterAction = "replay" | "discard";
const VERB: Record<LetterAction, [string, string]> = {
  replay: ["Replay", "Replayed"],
  discard: ["Discard", "Discarded"],
};
const WHAT: Record<LetterAction, string> = {
  replay: "re-enqueued at the tail of its table (with its group) and delivered again",
  discard: "given up for good: never delivered, never replayed, no longer counted as a dead letter (its group too)",
};

/** The URL of one letter: `#letter/shop/orders/42`. */
export const letterHash = (id: string) => `#letter/${id.split("/").map(encodeURIComponent).join("/")}`;

/** The letter id a URL's hash names, or null. */
function letterOfHash(hash: string): string | null {
  const parts = hash.startsWith("#letter/") ? hash.slice("#letter/".length).split("/") : [];
  if (parts.length !== 3 || parts.some((p) => p === "")) return null;
  try {
    return parts.map(decodeURIComponent).join("/");
  } catch {
    return null;
  }
}

let afterAction: () => Promise<void> = async () => {};

/** Wires the list, the detail and the actions; `refresh` runs after each action (the status shows its effect). */
export function initLetters(refresh: () => Promise<void>): void {
  afterAction = refresh;
  $("filter").addEventListener("submit", (event) => {
    event.preventDefault();
    letters.filter = readFilter();
    letters.selected.clear();
    void loadLetters();
  });
  $("filter").addEventListener("reset", () => {
    setTimeout(() => {
      letters.filter = {};
      letters.selected.clear();
      void loadLetters();
    });
  });
  $("more").addEventListener("click", () => void loadLetters(true));
  $("detail-close").addEventListener("click", closeLetter);
  const detailAct = (kind: LetterAction) => () => letters.detail && void act(kind, { ids: [letters.detail.id] }, 1);
  $("detail-replay").addEventListener("click", detailAct("replay"));
  $("detail-discard").addEventListener("click", detailAct("discard"));
  for (const kind of ["replay", "discard"] as const) {
    $(`${kind}-selected`).addEventListener(
      "click",
      () => void act(kind, { ids: [...letters.selected] }, letters.selected.size),
    );
    $(`${kind}-all`).addEventListener("click", () => void actOnFilter(kind));
  }
  window.addEventListener("hashchange", () => void openFromUrl());
}

/** Opens the letter the page's URL names, if any (on load, and whenever the hash changes). */
export async function openFromUrl(): Promise<void> {
  const id = letterOfHash(location.hash);
  if (id !== null && id !== letters.detail?.id) await openLetter(id);
}

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

/** Reads the list again (or, `append`, its next page). */
export async function loadLetters(append = false): Promise<void> {
  const query = new URLSearchParams({
    ...letters.filter,
    limit: "50",
    ...(append && letters.cursor ? { cursor: letters.cursor } : {}),
  });
  try {
    const page = await api<{ total: number; letters: Letter[]; next_cursor: string | null }>(`/dead-letters?${query}`);
    letters.list = append ? [...letters.list, ...page.letters] : page.letters;
    letters.total = page.total;
    letters.cursor = page.next_cursor;
    const shown = new Set(letters.list.map((l) => l.id));
    for (const id of letters.selected) if (!shown.has(id)) letters.selected.delete(id);
    renderLetters();
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 401))
      say(`Cannot list the dead letters: ${(error as Error).message}`, true);
  }
}

/** Forgets the selection (signing out). */
export function clearSelection(): void {
  letters.selected.clear();
}

function stateText(l: Letter): string {
  const state = l.state === "replayed" ? `replayed as ${l.replayed_as_seq}` : l.state;
  // A letter the remote may have applied is never replayed from here: say so where it is listed.
  return l.remote === "not applied" ? state : `${state} (${l.remote})`;
}

/** What the remote may have done with a letter, and what that means for a replay. */
const REMOTE: Record<Letter["remote"], string> = {
  "not applied": "not applied",
  "in doubt":
    "in doubt — a batch that carried it got no answer and may have been applied: a replay waits until the drain settles it (or is forced from the CLI once the remote was checked)",
  applied: "applied by the remote after it was dead-lettered — never replayed: discard it",
};

function renderLetters(): void {
  $("letters-total").textContent = `(${letters.total})`;
  const body = $("letters-table").querySelector("tbody")!;
  body.replaceChildren(
    ...letters.list.map((l) => {
      const pick = el("input", { attrs: { type: "checkbox", "aria-label": `Select ${l.id}` } });
      pick.checked = letters.selected.has(l.id);
      pick.disabled = l.state !== "dead";
      pick.addEventListener("change", () => {
        if (pick.checked) letters.selected.add(l.id);
        else letters.selected.delete(l.id);
        renderSelection();
      });
      // A real link: the letter's own URL, which opens it here and in a new tab alike.
      const open = el("a", { text: l.id, className: "link", attrs: { href: letterHash(l.id), "data-letter": l.id } });
      const select = el("td", { label: "Select", className: "act-only" }, pick);
      select.hidden = !canAct();
      return el(
        "tr",
        { className: letters.selected.has(l.id) ? "selected" : "" },
        select,
        cell("Letter", open),
        cell("Dead at", new Date(l.dead_at).toLocaleString()),
        cell("Reason", l.reason),
        cell("Attempts", String(l.attempts), "num"),
        cell("State", stateText(l)),
        cell("Error", l.error ?? "", "msg"),
      );
    }),
  );
  $("letters-empty").hidden = letters.list.length > 0;
  $("more").hidden = letters.cursor === null;
  $("letters-table").querySelector<HTMLElement>("thead th.act-only")!.hidden = !canAct();
  renderSelection();
}

function renderSelection(): void {
  const n = letters.selected.size;
  const all = letters.filter.state === undefined && letters.total > 0;
  for (const kind of ["replay", "discard"] as const) {
    const [verb] = VERB[kind];
    const selected = $<HTMLButtonElement>(`${kind}-selected`);
    selected.textContent = `${verb} selected (${n})`;
    selected.disabled = n === 0;
    const everything = $<HTMLButtonElement>(`${kind}-all`);
    everything.textContent = `${verb} all ${letters.total} that match`;
    everything.disabled = !all;
  }
}

async function openLetter(id: string): Promise<void> {
  try {
    const { letter, group } = await api<{ letter: Letter; group: Letter[] }>(
      `/dead-letters/${id.split("/").map(encodeURIComponent).join("/")}`,
    );
    letters.detail = letter;
    const fields: Array<[string, string]> = [
      ["Letter", letter.id],
      [
        "State",
        letter.state === "replayed"
          ? `replayed as seq ${letter.replayed_as_seq} at ${letter.replayed_at}`
          : letter.state === "discarded"
            ? `discarded at ${letter.replayed_at}`
            : "dead",
      ],
      ["Remote", REMOTE[letter.remote]],
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
        ? group.map((g) =>
            el("li", {}, el("a", { text: g.id, attrs: { href: letterHash(g.id) } }), ` (${stateText(g)}): ${g.sql}`),
          )
        : [el("li", { text: "a row alone (no group)" })]),
    );
    const dead = letter.state === "dead";
    $<HTMLButtonElement>("detail-replay").disabled = !dead || group.some((g) => g.remote !== "not applied");
    $<HTMLButtonElement>("detail-discard").disabled = !dead;
    if (location.hash !== letterHash(id)) history.replaceState(null, "", letterHash(id));
    const panel = $("detail");
    panel.hidden = false;
    panel.focus();
  } catch (error) {
    say(`Cannot open ${id}: ${(error as Error).message}`, true);
  }
}

function closeLetter(): void {
  $("detail").hidden = true;
  letters.detail = null;
  if (location.hash.startsWith("#letter/")) history.replaceState(null, "", location.pathname + location.search);
}

async function act(kind: LetterAction, body: Record<string, unknown>, count: number): Promise<void> {
  const [verb, done] = VERB[kind];
  if (
    !(await confirmAction(
      `${verb} ${count} dead letter${count === 1 ? "" : "s"}? Each is ${WHAT[kind]}.`,
      `${verb} ${count}`,
    ))
  )
    return;
  try {
    const report = await api<{
      done: unknown[];
      unchanged: unknown[];
      refused_letters?: Array<{ id: string; message: string }>;
    }>(`/dead-letters/${kind}`, {
      method: "POST",
      body,
    });
    const refused = report.refused_letters ?? [];
    say(
      `${done} ${report.done.length} letter(s)${report.unchanged.length ? `; ${report.unchanged.length} were replayed or discarded before` : ""}${refused.length ? `; ${refused.length} refused: ${refused.length === 1 ? refused[0]!.message : "the remote applied them or may have (see each letter)"}` : ""}.`,
      refused.length > 0,
    );
    letters.selected.clear();
    closeLetter();
  } catch (error) {
    say(`${verb} refused: ${(error as Error).message}`, true);
  }
  await Promise.all([loadLetters(), afterAction()]);
}

async function actOnFilter(kind: LetterAction): Promise<void> {
  const { app, ...filter } = letters.filter;
  // The count the operator saw goes with the filter: the server acts only if it still matches exactly that many.
  await act(kind, { filter: { ...(app ? { app } : {}), ...filter }, expect: letters.total }, letters.total);
}
