import type { WriteError } from "../errors.ts";
import type { ErrorKind } from "./classify.ts";
import type { Statement, WriteResult } from "./writer.ts";

/** How one statement of a pass ended: applied (`result`), failed (`error`), or never attempted. */
export type Outcome = { result: WriteResult } | { error: unknown } | { notRun: true };

/**
 * One optimistic pass: runs `stmts` in ONE remote transaction. It commits when every outcome is a
 * result, or — engines with statement-level atomicity (MySQL) — when every failure is the row's
 * fault and no later statement of a failed statement's namespace was applied; otherwise it rolls
 * back everything (`committed: false`). Throws for failures of the transaction itself.
 *
 * `commitError`: every statement ran but COMMIT failed and rolled back (`committed: false`), e.g. a
 * DEFERRABLE INITIALLY DEFERRED constraint, which no statement index blames. The caller may then
 * run passes `checking`: the pass must make such failures show up on the statement that causes
 * them (PostgreSQL: SET CONSTRAINTS ALL IMMEDIATE; SQLite/libSQL: each statement committed on its
 * own, and then `committed` is true with the statements of a failed namespace left `notRun`).
 */
export type Pass = (stmts: Statement[], checking: boolean) => Promise<PassResult>;

/** What a `Pass` reports: see `Pass`. */
export type PassResult = { outcomes: Outcome[]; committed: boolean; commitError?: unknown };

/**
 * Savepoint semantics without a savepoint per statement: the batch runs optimistically as one pass;
 * when a statement fails and the pass rolled back, that statement is reported failed, the rest of
 * its namespace skipped, and the remaining statements run again. Statements before the failure run
 * in the same context as before, so the outcome equals "savepoint per statement" while the common
 * (all ok) case costs one pass. A namespace fails at most once per batch, so at most
 * namespaces + 1 passes run. Outage-class errors throw `WriteError` (built by `fail`).
 *
 * A COMMIT that fails with a row-fault code (a deferred constraint) is not an outage: each namespace
 * then runs on its own (one transaction each, so a namespace whose rows satisfy their deferred
 * constraints among themselves still commits), and a namespace whose COMMIT fails again runs
 * `checking`, so the culprit fails on its own instead of the whole target stalling.
 */
export function runIsolated(
  stmts: Statement[],
  pass: Pass,
  classify: (error: unknown) => ErrorKind,
  fail: (message: string, error: unknown) => WriteError,
): Promise<WriteResult[]> {
  return isolate(stmts, pass, classify, fail, "batch");
}

/** `batch`: all namespaces together; `namespace`: one namespace, split off after a failed COMMIT;
 *  `checking`: passes that blame deferred violations on their statement. */
type Mode = "batch" | "namespace" | "checking";

