// What every part of the console shares: the caller's token (this tab's sessionStorage only) and
// what the API says it may do, the one way to ask the API, the message line, and the dialog that
// asks before every action.

import { type Access, api as call } from "./api.ts";
import { $ } from "./dom.ts";

const TOKEN_KEY = "sqloutbox.token";

/** The token the operator signed in with, and what the API says it may do. */
export const session = {
  token: sessionStorage.getItem(TOKEN_KEY),
  access: null as Access | null,
};

/** Keeps `token` for this tab (null: signed out). */
export function setToken(token: string | null): void {
  session.token = token;
  if (token === null) sessionStorage.removeItem(TOKEN_KEY);
  else sessionStorage.setItem(TOKEN_KEY, token);
}

/** The admin API, asked with this tab's token. */
export const api = <T>(path: string, init: { method?: string; body?: unknown } = {}) =>
  call<T>(path, session.token, init);

/** Whether the caller holds the write token (the server refuses actions otherwise anyway). */
export const canAct = () => session.access?.can_act === true;

/** Shows `text` on the message line; `bad` in red. */
export function say(text: string, bad = false): void {
  const m = $("message");
  m.textContent = text;
  m.className = bad ? "message bad" : "message";
  m.hidden = false;
}

/** Asks `text` in the dialog, which starts on Cancel; true when the operator chose `ok`. */
export function confirmAction(text: string, ok: string): Promise<boolean> {
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
