import type { Dialect } from "../vocabulary.ts";
import { DIALECT_TRAITS } from "./dialect.ts";
import { isKeyword, tokenize, type Token } from "./lexer.ts";

/**
 * A single-row `INSERT … VALUES (…)` that can be sent as one multi-row statement for many rows
 * with the same text: its VALUES tuple holds only placeholders and literals (a PostgreSQL `::type`
 * cast allowed), so every row's values are computed from its own arguments alone, and the rows of
 * a multi-row VALUES are inserted one after another in order — as the single-row statements
 * would have been. Anything else (a subquery, a function call, RETURNING, a placeholder outside
 * the tuple) is not coalescible: the row might see the other rows, or the answer be per row.
 */
export interface ValuesInsert {
  /** The text up to and including the VALUES keyword and the whitespace after it. */
  head: string;
  /** The tuple `(…)` as written. */
  tuple: string;
  /** What follows the tuple (`ON CONFLICT … DO NOTHING`, a trailing `;`), without placeholders. */
  tail: string;
  /** Arguments per row. */
  width: number;
  /** PostgreSQL numbers its placeholders `$1…$n`: each tuple after the first is renumbered. */
  dollar: boolean;
  /** Offsets of each `$n` in `tuple`, for renumbering. */
  dollarAt: ReadonlyArray<readonly [start: number, end: number]>;
}

/**
 * How many bind parameters one statement may carry: PostgreSQL's and MySQL's wire protocols count
 * them in 16 bits; SQLite's default SQLITE_MAX_VARIABLE_NUMBER (libSQL's server too) is 32 766.
 */
export const MAX_PARAMS: Readonly<Record<Dialect, number>> = {
  postgres: 65_535,
  mysql: 65_535,
  sqlite: 32_766,
  libsql: 32_766,
};

/** Rows per statement when a row has no arguments at all: keeps a statement of literals bounded in size. */
const MAX_ROWS_WITHOUT_ARGS = 1_000;

/** The most rows of `shape` one statement may carry under the dialect's parameter limit. */
export function maxRows(shape: ValuesInsert, dialect: Dialect): number {
  return shape.width === 0 ? MAX_ROWS_WITHOUT_ARGS : Math.floor(MAX_PARAMS[dialect] / shape.width);
}

/**
 * Recognises `sql` (as the writer sends it, placeholders already in `dialect`'s form) as a
 * coalescible `INSERT [OR IGNORE | IGNORE] [INTO] t [(cols)] VALUES (…)`, or returns null.
 */
export function valuesInsert(sql: string, dialect: Dialect): ValuesInsert | null {
  let tokens: Token[];
  try {
    tokens = tokenize(sql, dialect);
  } catch {
    return null;
  }
  let end = tokens.length;
  if (end > 0 && tokens[end - 1]!.kind === ";") end--;
  if (!isKeyword(sql, tokens[0], "INSERT")) return null;
  let i = 1;
  if (isKeyword(sql, tokens[i], "OR") && isKeyword(sql, tokens[i + 1], "IGNORE")) i += 2;
  else if (isKeyword(sql, tokens[i], "IGNORE")) i++;
  // Up to VALUES: a table name and an optional column list, nothing else (no SELECT, no CTE).
  for (; i < end && !isKeyword(sql, tokens[i], "VALUES"); i++) {
    const t = tokens[i]!;
    if (
      t.kind === "param" ||
      t.kind === "named" ||
      t.kind === ";" ||
      (t.kind === "word" && (isKeyword(sql, t, "SELECT") || isKeyword(sql, t, "DEFAULT") || isKeyword(sql, t, "SET")))
    )
      return null;
  }
  const open = tokens[i + 1];
  if (i >= end || open?.kind !== "(" || open.depth !== 0) return null;
  const dollar = DIALECT_TRAITS[dialect].placeholder === "dollar";
  const dollarAt: Array<readonly [number, number]> = [];
  let width = 0;
  let j = i + 2;
  let close: Token | undefined;
  let castTarget = false; // the words after `::` name a type
  for (; j < end; j++) {
    const t = tokens[j]!;
    if (t.depth === 0 && t.kind === ")") {
      close = t;
      break;
    }
    if (t.depth !== 1) return null; // a parenthesis inside the tuple: a call or a subquery
    switch (t.kind) {
      case ",":
        castTarget = false;
        continue;
      case "string":
      case "number":
        continue;
      case "param":
        if (dollar || t.num !== 0) return null; // `?NNN` may bind one argument twice
        width++;
        continue;
      case "named": {
        const text = sql.slice(t.start, t.end);
        if (!dollar || text !== `$${width + 1}`) return null; // $1…$n, each once, in order
        dollarAt.push([t.start - open.start, t.end - open.start]);
        width++;
        continue;
      }
      case "op": {
        const c = sql[t.start];
        if (c === "-" || c === "+") continue;
        if (
          c === ":" &&
          dollar &&
          tokens[j + 1]?.kind === "op" &&
          sql[tokens[j + 1]!.start] === ":" &&
          tokens[j + 1]!.start === t.end
        ) {
          j++;
          castTarget = true;
          continue;
        }
        return null;
      }
      case "word":
        if (castTarget || isKeyword(sql, t, "NULL") || isKeyword(sql, t, "TRUE") || isKeyword(sql, t, "FALSE"))
          continue;
        return null;
      default:
        return null;
    }
  }
  if (close === undefined) return null;
  // After the tuple: another tuple means it is multi-row already; RETURNING answers per row; a
  // placeholder would bind per-row arguments the merged statement cannot separate.
  for (let k = j + 1; k < end; k++) {
    const t = tokens[k]!;
    if (t.kind === "," && t.depth === 0 && k === j + 1) return null;
    if (
      t.kind === "param" ||
      t.kind === "named" ||
      t.kind === ";" ||
      isKeyword(sql, t, "RETURNING") ||
      isKeyword(sql, t, "SELECT")
    )
      return null;
  }
  return {
    head: sql.slice(0, open.start),
    tuple: sql.slice(open.start, close.end),
    tail: sql.slice(close.end),
    width,
    dollar,
    dollarAt,
  };
}

/** The text of `shape` carrying `rows` tuples; its arguments are the rows' arguments concatenated. */
export function multiRowSql(shape: ValuesInsert, rows: number): string {
  const tuples = new Array<string>(rows);
  for (let r = 0; r < rows; r++) tuples[r] = shape.dollar && r > 0 ? renumber(shape, r * shape.width) : shape.tuple;
  return `${shape.head}${tuples.join(", ")}${shape.tail}`;
}

function renumber(shape: ValuesInsert, offset: number): string {
  let out = "";
  let at = 0;
  for (let k = 0; k < shape.dollarAt.length; k++) {
    const [start, end] = shape.dollarAt[k]!;
    out += `${shape.tuple.slice(at, start)}$${k + 1 + offset}`;
    at = end;
  }
  return out + shape.tuple.slice(at);
}
