// The admin API's dead letters: the list (filtered, paged, with its total), one letter with its
// group, and replay or discard of a selection — letters named by id, or a filter guarded by the
// count the operator saw. Reads open files read-only; an action opens only files that hold its letters.
import fs from "node:fs";
import { NotFoundError } from "../../errors.ts";
import {
  type DeadLetterFilter,
  type DeadLetterRef,
  type FiledDeadLetter,
  findDeadLetterRefs,
  readDeadLetters,
} from "../../outbox/dead-letters.ts";
import { actOnSelection, type DeadAction } from "../../outbox/dead-selection.ts";
import { type AdminApp, appNamed, existingTableFile } from "./locations.ts";
import type { LetterView } from "./letter-view.ts";
import { type LetterAction, type LetterFilter, type LetterId, type LetterState, RequestError } from "./requests.ts";

/** The list: one page of letters, newest first, the total the filter selects, and where the next page starts. */
export interface LetterList {
  total: number;
  letters: LetterView[];
  next_cursor: string | null;
  unreadable: Array<{ file: string; error: string }>;
}

/**
 * What a replay or discard did (or, `dry_run`, would do). `refused` says why it stopped: then `done` is what
 * had been done.
 */
export interface ActionReport {
  action: DeadAction;
  dry_run: boolean;
  /** The letters the selection named or matched. */
  total: number;
  expect?: number;
  /** Letters replayed (with `new_seq`) or discarded — with their groups. In a dry run: the letters that would be. */
  done: Array<{ id: string; new_seq?: number | null }>;
  /** Letters left as they were: replayed or discarded before. */
  unchanged: Array<{ id: string; state: "replayed" | "discarded"; replayed_as_seq: number | null }>;
  /**
   * A replay's letters left dead: the remote applied them, or may have (in doubt, not forced); `message` says
   * what to do.
   */
  refused_letters: Array<{ id: string; remote: "in doubt" | "applied"; message: string }>;
  refused?: { code: string; message: string };
}

type Located = DeadLetterRef & { app: string };

const stateOf = (l: Pick<DeadLetterRef, "replayedAt" | "replayedAsSeq">): LetterView["state"] =>
  l.replayedAt === null ? "dead" : l.replayedAsSeq === null ? "discarded" : "replayed";
const idOf = (app: string, namespace: string, seq: number) => `${app}/${namespace}/${seq}`;

/** Whether a location exists yet (producers create it): nothing to read before. */
function exists(app: AdminApp): boolean {
  return fs.existsSync(app.dbFile ?? app.dbDir);
}

/** The letters of every selected app that `filter` and `state` select (without SQL and payload), newest first. */
function locate(
  apps: readonly AdminApp[],
  selected: LetterFilter,
  state: LetterState,
  unreadable: LetterList["unreadable"],
): Located[] {
  const chosen = selected.app === undefined ? apps : [appNamed(apps, selected.app)];
  const filter: DeadLetterFilter = { ...selected.filter };
  if (state !== "all") filter.replayed = state !== "dead";
  const out: Located[] = [];
  for (const app of chosen) {
    if (!exists(app)) continue;
    const refs = findDeadLetterRefs(app, filter, {
      onError: (file, error) => unreadable.push({ file, error: error.message }),
    });
    for (const ref of refs) if (state === "all" || stateOf(ref) === state) out.push({ ...ref, app: app.name });
  }
  return out.sort(newestFirst);
}

/** The list's order: newest dead_at first, then app, table, seq — a total order, so a cursor is exact. */
function newestFirst(a: SortKey, b: SortKey): number {
  return (
    (a.deadAt < b.deadAt ? 1 : a.deadAt > b.deadAt ? -1 : 0) ||
    a.app.localeCompare(b.app) ||
    a.namespace.localeCompare(b.namespace) ||
    b.seq - a.seq
  );
}
type SortKey = { deadAt: string; app: string; namespace: string; seq: number };

