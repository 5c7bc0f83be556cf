// Building the page's nodes (text only: nothing from the API is ever parsed as HTML) and the
// words of ages and times.

/** The element with id `id`. */
export const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;

/**
 * A new `tag` element with its text, class, `data-label` (the cell's name on a phone) and attributes, and its
 * children.
 */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: { text?: string; className?: string; label?: string; attrs?: Record<string, string> } = {},
  ...children: Array<Node | string>
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (props.text !== undefined) node.textContent = props.text;
  if (props.className) node.className = props.className;
  if (props.label) node.dataset.label = props.label;
  for (const [k, v] of Object.entries(props.attrs ?? {})) node.setAttribute(k, v);
  node.append(...children);
  return node;
}

/** A table cell labelled for the phone layout. */
export function cell(label: string, value: Node | string, className = ""): HTMLTableCellElement {
  return el("td", { label, className }, value);
}

/** A real button that runs `onClick`. */
export function button(text: string, onClick: () => void, className = "act"): HTMLButtonElement {
  const b = el("button", { text, className, attrs: { type: "button" } });
  b.addEventListener("click", onClick);
  return b;
}

/** `45s`, `3m20s`, `2h5m`, `1d4h`; `-` for none. */
export function age(ms: number | null): string {
  if (ms === null) return "-";
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${s % 60 ? `${s % 60}s` : ""}`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86_400)}d${Math.floor((s % 86_400) / 3600)}h`;
}

/** How long before `now` `iso` was: `12s ago`. */
export function ago(iso: string | null, now: number): string {
  return iso === null ? "-" : `${age(Math.max(0, now - Date.parse(iso)))} ago`;
}

/** How long after `now` `iso` is: `in 1m52s`, `now` once due. */
export function until(iso: string | null, now: number): string {
  if (iso === null) return "-";
  const ms = Date.parse(iso) - now;
  return ms <= 0 ? "now" : `in ${age(ms)}`;
}

/** The error with its class in front, unless it already starts with it (the built-in writers' messages do). */
export function withClass(error: string, errorClass: string | null): string {
  return errorClass && !error.startsWith(`${errorClass}:`) ? `${errorClass}: ${error}` : error;
}
