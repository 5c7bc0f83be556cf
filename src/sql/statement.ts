import { InvalidStatementError, UnsupportedStatementError } from "../errors.ts";
import type { Dialect } from "../vocabulary.ts";
import { DIALECTS } from "../vocabulary.ts";
import { checkDialect, LEXER_DIALECTS } from "./dialect.ts";
import { argCountProblem } from "./emit.ts";
import { EXECUTABLE_COMMENT, tokenize, wordIs, type Token } from "./lexer.ts";
import { rewriteTemplate } from "./template.ts";

// First keywords of the statements a remote may run from an outbox: DML (upserts are INSERTs),
// queries run for their effect (`SELECT pg_notify(…)`), procedure calls and DDL.
const STATEMENT_KEYWORDS = [
  "INSERT",
  "UPDATE",
  "DELETE",
  "REPLACE",
  "MERGE",
  "WITH",
  "SELECT",
  "VALUES",
  "CALL",
  "DO",
  "CREATE",
  "ALTER",
  "DROP",
  "TRUNCATE",
  "RENAME",
  "COMMENT",
  "GRANT",
  "REVOKE",
  "NOTIFY",
  "REFRESH",
  "ANALYZE",
];
// Statements that steer the connection or its transaction, which belong to the drain: a COMMIT
// in a batch would commit half of it without the delivery ledger.
const SESSION_KEYWORDS = [
  "BEGIN",
  "START",
  "COMMIT",
  "END",
  "ROLLBACK",
  "ABORT",
  "SAVEPOINT",
  "RELEASE",
  "SET",
  "RESET",
  "USE",
  "LOCK",
  "UNLOCK",
  "PRAGMA",
  "ATTACH",
  "DETACH",
  "VACUUM",
];

/** What one dialect's lexer read in a statement text, up to its end or the point it failed. */
interface Reading {
  dialect: Dialect;
  /** Non-empty statements seen. */
  statements: number;
  /** Offset of a `;` followed by more SQL (a second statement), or -1. */
  second: number;
  /** Offset of a `;` that ends an empty statement (`;;`, a leading `;`), or -1. */
  empty: number;
  /** Bind arguments the placeholders read (SQLite's numbering: the largest number assigned). */
  args: number;
  /** `?` placeholders seen. */
  placeholders: number;
  /** The first named placeholder (`:x`, `@x`, `$x`, `$1`) and its offset, or null. */
  named: { text: string; at: number } | null;
  /** Span of the first token. */
  first: { start: number; end: number; word: boolean } | null;
  /** Why the lexer stopped before the end, or null when it read everything. */
  failure: string | null;
}

function read(sql: string, dialect: Dialect, checkParens: boolean): Reading {
  const r: Reading = {
    dialect,
    statements: 0,
    second: -1,
    empty: -1,
    args: 0,
    placeholders: 0,
    named: null,
    first: null,
    failure: null,
  };
  // On a failure the tokens read before it still count: a second statement seen by then is one.
  const tokens: Token[] = [];
  try {
    tokenize(sql, dialect, tokens, checkParens);
  } catch (error) {
    if (!(error instanceof UnsupportedStatementError)) throw error;
    r.failure = error.reason;
  }
  let inStatement = false;
  let semicolon = -1;
  for (const t of tokens) {
    if (t.kind === ";") {
      if (!inStatement && r.empty < 0) r.empty = t.start;
      inStatement = false;
      semicolon = t.start;
      continue;
    }
    if (!inStatement) {
      inStatement = true;
      if (++r.statements === 2) r.second = semicolon;
    }
    if (r.first === null) r.first = { start: t.start, end: t.end, word: t.kind === "word" };
    if (t.kind === "param") {
      r.placeholders++;
      r.args = t.num !== 0 ? Math.max(r.args, t.num) : r.args + 1;
    } else if (t.kind === "named" && r.named === null) r.named = { text: sql.slice(t.start, t.end), at: t.start };
  }
  return r;
}

/**
 * How many non-empty statements `sql` holds as `dialect` reads it (literal-, quoted-identifier-
 * and comment-aware; a trailing `;` and empty statements do not count): 0 for empty or
 * comment-only text. Throws `UnsupportedStatementError` when the text cannot be read with
 * certainty (an unterminated literal, identifier or comment, a NUL, a MySQL executable comment).
 */
export function statementCount(sql: string, dialect: Dialect): number {
  checkDialect(dialect);
  const r = read(sql, dialect, false);
  if (r.failure !== null) throw new UnsupportedStatementError(r.failure, sql);
  return r.statements;
}

