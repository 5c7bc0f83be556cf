import { memoPerDialect } from "../bounded-memo.ts";
import type { WriteError } from "../errors.ts";
import { statementCount } from "../sql/statement.ts";
import type { Dialect } from "../vocabulary.ts";
import type { ErrorKind } from "./classify.ts";
import { coalesce } from "./coalesce.ts";
import { unitOf, type Statement, type WriteResult } from "./writer.ts";

/** How one statement of a pass ended: applied (`result`), failed (`error`), or never attempted. */
export type Outcome = { result: WriteResult } | { error: unknown } | { notRun: true };

/**
 * One optimistic pass: runs `stmts` in ONE remote transaction. It commits when every outcome is a
 * result, or — engines with statement-level atomicity (MySQL) — when no failed statement's
 * namespace had anything applied; otherwise it rolls back everything (`committed: false`). Throws
 * for failures of the transaction itself.
 *
 * `commitError`: every statement ran but COMMIT failed and rolled back (`committed: false`), e.g. a
 * DEFERRABLE INITIALLY DEFERRED constraint, which no statement index blames. The caller may then
 * run passes `checking`: the pass must make such failures show up on the statement that causes
 * them (PostgreSQL: SET CONSTRAINTS ALL IMMEDIATE; SQLite/libSQL: `blameDeferred`), and commit
 * only when none does.
 */
export type Pass = (stmts: Statement[], checking: boolean) => Promise<PassResult>;

/** What a `Pass` reports: see `Pass`. */
export type PassResult = { outcomes: Outcome[]; committed: boolean; commitError?: unknown };

/** Builds the writer's `WriteError` (masked), marked misconfigured when no retry can fix it. */
export type Fail = (message: string, error: unknown, misconfigured?: boolean) => WriteError;

/**
 * Namespace-atomic batches on top of optimistic passes (a namespace here is a statement's atomic
 * unit, see `unitOf`: tables a transaction links count as one): the batch runs as one pass; when a
 * statement fails and the pass rolled back, that statement is reported failed, every other
 * statement of its namespace `skipped`, and the remaining namespaces run again. So a namespace is
 * applied whole or not at all — what lets the ledger fence that opens it account for exactly its
 * rows — while the common (all ok) case costs one pass. A namespace fails at most once per batch,
 * so at most namespaces + 1 passes run. Outage-class errors throw `WriteError` (built by `fail`).
 *
 * A COMMIT that fails with a row-fault code (a deferred constraint) is not an outage: each namespace
 * then runs on its own (one transaction each, so a namespace whose rows satisfy their deferred
 * constraints among themselves still commits), and a namespace whose COMMIT fails again runs
 * `checking`, so the culprit fails on its own instead of the whole target stalling.
 *
 * With `coalesce`, the first pass sends runs of same-text INSERTs as multi-row statements (see
 * `coalesce`); their rows report `rowsAffected` only where it is known (see `memberResult`). When a merged
 * statement fails, nobody knows which of its rows is at fault, so what it carried runs again
 * statement by statement — the same passes as without coalescing, one pass later.
 */
export function runIsolated(
  stmts: Statement[],
  pass: Pass,
  classify: (error: unknown) => ErrorKind,
  fail: Fail,
  dialect: Dialect,
  options: { coalesce?: boolean } = {},
): Promise<WriteResult[]> {
  const refused = stmts.map((s) => notOneStatement(s.sql, dialect));
  return isolate(stmts, pass, classify, fail, "batch", refused, options.coalesce === true ? dialect : null);
}

// Statement texts repeat thousands of times in a backlog: count each one once.
const counted = memoPerDialect<string | null>(4096);

/**
 * Why `sql` is not exactly one statement as `dialect` reads it, or null. Drivers do not all refuse
 * a second statement (bun:sqlite ignores it, Bun's MySQL client runs it when there are no
 * arguments), and a row queued before producers checked at push must never run `…; DROP TABLE`.
 */
function notOneStatement(sql: string, dialect: Dialect): string | null {
  return counted(dialect).get(sql, () => {
    try {
      const n = statementCount(sql, dialect);
      return n === 1
        ? null
        : n === 0
          ? "the statement text is empty"
          : `the text holds ${n} statements; a row must be exactly one`;
    } catch (error) {
      return (error as Error).message;
    }
  });
}

/** `batch`: all namespaces together; `namespace`: one namespace, split off after a failed COMMIT;
 *  `checking`: passes that blame deferred violations on their statement. */
type Mode = "batch" | "namespace" | "checking";