const encodeCursor = (k: SortKey) =>
  Buffer.from(JSON.stringify([k.deadAt, k.app, k.namespace, k.seq])).toString("base64url");
function decodeCursor(cursor: string): SortKey {
  try {
    const [deadAt, app, namespace, seq] = JSON.parse(Buffer.from(cursor, "base64url").toString("utf8")) as unknown[];
    if (
      typeof deadAt === "string" &&
      typeof app === "string" &&
      typeof namespace === "string" &&
      Number.isSafeInteger(seq)
    )
      return { deadAt, app, namespace, seq: seq as number };
  } catch {}
  throw new RequestError(
    400,
    "E_USAGE",
    "query.cursor: not a cursor this API gave (take next_cursor of the previous page)",
  );
}

/** One page of the list (see LetterList). */
export function listLetters(
  apps: readonly AdminApp[],
  query: { filter: LetterFilter; state: LetterState; cursor: string | null; limit: number },
): LetterList {
  const unreadable: LetterList["unreadable"] = [];
  const all = locate(apps, query.filter, query.state, unreadable);
  const after = query.cursor === null ? null : decodeCursor(query.cursor);
  const start = after === null ? 0 : all.findIndex((l) => newestFirst(l, after) > 0);
  const page = start < 0 ? [] : all.slice(start, start + query.limit);
  const more = start >= 0 && start + query.limit < all.length;
  return {
    total: all.length,
    letters: fullRows(page).map((l) => view(l, { sqlChars: 300 })),
    next_cursor: more ? encodeCursor(page.at(-1)!) : null,
    unreadable,
  };
}

/** The full rows of `refs`, in their order, each file read once. */
function fullRows(refs: readonly Located[]): Array<FiledDeadLetter & { app: string }> {
  const byUnit = new Map<string, Located[]>();
  for (const r of refs) {
    const key = `${r.file}\0${r.namespace}`;
    byUnit.set(key, [...(byUnit.get(key) ?? []), r]);
  }
  const rows = new Map<string, FiledDeadLetter>();
  for (const unit of byUnit.values()) {
    const { file, namespace } = unit[0]!;
    for (const row of readDeadLetters(file, { namespace, seqs: unit.map((r) => r.seq) }))
      rows.set(`${file}\0${namespace}\0${row.seq}`, row);
  }
  return refs.flatMap((r) => {
    const row = rows.get(`${r.file}\0${r.namespace}\0${r.seq}`);
    return row ? [{ ...row, app: r.app }] : [];
  });
}

function view(l: FiledDeadLetter & { app: string }, options: { sqlChars?: number } = {}): LetterView {
  const sql =
    options.sqlChars !== undefined && l.tag.length > options.sqlChars ? `${l.tag.slice(0, options.sqlChars)}…` : l.tag;
  return {
    id: idOf(l.app, l.namespace, l.seq),
    app: l.app,
    namespace: l.namespace,
    seq: l.seq,
    group: l.grp,
    state: stateOf(l),
    remote: l.remote,
    reason: l.reason,
    attempts: l.attempts,
    error: l.error,
    error_class: l.errorClass,
    created_at: l.createdAt,
    dead_at: l.deadAt,
    replayed_at: l.replayedAt,
    replayed_as_seq: l.replayedAsSeq,
    source: l.source,
    sql,
    args: parseArgs(l.payload),
  };
}

function parseArgs(payload: string): unknown {
  try {
    return JSON.parse(payload);
  } catch {
    return payload;
  }
}

/** One letter in full — the statement, its arguments, its error — and every letter of its group. */
export function letterDetail(apps: readonly AdminApp[], id: LetterId): { letter: LetterView; group: LetterView[] } {
  const app = appNamed(apps, id.app);
  const file = existingTableFile(app, id.namespace);
  const [letter] = readDeadLetters(file, { namespace: id.namespace, seqs: [id.seq] });
  if (!letter) throw new NotFoundError(`no dead letter ${idOf(app.name, id.namespace, id.seq)}`);
  const group = letter.grp === null ? [letter] : readDeadLetters(file, { grp: letter.grp });
  return { letter: view({ ...letter, app: app.name }), group: group.map((l) => view({ ...l, app: app.name })) };
}