/**
 * Checks that `sql` is exactly one non-empty statement a remote may run, with positional `?`/
 * `?NNN` placeholders only, and returns how many bind arguments it takes (SQLite's numbering).
 * With `dialect` null (the producer does not know its target) the text is read with every
 * dialect's lexer and refused when any of them sees a second statement, when those that can
 * read it disagree on its placeholders, or when none can. Throws `InvalidStatementError`
 * (`reason`; no `table`).
 */
export function validateStatement(sql: string, dialect: Dialect | null): number {
  const refuse = (reason: string): never => {
    throw new InvalidStatementError(reason);
  };
  if (typeof sql !== "string") return refuse(`SQL text must be a string, got ${sql === null ? "null" : typeof sql}`);
  if (!sql.isWellFormed()) refuse("SQL text holds a lone UTF-16 surrogate, which cannot be stored as UTF-8 losslessly");
  if (dialect !== null) checkDialect(dialect);
  const dialects = dialect === null ? LEXER_DIALECTS : [dialect];
  const readings = dialects.map((d) => read(sql, d, true));
  // Without a dialect, say whose reading refused it: a producer that knows its target can say so.
  const as = (r: Reading) =>
    dialect === null ? ` (as ${r.dialect} reads it; set the producer's dialect if the target is another engine)` : "";
  for (const r of readings) {
    if (r.second >= 0) refuse(`more than one statement: ';' at offset ${r.second} is followed by more SQL${as(r)}`);
    // An executable comment is SQL hidden from every other reading: never accept it.
    if (r.failure?.startsWith(EXECUTABLE_COMMENT)) refuse(r.failure);
  }
  const ok = readings.filter((r) => r.failure === null);
  if (ok.length === 0) {
    refuse(
      dialect === null
        ? `no SQL dialect can read it: ${readings.map((r) => `${r.dialect}: ${r.failure}`).join("; ")}`
        : readings[0]!.failure!,
    );
  }
  for (const r of ok) {
    if (r.empty >= 0) refuse(`empty statement before ';' at offset ${r.empty}${as(r)}`);
    if (r.statements === 0) refuse(`empty statement${sql.trim() === "" ? "" : " (only comments)"}${as(r)}`);
  }
  const args = ok[0]!.args;
  if (ok.some((r) => r.args !== args)) {
    const counts = ok.map((r) => `${r.dialect}: ${r.args}`).join(", ");
    refuse(
      `the SQL dialects read different placeholder counts (${counts}): a literal or comment means different things to them; set the producer's dialect`,
    );
  }
  for (const r of ok) {
    if (r.named !== null)
      refuse(
        `named or numbered-dollar placeholder ${r.named.text} at offset ${r.named.at} is not supported${as(r)}; use ?`,
      );
    const first = r.first!;
    const text = sql.slice(first.start, Math.min(first.end, first.start + 30));
    if (first.word && SESSION_KEYWORDS.some((k) => wordIs(sql, first.start, first.end, k))) {
      refuse(
        `${text.toUpperCase()} steers the connection or its transaction, which the drain owns (each batch runs in one transaction with its delivery ledger)`,
      );
    }
    if (!first.word || !STATEMENT_KEYWORDS.some((k) => wordIs(sql, first.start, first.end, k))) {
      refuse(
        `'${text}' at offset ${first.start} does not start a statement (expected ${STATEMENT_KEYWORDS.join(", ")})`,
      );
    }
  }
  return args;
}

/**
 * `validateStatement`, then the argument count: throws `InvalidStatementError` naming `table`
 * (when given) unless `sql` is one valid statement taking exactly `argCount` bind arguments.
 */
export function checkStatement(sql: string, argCount: number, dialect: Dialect | null, table?: string): void {
  let needed: number;
  try {
    needed = validateStatement(sql, dialect);
  } catch (error) {
    if (error instanceof InvalidStatementError && table !== undefined)
      throw new InvalidStatementError(error.reason, table);
    throw error;
  }
  if (needed !== argCount)
    throw new InvalidStatementError(argCountProblem(sql, countPlaceholders(sql, dialect), needed, argCount), table);
}

/**
 * Throws `InvalidStatementError` unless `injectOutboxSeq` rewrites `sql` (taking `argCount`
 * arguments) for `dialect`, or for every dialect when it is null.
 */
export function checkInjectable(sql: string, argCount: number, dialect: Dialect | null): void {
  for (const d of dialect === null ? DIALECTS : [dialect]) {
    if (d === "libsql" && dialect === null) continue; // rewritten exactly like sqlite
    try {
      rewriteTemplate(sql, d, argCount, { inject: true });
    } catch (error) {
      if (!(error instanceof UnsupportedStatementError)) throw error;
      throw new InvalidStatementError(`inject_outbox_seq cannot rewrite it for ${d}: ${error.reason}`);
    }
  }
}

function countPlaceholders(sql: string, dialect: Dialect | null): number {
  return read(sql, dialect ?? "sqlite", false).placeholders;
}