async function isolate(
  stmts: Statement[],
  pass: Pass,
  classify: (error: unknown) => ErrorKind,
  fail: Fail,
  initial: Mode,
  refused: Array<string | null> = [],
  coalesceFor: Dialect | null = null,
): Promise<WriteResult[]> {
  let mode = initial;
  const results: Array<WriteResult | undefined> = new Array(stmts.length);
  /** Per failed unit (see unitOf: a namespace, or tables a transaction links), the index of its failed statement. */
  const failedAt = new Map<string, number>();
  /** Records statement `index` as the failure of its unit and every other statement of it as skipped. */
  const failNamespace = (index: number, result: WriteResult) => {
    const { namespace, seq } = stmts[index]!;
    const unit = unitOf(stmts[index]!);
    failedAt.set(unit, index);
    results[index] = result;
    const skipped: WriteResult = {
      ok: false,
      skipped: true,
      error: `not applied: ${seq ? `seq ${seq}` : "a statement"} of namespace "${namespace}" failed in this batch`,
    };
    stmts.forEach((s, j) => {
      if (j !== index && unitOf(s) === unit) results[j] = skipped;
    });
  };
  const failure = (error: unknown): WriteResult => {
    const kind = classify(error);
    if (kind.kind === "outage") throw fail(errorText(error), error);
    if (kind.kind === "misconfigured") throw fail(errorText(error), error, true);
    return {
      ok: false,
      error: errorText(error),
      errorClass: kind.errorClass,
      ...(kind.kind === "schema" ? { remoteSchema: true } : {}),
    };
  };

  // Text that is not one statement, or a value that is not a BindValue, is this statement's fault;
  // no driver gets to guess at it.
  stmts.forEach((stmt, i) => {
    if (results[i] !== undefined) return;
    if (refused[i]) {
      failNamespace(i, { ok: false, error: refused[i]!, errorClass: "E_UNSUPPORTED_STATEMENT" });
      return;
    }
    const bad = invalidArg(stmt.args);
    if (bad !== undefined) failNamespace(i, { ok: false, error: bad, errorClass: "E_INVALID_ARG" });
  });

  let active = stmts.map((_, i) => i).filter((i) => results[i] === undefined);
  let merging = coalesceFor;
  while (active.length > 0) {
    const batch =
      merging === null
        ? null
        : coalesce(
            active.map((i) => stmts[i]!),
            merging,
          );
    const sent = batch === null ? active.map((i) => stmts[i]!) : batch.sent;
    const answer = await pass(sent, mode === "checking");
    if (answer.outcomes.length !== sent.length)
      throw fail("internal error: a pass returned the wrong number of outcomes", undefined);
    const { committed, commitError } = answer;
    let outcomes = answer.outcomes;
    if (batch !== null && batch.sent.length < active.length) {
      merging = null; // whatever happens next, no later pass of this batch is coalesced
      const mergedFailed = batch.members.some((m, k) => m.length > 1 && "error" in answer.outcomes[k]!);
      if (mergedFailed) {
        if (committed) keepCommitted(active, batch.members, answer.outcomes);
        active = active.filter((i) => results[i] === undefined);
        continue;
      }
      outcomes = spread(batch.members, answer.outcomes, active.length);
    }
    if (commitError !== undefined && !committed) {
      // Checked only at COMMIT: no statement is blamed. If even a checking pass cannot blame one
      // (or the target itself failed), it is an outage as before.
      if (mode === "checking" || classify(commitError).kind !== "row")
        throw fail(`COMMIT failed: ${errorText(commitError)}`, commitError);
      const namespaces = [...new Set(active.map((i) => unitOf(stmts[i]!)))];
      if (mode === "namespace" || namespaces.length === 1) {
        mode = "checking";
        continue;
      }
      for (const namespace of namespaces) {
        const own = active.filter((i) => unitOf(stmts[i]!) === namespace);
        const ownResults = await isolate(
          own.map((i) => stmts[i]!),
          pass,
          classify,
          fail,
          "namespace",
        );
        own.forEach((i, j) => {
          results[i] = ownResults[j];
        });
      }
      break;
    }
    if (committed) {
      outcomes.forEach((o, j) => {
        const i = active[j]!;
        if ("error" in o && !failedAt.has(unitOf(stmts[i]!))) failNamespace(i, failure(o.error));
      });
      outcomes.forEach((o, j) => {
        const i = active[j]!;
        const failedHere = failedAt.has(unitOf(stmts[i]!));
        // A committed pass may hold failures only where nothing else of that namespace was applied.
        if ("result" in o && failedHere)
          throw fail(`internal error: a pass committed seq ${stmts[i]!.seq} of a failed namespace`, undefined);
        if ("result" in o) results[i] = o.result;
        else if ("notRun" in o && !failedHere)
          throw fail("internal error: a committed pass left a statement unrun", undefined);
      });
      break;
    }
    const k = outcomes.findIndex((o) => !("result" in o));
    const failed = outcomes[k];
    if (!failed || !("error" in failed))
      throw fail("internal error: a pass rolled back without a failed statement", undefined);
    failNamespace(active[k]!, failure(failed.error));
    active = active.filter((j) => results[j] === undefined);
  }
  return results as WriteResult[];

  /**
   * A coalesced pass committed although a merged statement failed (MySQL: nothing else of its
   * namespace was applied). Keeps what committed and the failures of statements sent alone; the
   * namespaces of failed merged statements stay unanswered, to run again statement by statement.
   */
  function keepCommitted(active: number[], members: number[][], sentOutcomes: Outcome[]): void {
    const rerun = new Set(
      members.filter((m, k) => m.length > 1 && "error" in sentOutcomes[k]!).map((m) => unitOf(stmts[active[m[0]!]!]!)),
    );
    members.forEach((m, k) => {
      const o = sentOutcomes[k]!;
      const namespace = unitOf(stmts[active[m[0]!]!]!);
      if (rerun.has(namespace)) {
        if ("result" in o)
          throw fail(
            `internal error: a pass committed seq ${stmts[active[m[0]!]!]!.seq} of a failed namespace`,
            undefined,
          );
        return;
      }
      if ("result" in o) {
        const each = m.length > 1 ? memberResult(o.result, m.length) : o.result;
        for (const j of m) results[active[j]!] = each;
      } else if ("error" in o && !failedAt.has(namespace)) failNamespace(active[m[0]!]!, failure(o.error));
    });
  }
}

