// Logging for the CLI: consola, always on stderr (stdout carries command output and --json),
// level from --log-level / LOG_LEVEL, and a one-object-per-line JSON format for journald.
import { createConsola, type ConsolaInstance, type LogObject } from "consola";
import { inspect } from "node:util";
import { UsageError } from "../errors.ts";
import { isFieldBag } from "../logger.ts";

/** Accepted log levels, least to most verbose. */
export const LOG_LEVELS = ["error", "warn", "info", "debug"] as const;
/** One of LOG_LEVELS. */
export type LogLevelName = (typeof LOG_LEVELS)[number];
/** `pretty` = consola's human reporter; `json` = one JSON object per line. */
export const LOG_FORMATS = ["pretty", "json"] as const;
/** One of LOG_FORMATS. */
export type LogFormat = (typeof LOG_FORMATS)[number];

const CONSOLA_LEVEL: Record<LogLevelName, number> = { error: 0, warn: 1, info: 3, debug: 4 };

/** The logging flags every command accepts (they may appear anywhere on the command line). */
export const logArgs = {
  "log-level": {
    type: "string",
    valueHint: "error|warn|info|debug",
    description: "Log verbosity (env LOG_LEVEL; default info)",
  },
  "log-format": {
    type: "string",
    valueHint: "pretty|json",
    description: "Log format: json = one object per line, for journald (env LOG_FORMAT; default pretty)",
  },
} as const;

/** Reads `--log-level`/`--log-format` from anywhere in argv, falling back to LOG_LEVEL/LOG_FORMAT. */
export function logOptionsFrom(
  argv: readonly string[],
  env: Record<string, string | undefined>,
): { level: LogLevelName; format: LogFormat } {
  const level = flagValue(argv, "log-level") ?? env.LOG_LEVEL ?? "info";
  const format = flagValue(argv, "log-format") ?? env.LOG_FORMAT ?? "pretty";
  if (!(LOG_LEVELS as readonly string[]).includes(level.toLowerCase())) {
    throw new UsageError(`invalid log level "${level}": expected one of ${LOG_LEVELS.join(", ")}`);
  }
  if (!(LOG_FORMATS as readonly string[]).includes(format.toLowerCase())) {
    throw new UsageError(`invalid log format "${format}": expected one of ${LOG_FORMATS.join(", ")}`);
  }
  return { level: level.toLowerCase() as LogLevelName, format: format.toLowerCase() as LogFormat };
}

function flagValue(argv: readonly string[], name: string): string | undefined {
  let value: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--") break;
    if (arg === `--${name}`) value = argv[++i];
    else if (arg.startsWith(`--${name}=`)) value = arg.slice(name.length + 3);
  }
  return value;
}

/**
 * Creates the CLI logger; it satisfies the core's `Logger` interface. `timestamps` (the daemon,
 * runservice) starts every pretty line with the ISO time, as a log file read later needs.
 */
export function createCliLogger(options: { level: LogLevelName; format: LogFormat; timestamps?: boolean }): ConsolaInstance {
  const stream = process.stderr;
  const reporter =
    options.format === "json"
      ? (obj: LogObject) => stream.write(`${jsonLine(obj)}\n`)
      : options.timestamps
        ? (obj: LogObject) => stream.write(`${obj.date.toISOString()} ${prettyLine(obj)}\n`)
        : undefined;
  return createConsola({
    level: CONSOLA_LEVEL[options.level],
    stdout: stream,
    stderr: stream,
    // A daemon's repeated lines are information (each outage retry), not noise to fold away.
    throttle: options.format === "json" || options.timestamps ? 0 : 1000,
    ...(reporter ? { reporters: [{ log: reporter }] } : { fancy: Boolean(stream.isTTY) }),
  });
}

/**
 * `[level] message` as consola's basic reporter writes it, an Error as its message (no stack).
 * Structured fields (a plain object) are for JSON logs: the message already says it for a human.
 */
function prettyLine(obj: LogObject): string {
  const text = (obj.args ?? [])
    .filter((a) => !isFieldBag(a))
    .map((a) => (a instanceof Error ? a.message : typeof a === "string" ? a : inspect(a, { breakLength: Infinity })));
  return `[${levelName(obj)}] ${text.join(" ")}`;
}

/** One log record as a single JSON line: time, level, msg, optional tag, fields and err. */
export function jsonLine(obj: LogObject): string {
  const record: Record<string, unknown> = { time: obj.date.toISOString(), level: levelName(obj), msg: "" };
  if (obj.tag) record.tag = obj.tag;
  const text: string[] = [];
  for (const arg of obj.args ?? []) {
    if (arg instanceof Error) record.err = errorJson(arg);
    else if (arg !== null && typeof arg === "object" && !Array.isArray(arg)) Object.assign(record, arg);
    else text.push(typeof arg === "string" ? arg : JSON.stringify(arg));
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