/**
 * Replays or discards a selection (actOnSelection, as `dead-letter replay` and `discard` do). Ids:
 * every letter must exist (404, nothing changed, otherwise); letters replayed or discarded before
 * are left as they are. A filter: its letters are counted first, across every file, and nothing is
 * done unless there are exactly `expect` (409); then each file and table is acted on in ONE write
 * transaction that checks first that its letters are still exactly those counted. All of it runs
 * without a pause: the drain of this process cannot dead-letter, replay or change a letter in
 * between. Another process (an operator's CLI) that changes a table's letters in that instant
 * makes its check fail: the answer is then a 409 that lists what the tables before it had done
 * (`refused`, `done`). A dry run counts what the real run does: each letter's group with it.
 */
export function actOnLetters(kind: DeadAction, apps: readonly AdminApp[], action: LetterAction): ActionReport {
  const { selection, dryRun, force } = action;
  let letters: Located[];
  let guard: DeadLetterFilter | undefined;
  if (selection.kind === "ids") letters = lettersOfIds(apps, selection.ids);
  else {
    const unreadable: LetterList["unreadable"] = [];
    letters = locate(apps, selection.filter, "dead", unreadable);
    if (unreadable.length > 0)
      throw new RequestError(
        503,
        "E_STORAGE",
        `cannot count the letters: ${unreadable[0]!.file}: ${unreadable[0]!.error}`,
      );
    guard = selection.filter.filter;
  }
  const expect = selection.kind === "filter" ? selection.expect : undefined;
  const done = actOnSelection(kind, letters, { dryRun, expect, guard, stopOnFailure: true, force });
  const appOf = new Map(letters.map((l) => [l.file, l.app]));
  const id = (l: { file: string; namespace: string; seq: number }) => idOf(appOf.get(l.file)!, l.namespace, l.seq);
  const report: ActionReport = {
    action: kind,
    dry_run: dryRun,
    total: done.selected,
    ...(expect === undefined ? {} : { expect }),
    done: done.done.map((l) => ({ id: id(l), ...(l.newSeq === undefined ? {} : { new_seq: l.newSeq }) })),
    unchanged: done.unchanged.map((l) => ({
      id: id(l),
      state: l.replayedAsSeq === null ? "discarded" : "replayed",
      replayed_as_seq: l.replayedAsSeq,
    })),
    refused_letters: done.refusedLetters.map((l) => ({ id: id(l), remote: l.remote, message: l.message })),
  };
  if (done.refused) report.refused = done.refused;
  const failed = done.failed[0];
  if (failed)
    report.refused = {
      code: failed.error.code,
      message: `${failed.error.message}${report.done.length > 0 ? ` (${report.done.length} letter(s) of the tables before it were ${kind === "replay" ? "replayed" : "discarded"}: see done)` : ""}`,
    };
  return report;
}

/** The letters ids name, each found (404 for the first that is not: nothing is changed then). */
function lettersOfIds(apps: readonly AdminApp[], ids: readonly LetterId[]): Located[] {
  const found: Located[] = [];
  const seen = new Set<string>();
  for (const id of ids) {
    const app = appNamed(apps, id.app);
    const key = idOf(app.name, id.namespace, id.seq);
    if (seen.has(key)) continue;
    seen.add(key);
    const file = existingTableFile(app, id.namespace);
    const [letter] = readDeadLetters(file, { namespace: id.namespace, seqs: [id.seq] });
    if (!letter) throw new NotFoundError(`no dead letter ${key}: nothing was changed`);
    found.push({ ...letter, app: app.name });
  }
  return found;
}