/**
 * The outcomes of a coalesced pass, one per original statement: a merged statement's result for each row it
 * carried.
 */
function spread(members: number[][], outcomes: Outcome[], count: number): Outcome[] {
  const out = new Array<Outcome>(count);
  members.forEach((m, k) => {
    const o = outcomes[k]!;
    const each = m.length > 1 && "result" in o ? { result: memberResult(o.result, m.length) } : o; // shared: answers are read, never written
    for (const j of m) out[j] = each;
  });
  return out;
}

/**
 * One row's result from the result of the merged statement that carried `rows` rows: each single-row
 * INSERT affects at most one row, so when the merged one affected exactly `rows`, each affected one;
 * otherwise (some absorbed by ON CONFLICT DO NOTHING, or counted twice by ON DUPLICATE KEY UPDATE)
 * nobody knows which, and rowsAffected is left out.
 */
function memberResult(merged: WriteResult, rows: number): WriteResult {
  return merged.ok && merged.rowsAffected === rows ? { ok: true, rowsAffected: 1 } : { ok: true };
}

/**
 * Why `args` is not a list of BindValues (string, number, bigint, boolean, null, Uint8Array), or undefined
 * when it is.
 */
function invalidArg(args: unknown): string | undefined {
  if (!Array.isArray(args)) return `args must be an array, got ${typeof args}`;
  for (let i = 0; i < args.length; i++) {
    const v: unknown = args[i];
    const t = typeof v;
    if (v === null || t === "string" || t === "number" || t === "bigint" || t === "boolean" || v instanceof Uint8Array)
      continue;
    return `argument ${i + 1} is not a bind value (string, number, bigint, boolean, null or Uint8Array): got ${v === undefined ? "undefined" : Array.isArray(v) ? "an array" : t}`;
  }
  return undefined;
}

/** An open transaction a `blameDeferred` check runs in: one statement at a time, then a count. */
export interface CheckingTransaction {
  run(stmt: Statement): Promise<WriteResult>;
  /** How many foreign-key violations the database holds right now (`PRAGMA foreign_key_check`). */
  violations(): Promise<number>;
}

/**
 * The heart of a `checking` pass for engines that cannot make DEFERRABLE constraints immediate
 * (SQLite, libSQL): inside the caller's transaction, runs each statement and counts the foreign-key
 * violations after it; the first statement that leaves more than there were before the batch is
 * blamed (an error it raised itself is blamed as usual), the rest are not run. The caller rolls
 * back when a statement is blamed and commits otherwise, so nothing is applied statement by
 * statement. A violation that only a later statement of the batch would resolve blames the
 * earlier one, as a deferred constraint checked per statement would.
 */
export async function blameDeferred(stmts: Statement[], tx: CheckingTransaction): Promise<Outcome[]> {
  const outcomes: Outcome[] = [];
  const baseline = await tx.violations();
  for (const stmt of stmts) {
    if (outcomes.length > 0 && !("result" in outcomes[outcomes.length - 1]!)) {
      outcomes.push({ notRun: true });
      continue;
    }
    try {
      const result = await tx.run(stmt);
      const now = await tx.violations();
      outcomes.push(now > baseline ? { error: deferredViolation(now - baseline) } : { result });
    } catch (error) {
      outcomes.push({ error });
    }
  }
  return outcomes;
}

/** An error shaped like SQLite's own for a foreign key violated at COMMIT. */
function deferredViolation(count: number): Error {
  const error = new Error(
    `FOREIGN KEY constraint failed (deferred: this statement leaves ${count} violation(s) that would fail the COMMIT)`,
  );
  return Object.assign(error, { code: "SQLITE_CONSTRAINT_FOREIGNKEY" });
}

/** The driver's message, prefixed with its most specific code: SQLSTATE, SQLite result code name, or MySQL errno. */
export function errorText(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const e = error as Error & { code?: unknown; errno?: unknown; extendedCode?: unknown };
  const code =
    typeof e.errno === "string"
      ? e.errno
      : typeof e.extendedCode === "string"
        ? e.extendedCode
        : typeof e.code === "string" && !e.code.startsWith("ERR_")
          ? e.code
          : typeof e.errno === "number" && e.errno > 0
            ? String(e.errno)
            : typeof e.code === "string"
              ? e.code
              : undefined;
  return code && !e.message.startsWith(code) ? `${code}: ${e.message}` : e.message;
}
