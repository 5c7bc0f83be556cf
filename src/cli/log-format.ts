// How the CLI writes one log record: `pretty` for a person at a terminal, `json` (one object per
// line) for journald and log shippers.
import type { LogObject } from "consola";
import { inspect } from "node:util";
import { isFieldBag } from "../logger.ts";

/** `pretty` = consola's human reporter; `json` = one JSON object per line. */
export const LOG_FORMATS = ["pretty", "json"] as const;
/** One of LOG_FORMATS. */
export type LogFormat = (typeof LOG_FORMATS)[number];

/**
 * `[level] message` as consola's basic reporter writes it, an Error as its message (no stack).
 * Structured fields (a plain object) are for JSON logs: the message already says it for a human.
 */
export function prettyLine(obj: LogObject): string {
  const text = (obj.args ?? []).filter((a) => !isFieldBag(a)).map((a) => (a instanceof Error ? a.message : textOf(a)));
  return `[${levelName(obj)}] ${text.join(" ")}`;
}

/**
 * A log argument that is neither an Error nor a field bag, as text: a string as it is, anything else
 * inspected on one line.
 */
function textOf(arg: unknown): string {
  return typeof arg === "string" ? arg : inspect(arg, { breakLength: Infinity });
}

/**
 * One log record as a single JSON line: time, level, msg, optional tag, fields and err. Field bags
 * (plain objects, as for prettyLine) become keys; any other value is part of msg, written as prettyLine writes it.
 */
export function jsonLine(obj: LogObject): string {
  const record: Record<string, unknown> = { time: obj.date.toISOString(), level: levelName(obj), msg: "" };
  if (obj.tag) record.tag = obj.tag;
  const text: string[] = [];
  for (const arg of obj.args ?? []) {
    if (arg instanceof Error) record.err = errorJson(arg);
    else if (isFieldBag(arg)) Object.assign(record, arg);
    else text.push(textOf(arg));
  }
  if (typeof obj.message === "string" && obj.message) text.unshift(obj.message);
  record.msg = text.join(" ");
  return JSON.stringify(record, (_k, v) => (typeof v === "bigint" ? v.toString() : v));
}

function levelName(obj: LogObject): string {
  if (obj.type === "fatal" || obj.type === "error") return "error";
  if (obj.type === "warn") return "warn";
  if (obj.type === "debug" || obj.type === "trace" || obj.type === "verbose") return "debug";
  return "info";
}

function errorJson(err: Error, depth = 0): Record<string, unknown> {
  const out: Record<string, unknown> = { name: err.name, message: err.message };
  const code = (err as { code?: unknown }).code;
  if (code !== undefined) out.code = code;
  if (err.cause instanceof Error && depth < 5) out.cause = errorJson(err.cause, depth + 1);
  return out;
}