async function isolate(
  stmts: Statement[],
  pass: Pass,
  classify: (error: unknown) => ErrorKind,
  fail: (message: string, error: unknown) => WriteError,
  initial: Mode,
): Promise<WriteResult[]> {
  let mode = initial;
  const results: Array<WriteResult | undefined> = new Array(stmts.length);
  /** Per namespace, the index of its failed statement: later statements of it are skipped. */
  const failedAt = new Map<string, number>();
  const failure = (index: number, error: unknown): WriteResult => {
    const kind = classify(error);
    if (kind.kind === "outage") throw fail(errorText(error), error);
    failedAt.set(stmts[index]!.namespace, index);
    return { ok: false, error: errorText(error), errorClass: kind.errorClass };
  };
  const skipped = (index: number): WriteResult => {
    const { namespace } = stmts[index]!;
    const seq = stmts[failedAt.get(namespace)!]!.seq;
    return { ok: false, skipped: true, error: `skipped: seq ${seq} of namespace "${namespace}" failed earlier in this batch` };
  };

  // A value that is not a BindValue is this statement's fault; no driver gets to guess at it.
  stmts.forEach((stmt, i) => {
    if (results[i] !== undefined) return;
    const bad = invalidArg(stmt.args);
    if (bad === undefined) return;
    failedAt.set(stmt.namespace, i);
    results[i] = { ok: false, error: bad, errorClass: "E_INVALID_ARG" };
    for (let j = i + 1; j < stmts.length; j++) if (stmts[j]!.namespace === stmt.namespace && results[j] === undefined) results[j] = skipped(j);
  });

  let active = stmts.map((_, i) => i).filter((i) => results[i] === undefined);
  while (active.length > 0) {
    const { outcomes, committed, commitError } = await pass(active.map((i) => stmts[i]!), mode === "checking");
    if (outcomes.length !== active.length) throw fail("internal error: a pass returned the wrong number of outcomes", undefined);
    if (commitError !== undefined && !committed) {
      // Checked only at COMMIT: no statement is blamed. If even a checking pass cannot blame one
      // (or the target itself failed), it is an outage as before.
      if (mode === "checking" || classify(commitError).kind === "outage") throw fail(`COMMIT failed: ${errorText(commitError)}`, commitError);
      const namespaces = [...new Set(active.map((i) => stmts[i]!.namespace))];
      if (mode === "namespace" || namespaces.length === 1) {
        mode = "checking";
        continue;
      }
      for (const namespace of namespaces) {
        const own = active.filter((i) => stmts[i]!.namespace === namespace);
        const ownResults = await isolate(own.map((i) => stmts[i]!), pass, classify, fail, "namespace");
        own.forEach((i, j) => (results[i] = ownResults[j]));
      }
      break;
    }
    if (committed) {
      outcomes.forEach((o, j) => {
        const i = active[j]!;
        if ((failedAt.get(stmts[i]!.namespace) ?? Infinity) < i) results[i] = skipped(i);
        else if ("result" in o) results[i] = o.result;
        else if ("error" in o) results[i] = failure(i, o.error);
        else throw fail("internal error: a committed pass left a statement unrun", undefined);
      });
      break;
    }
    const k = outcomes.findIndex((o) => !("result" in o));
    const failed = outcomes[k];
    if (!failed || !("error" in failed)) throw fail("internal error: a pass rolled back without a failed statement", undefined);
    const index = active[k]!;
    results[index] = failure(index, failed.error);
    for (const j of active.slice(k + 1)) {
      if (stmts[j]!.namespace === stmts[index]!.namespace) results[j] = skipped(j);
    }
    active = active.filter((j) => results[j] === undefined);
  }
  return results as WriteResult[];
}

/** Why `args` is not a list of BindValues (string, number, bigint, boolean, null, Uint8Array), or undefined when it is. */
function invalidArg(args: unknown): string | undefined {
  if (!Array.isArray(args)) return `args must be an array, got ${typeof args}`;
  for (let i = 0; i < args.length; i++) {
    const v: unknown = args[i];
    const t = typeof v;
    if (v === null || t === "string" || t === "number" || t === "bigint" || t === "boolean" || v instanceof Uint8Array) continue;
    return `argument ${i + 1} is not a bind value (string, number, bigint, boolean, null or Uint8Array): got ${v === undefined ? "undefined" : Array.isArray(v) ? "an array" : t}`;
  }
  return undefined;
}

/**
 * A `checking` pass for engines that cannot make DEFERRABLE constraints immediate (SQLite,
 * libSQL): `commitOne` runs a statement as its own transaction and reports its result, or the
 * error of the statement or of its COMMIT, so a failing COMMIT blames exactly that statement.
 * Statements of a namespace that failed are not run; an outage throws (built by `fail`) rather
 * than running on, since the statements before it are committed already.
 */
export async function commitEach(
  stmts: Statement[],
  commitOne: (stmt: Statement) => Promise<{ result: WriteResult } | { error: unknown }>,
  classify: (error: unknown) => ErrorKind,
  fail: (message: string, error: unknown) => WriteError,
): Promise<PassResult> {
  const failed = new Set<string>();
  const outcomes: Outcome[] = [];
  for (const stmt of stmts) {
    if (failed.has(stmt.namespace)) {
      outcomes.push({ notRun: true });
      continue;
    }
    const outcome = await commitOne(stmt);
    outcomes.push(outcome);
    if (!("error" in outcome)) continue;
    if (classify(outcome.error).kind === "outage") throw fail(errorText(outcome.error), outcome.error);
    failed.add(stmt.namespace);
  }
  return { outcomes, committed: true };
}

/** The driver's message, prefixed with its most specific code: SQLSTATE, SQLite result code name, or MySQL errno. */
export function errorText(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const e = error as Error & { code?: unknown; errno?: unknown; extendedCode?: unknown };
  const code =
    typeof e.errno === "string" ? e.errno
    : typeof e.extendedCode === "string" ? e.extendedCode
    : typeof e.code === "string" && !e.code.startsWith("ERR_") ? e.code
    : typeof e.errno === "number" && e.errno > 0 ? String(e.errno)
    : typeof e.code === "string" ? e.code
    : undefined;
  return code && !e.message.startsWith(code) ? `${code}: ${e.message}` : e.message;
}
