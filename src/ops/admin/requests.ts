// What the admin API accepts, checked before anything is read or changed: bodies (JSON, bounded,
// no unknown field), the dead-letter filter of the list's query and of the actions, ids, seqs.
// Every refusal is a RequestError: a 4xx with a code and a message that quotes no secret.
import { didYouMean } from "../../config/suggest.ts";
import type { DeadLetterFilter } from "../../outbox/dead-letters.ts";
import { tableNameProblem } from "../../outbox/table-name.ts";

/** The largest request body the admin API reads: ids of a thousand letters fit well within it. */
export const MAX_BODY_BYTES = 64 * 1024;
/** The most ids one action may name; a larger selection is a filter with `expect`. */
const MAX_IDS = 1000;

/** A request refused at the door: its HTTP status, a stable code and why. */
export class RequestError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "RequestError";
  }
}

const bad = (message: string) => new RequestError(400, "E_USAGE", message);

/**
 * The dead-letter filter as the API spells it (the list's query fields): `app` picks the location, the rest
 * select letters.
 */
export interface LetterFilter {
  app?: string;
  filter: DeadLetterFilter;
}

/** One dead letter named by id: `{app}/{namespace}/{seq}`, the path of its detail. */
export interface LetterId {
  app: string;
  namespace: string;
  seq: number;
}

/** What an action on dead letters selects: letters named by id, or a filter and the count the operator saw. */
export type Selection = { kind: "ids"; ids: LetterId[] } | { kind: "filter"; filter: LetterFilter; expect: number };

/**
 * A replay or discard request: its selection, whether it only says what it would do, and (a replay) whether
 * letters in doubt go too.
 */
export interface LetterAction {
  selection: Selection;
  dryRun: boolean;
  force: boolean;
}

/** The fields that select dead letters, in the list's query and an action's `filter`. */
const FILTER_FIELDS = ["app", "namespace", "key", "reason", "error", "since", "until"] as const;
/** What the list adds: which letters by state, and the page. */
const LIST_FIELDS = [...FILTER_FIELDS, "state", "cursor", "limit"] as const;
/** Which letters the list shows: dead (neither replayed nor discarded, the default), replayed, discarded, or all. */
const STATES = ["dead", "replayed", "discarded", "all"] as const;
export type LetterState = (typeof STATES)[number];
/** `state=skipped`, the word of earlier versions for discarded letters, still answers as `discarded`. */
const STATE_ALIASES: Record<string, LetterState> = { skipped: "discarded" };

/**
 * Reads a request's JSON body: `application/json`, at most MAX_BODY_BYTES (counted as it
 * arrives, whatever Content-Length says), one JSON object. An empty body is `{}` where `optional`.
 */
export async function readJsonBody(
  req: Request,
  options: { optional?: boolean } = {},
): Promise<Record<string, unknown>> {
  const length = Number(req.headers.get("content-length") ?? "NaN");
  if (length > MAX_BODY_BYTES) throw tooLarge();
  const chunks: Uint8Array[] = [];
  let size = 0;
  if (req.body) {
    for await (const chunk of req.body) {
      size += chunk.byteLength;
      if (size > MAX_BODY_BYTES) throw tooLarge();
      chunks.push(chunk);
    }
  }
  if (size === 0) {
    if (options.optional) return {};
    throw bad('expected a JSON object body (Content-Type: application/json), e.g. {"ids": ["app/table/17"]}');
  }
  const type = req.headers.get("content-type") ?? "";
  if (!/^application\/json\s*(;|$)/i.test(type))
    throw new RequestError(
      415,
      "E_USAGE",
      `expected Content-Type: application/json, got ${JSON.stringify(type.slice(0, 80))}`,
    );
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(Buffer.concat(chunks)));
  } catch {
    throw bad("the body is not valid JSON (UTF-8)");
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw bad("the body must be a JSON object");
  return value as Record<string, unknown>;
}

function tooLarge(): RequestError {
  return new RequestError(413, "E_USAGE", `the body is larger than ${MAX_BODY_BYTES} bytes`);
}

/**
 * Refuses every field of `object` not in `allowed`, naming it (with a suggestion), so a typo never widens an
 * action.
 */
export function onlyFields(object: Record<string, unknown>, allowed: readonly string[], where: string): void {
  for (const field of Object.keys(object))
    if (!allowed.includes(field))
      throw bad(`unknown field "${field}" in ${where}${didYouMean(field, allowed)} (allowed: ${allowed.join(", ")})`);
}

