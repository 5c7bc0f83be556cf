import type { WriteResult } from "../writers/writer.ts";

/**
 * Checks a writer's answer for shape: exactly one object per statement, each with a boolean `ok`.
 * Returns the reason it is garbage, or null. Garbage is an outage, never the rows' fault.
 */
export function resultShapeProblem(results: unknown, expected: number): string | null {
  if (!Array.isArray(results)) return `writeBatch returned ${results === null ? "null" : typeof results}, not an array`;
  if (results.length !== expected) return `writeBatch returned ${results.length} results for ${expected} statements`;
  for (let i = 0; i < results.length; i++) {
    const r = results[i] as { ok?: unknown } | null;
    if (typeof r !== "object" || r === null || typeof r.ok !== "boolean") {
      return `writeBatch result ${i} has no boolean "ok"`;
    }
  }
  return null;
}

// Outcomes of an ADD COLUMN / CREATE INDEX that mean "already done": SQLite and PostgreSQL say
// "already exists" / "duplicate column", MySQL/MariaDB "Duplicate column name" (1060) and
// "Duplicate key name" (1061); PostgreSQL's codes are 42701 (duplicate_column) and 42P07.
const ALREADY_DONE_MESSAGE = /already exists|duplicate column|duplicate key name/i;
const ALREADY_DONE_CODES = new Set(["42701", "42P07", "1060", "1061", "ER_DUP_FIELDNAME", "ER_DUP_KEYNAME"]);

/** True when a failed DDL result only says the column or index is already there. */
export function isAlreadyApplied(result: WriteResult): boolean {
  if (result.ok) return true;
  return ALREADY_DONE_MESSAGE.test(result.error ?? "") || (result.errorClass !== undefined && ALREADY_DONE_CODES.has(result.errorClass));
}

/**
 * The single value of a `SELECT MAX(…)` answer as a number: drivers hand it back as a number,
 * a bigint or a string (PostgreSQL bigint), in an array row or an object row; NULL (empty table)
 * is 0. Returns undefined for anything else.
 */
export function parseMaxSeq(rows: unknown): number | undefined {
  if (!Array.isArray(rows) || rows.length === 0) return 0;
  const row = rows[0];
  const value = Array.isArray(row) ? row[0] : row && typeof row === "object" ? Object.values(row)[0] : row;
  if (value === null || value === undefined) return 0;
  const n = typeof value === "bigint" ? Number(value) : typeof value === "string" ? Number(value.trim()) : value;
  return typeof n === "number" && Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}