/** The dead-letter filter of `fields` (strings, as a query gives them or a body's `filter` holds them). */
function parseFilter(fields: Record<string, unknown>, where: string): LetterFilter {
  const text = (name: string, max: number): string | undefined => {
    const v = fields[name];
    if (v === undefined) return undefined;
    if (typeof v !== "string" || v === "" || v.length > max || !v.isWellFormed())
      throw bad(`${where}.${name}: expected a non-empty string of at most ${max} characters`);
    return v;
  };
  const time = (name: string): Date | undefined => {
    const v = text(name, 64);
    if (v === undefined) return undefined;
    const ms = /^\d{4}-\d{2}-\d{2}/.test(v) ? Date.parse(v) : Number.NaN;
    if (Number.isNaN(ms))
      throw bad(`${where}.${name}: expected an ISO 8601 time (2026-11-30T06:54:00Z), got ${JSON.stringify(v)}`);
    return new Date(ms);
  };
  const app = text("app", 200);
  const namespace = text("namespace", 200);
  if (namespace !== undefined) {
    const problem = tableNameProblem(namespace);
    if (problem !== null) throw bad(`${where}.namespace: ${problem}`);
  }
  const filter: DeadLetterFilter = {};
  if (namespace !== undefined) filter.namespace = namespace;
  const reason = text("reason", 100);
  if (reason !== undefined) filter.reason = reason;
  const error = text("error", 200);
  if (error !== undefined) filter.error = error;
  const since = time("since");
  if (since !== undefined) filter.since = since;
  const until = time("until");
  if (until !== undefined) filter.until = until;
  // A key as a producer gives it: its text (an integer key by its digits, as stored).
  const key = fields.key;
  if (key !== undefined) {
    if (typeof key === "number" && Number.isSafeInteger(key)) filter.key = String(key);
    else filter.key = text("key", 256)!;
  }
  return { ...(app === undefined ? {} : { app }), filter };
}

/** The list's query: its filter, the state shown, the page (cursor, 1–500 letters, 50 by default). */
export function parseListQuery(params: URLSearchParams): {
  filter: LetterFilter;
  state: LetterState;
  cursor: string | null;
  limit: number;
} {
  const fields: Record<string, string> = {};
  for (const [name, value] of params) {
    if (name in fields) throw bad(`query field "${name}" given twice`);
    fields[name] = value;
  }
  onlyFields(fields, LIST_FIELDS, "the query");
  const state = (STATE_ALIASES[fields.state ?? ""] ?? fields.state ?? "dead") as LetterState;
  if (!STATES.includes(state)) throw bad(`query.state: expected one of ${STATES.join(", ")}`);
  const limit = fields.limit === undefined ? 50 : Number(fields.limit);
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > 500 || !/^\d+$/.test(fields.limit ?? "50"))
    throw bad("query.limit: expected an integer from 1 to 500");
  const { state: _s, cursor, limit: _l, ...rest } = fields;
  return { filter: parseFilter(rest, "query"), state, cursor: cursor ?? null, limit };
}

/** `{app}/{namespace}/{seq}`. */
function parseLetterId(id: unknown, where: string): LetterId {
  if (typeof id !== "string" || id.length > 500) throw bad(`${where}: expected an id "app/table/seq"`);
  const parts = id.split("/");
  if (parts.length !== 3)
    throw bad(`${where}: expected an id "app/table/seq", got ${JSON.stringify(id.slice(0, 100))}`);
  const [app, namespace, seqText] = parts as [string, string, string];
  const problem = tableNameProblem(namespace);
  if (problem !== null) throw bad(`${where}: ${problem}`);
  return { app, namespace, seq: parseSeq(seqText, where) };
}

/** A positive integer seq, from a path segment or a JSON number. */
export function parseSeq(value: unknown, where: string): number {
  const n = typeof value === "string" && /^\d{1,16}$/.test(value) ? Number(value) : value;
  if (typeof n !== "number" || !Number.isSafeInteger(n) || n < 1)
    throw bad(`${where}: expected a positive integer seq`);
  return n;
}

/**
 * A replay or discard body: `{ "ids": [...] }` or `{ "filter": {...}, "expect": N }`, `dry_run`, and
 * (a replay) `force`: letters in doubt are replayed too. A filter always needs `expect` — the count
 * the operator saw — so no request acts on letters nobody counted, and an empty filter (every
 * letter) is refused without it like any other.
 */
export function parseLetterAction(body: Record<string, unknown>): LetterAction {
  onlyFields(body, ["ids", "filter", "expect", "dry_run", "force"], "the body");
  const dryRun = body.dry_run ?? false;
  if (typeof dryRun !== "boolean") throw bad("dry_run: expected true or false");
  const force = body.force ?? false;
  if (typeof force !== "boolean") throw bad("force: expected true or false");
  if ((body.ids === undefined) === (body.filter === undefined))
    throw bad('give either "ids" (the letters) or "filter" with "expect" (the count you saw), not both or neither');
  if (body.ids !== undefined) {
    if (body.expect !== undefined) throw bad('"expect" goes with "filter": ids name their letters');
    if (!Array.isArray(body.ids) || body.ids.length === 0 || body.ids.length > MAX_IDS)
      throw bad(`ids: expected 1 to ${MAX_IDS} ids "app/table/seq"`);
    return {
      dryRun,
      force,
      selection: { kind: "ids", ids: body.ids.map((id, i) => parseLetterId(id, `ids[${i}]`)) },
    };
  }
  const filter = body.filter;
  if (typeof filter !== "object" || filter === null || Array.isArray(filter))
    throw bad("filter: expected an object of the list's query fields");
  onlyFields(filter as Record<string, unknown>, FILTER_FIELDS, "filter");
  if (body.expect === undefined)
    throw bad(
      `"filter" needs "expect": the number of letters you saw it select${Object.keys(filter).length === 0 ? " (this filter selects every letter)" : ""}`,
    );
  const expect = body.expect;
  if (typeof expect !== "number" || !Number.isSafeInteger(expect) || expect < 0)
    throw bad("expect: expected the count of letters you saw, an integer ≥ 0");
  return {
    dryRun,
    force,
    selection: { kind: "filter", filter: parseFilter(filter as Record<string, unknown>, "filter"), expect },
  };
}
