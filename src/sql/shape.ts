import { UnsupportedStatementError } from "../errors.ts";
import type { Dialect } from "../vocabulary.ts";
import { DIALECT_TRAITS } from "./dialect.ts";
import { identName, isKeyword, tokenize, wordIs, type Token } from "./lexer.ts";

/** A recognised single-row `INSERT [INTO] t (cols) VALUES (…)`; offsets index the source SQL. */
export interface InsertShape {
  kind: "insert";
  tokens: Token[];
  /** The `INSERT` keyword. */
  insertKw: Token;
  /** Source span of the (possibly schema-qualified) table name. */
  tableStart: number;
  tableEnd: number;
  /** The column list's `)`, the `VALUES` keyword and the VALUES list's `(` and `)`. */
  columnsClose: Token;
  valuesKw: Token;
  valuesOpen: Token;
  valuesClose: Token;
}

/** A recognised `UPDATE t SET … [WHERE …]`; offsets index the source SQL. */
export interface UpdateShape {
  kind: "update";
  tokens: Token[];
  /** End offset of the last SET token. */
  setEnd: number;
  /** Source span from the first to the last WHERE-condition token (the keyword excluded), when there is a WHERE. */
  where: { start: number; end: number } | null;
  /** End offset of the statement's last significant token (a trailing `;` excluded). */
  end: number;
}

/** Either accepted shape. */
export type Shape = InsertShape | UpdateShape;

const SEQ_COLUMN = "outbox_seq";

/** True when `t` names the outbox_seq column (any case; quoted or not). */
function isSeqColumn(sql: string, t: Token): boolean {
  // A bare word is compared in place: this runs for every column of every statement.
  if (t.kind === "word") return wordIs(sql, t.start, t.end, "OUTBOX_SEQ");
  return t.kind === "quoted" && identName(sql, t).toLowerCase() === SEQ_COLUMN;
}

// MySQL/MariaDB built-in aggregate functions (a window function always carries OVER).
const AGGREGATES = new Set([
  "AVG",
  "BIT_AND",
  "BIT_OR",
  "BIT_XOR",
  "COUNT",
  "GROUP_CONCAT",
  "JSON_ARRAYAGG",
  "JSON_OBJECTAGG",
  "MAX",
  "MIN",
  "STD",
  "STDDEV",
  "STDDEV_POP",
  "STDDEV_SAMP",
  "SUM",
  "VARIANCE",
  "VAR_POP",
  "VAR_SAMP",
]);

function reject(reason: string, sql: string): never {
  throw new UnsupportedStatementError(reason, sql);
}

function describe(sql: string, t: Token | undefined): string {
  if (t === undefined) return "end of statement";
  const text = sql.slice(t.start, Math.min(t.end, t.start + 30));
  return `'${text}' at offset ${t.start}`;
}

/** Index just past a (possibly dotted) table name starting at `i`, or -1 when there is none. */
function skipTableName(tokens: Token[], i: number): number {
  const isName = (t: Token | undefined) => t !== undefined && (t.kind === "word" || t.kind === "quoted");
  if (!isName(tokens[i])) return -1;
  i++;
  while (tokens[i]?.kind === "." && isName(tokens[i + 1])) i += 2;
  return i;
}

/**
 * Lexes `sql` and recognises one of the two rewritable shapes. Throws
 * `UnsupportedStatementError` whose `reason` names the first thing that does not fit.
 */
export function recognise(sql: string, dialect: Dialect): Shape {
  const all = tokenize(sql, dialect);
  let count = all.length;
  // A single trailing `;` is accepted and dropped; any other `;` means a second statement.
  if (count > 0 && all[count - 1]!.kind === ";") count--;
  for (let k = 0; k < count; k++) {
    const t = all[k]!;
    if (t.kind === ";") reject(`more than one statement: ';' at offset ${t.start} is followed by more SQL`, sql);
    if (t.kind === "named") {
      reject(
        `named or numbered-dollar placeholder ${sql.slice(t.start, t.end)} at offset ${t.start} is not supported; use ?`,
        sql,
      );
    }
  }
  const tokens = count === all.length ? all : all.slice(0, count);
  const first = tokens[0];
  if (first === undefined) reject("empty statement", sql);
  if (isKeyword(sql, first, "INSERT")) return recogniseInsert(sql, tokens, dialect);
  if (isKeyword(sql, first, "UPDATE")) return recogniseUpdate(sql, tokens);
  if (isKeyword(sql, first, "REPLACE")) reject("REPLACE is not supported (it deletes and re-inserts rows)", sql);
  if (isKeyword(sql, first, "WITH"))
    reject("statements starting with WITH (common table expressions) are not supported", sql);
  return reject(`only INSERT and UPDATE can be rewritten, got ${describe(sql, first)}`, sql);
}

function checkModifiers(sql: string, tokens: Token[], verb: string): void {
  const t = tokens[1];
  if (isKeyword(sql, t, "OR")) {
    const what = tokens[2] ? sql.slice(tokens[2].start, tokens[2].end).toUpperCase() : "";
    reject(`${verb} OR ${what} is already a conflict policy; it would hide constraint errors`, sql);
  }
  if (isKeyword(sql, t, "IGNORE")) reject(`${verb} IGNORE would hide constraint errors`, sql);
  for (const m of ["LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY", "ONLY"]) {
    if (isKeyword(sql, t, m)) reject(`${verb} ${m} is not supported`, sql);
  }
}

function recogniseInsert(sql: string, tokens: Token[], dialect: Dialect): InsertShape {
  checkModifiers(sql, tokens, "INSERT");
  let i = 1;
  if (isKeyword(sql, tokens[i], "INTO")) i++;
  const tableFirst = tokens[i];
  const afterTable = skipTableName(tokens, i);
  if (afterTable < 0) reject(`expected a table name after INSERT INTO, got ${describe(sql, tableFirst)}`, sql);
  i = afterTable;
  const open = tokens[i];
  if (open?.kind !== "(") {
    if (
      isKeyword(sql, open, "VALUES") ||
      isKeyword(sql, open, "SELECT") ||
      isKeyword(sql, open, "DEFAULT") ||
      isKeyword(sql, open, "SET")
    ) {
      reject("INSERT without an explicit column list", sql);
    }
    reject(`expected the column list after the table name, got ${describe(sql, open)}`, sql);
  }
  // Column list: plain (quoted) names separated by commas.
  i++;
  let columnCount = 0;
  for (;;) {
    const name = tokens[i];
    if (name === undefined || (name.kind !== "word" && name.kind !== "quoted")) {
      if (columnCount === 0 && (isKeyword(sql, name, "SELECT") || isKeyword(sql, name, "WITH")))
        reject("INSERT … SELECT is not supported", sql);
      reject(`column list must hold plain column names, got ${describe(sql, name)}`, sql);
    }
    if (isSeqColumn(sql, name)) reject("the statement already sets outbox_seq", sql);
    columnCount++;
    const sep = tokens[i + 1];
    i += 2;
    if (sep?.kind === ")") break;
    if (sep?.kind !== ",") reject(`column list must hold plain column names, got ${describe(sql, sep)}`, sql);
  }
  const columnsClose = tokens[i - 1]!;
  const kw = tokens[i];
  if (!isKeyword(sql, kw, "VALUES")) {
    if (isKeyword(sql, kw, "SELECT") || isKeyword(sql, kw, "WITH") || kw?.kind === "(")
      reject("INSERT … SELECT is not supported", sql);
    if (isKeyword(sql, kw, "DEFAULT")) reject("INSERT … DEFAULT VALUES is not supported", sql);
    reject(`expected VALUES after the column list, got ${describe(sql, kw)}`, sql);
  }
  const valuesKw = kw!;
  const valuesOpen = tokens[i + 1];
  if (valuesOpen?.kind !== "(") reject(`expected '(' after VALUES, got ${describe(sql, valuesOpen)}`, sql);
  // Walk the VALUES row: count its top-level elements up to the matching ')'.
  const inner = valuesOpen.depth + 1;
  let j = i + 2;
  let values = 0;
  let elementTokens = 0;
  let hasDefault = false;
  let subquery: Token | undefined;
  let aggregate: Token | undefined;
  let valuesClose: Token | undefined;
  for (; j < tokens.length; j++) {
    const t = tokens[j]!;
    if (t.depth === valuesOpen.depth && t.kind === ")") {
      valuesClose = t;
      break;
    }
    if (t.depth === inner && t.kind === ",") {
      if (elementTokens === 0) reject(`empty element in VALUES at offset ${t.start}`, sql);
      values++;
      elementTokens = 0;
      continue;
    }
    if (subquery === undefined && isKeyword(sql, t, "SELECT")) subquery = t;
    if (
      aggregate === undefined &&
      t.kind === "word" &&
      (isKeyword(sql, t, "OVER") ||
        (tokens[j + 1]?.kind === "(" && AGGREGATES.has(sql.slice(t.start, t.end).toUpperCase())))
    )
      aggregate = t;
    if (
      elementTokens === 0 &&
      isKeyword(sql, t, "DEFAULT") &&
      (tokens[j + 1]?.kind === "," || tokens[j + 1]?.kind === ")")
    )
      hasDefault = true;
    elementTokens++;
  }
  if (valuesClose === undefined) return reject("unbalanced parentheses in VALUES", sql); // the lexer already guarantees balance
  if (elementTokens === 0)
    reject(values === 0 ? "empty VALUES list" : `empty element in VALUES at offset ${valuesClose.start}`, sql);
  values++;
  if (values !== columnCount) reject(`column list names ${columnCount} columns but VALUES has ${values} values`, sql);
  const after = tokens[j + 1];
  if (after !== undefined) {
    if (after.kind === ",") reject("multi-row VALUES is not supported", sql);
    if (isKeyword(sql, after, "ON")) reject("the statement already has an ON CONFLICT / ON DUPLICATE KEY clause", sql);
    if (isKeyword(sql, after, "RETURNING")) reject("RETURNING is not supported (a redelivery returns no row)", sql);
    reject(`unexpected ${describe(sql, after)} after VALUES (…)`, sql);
  }
  if (DIALECT_TRAITS[dialect].seqGuard === "nullable-unique") {
    if (hasDefault) reject("DEFAULT in VALUES is not supported on mysql (the rewrite is an INSERT … SELECT)", sql);
    // Inside INSERT … SELECT, MySQL does not turn a subquery's conversion warnings into errors
    // the way strict mode does for VALUES: the rewrite could store a row the original refuses.
    if (subquery !== undefined)
      reject(
        `a subquery in VALUES (offset ${subquery.start}) is not supported on mysql (the rewrite is an INSERT … SELECT, which would relax strict mode)`,
        sql,
      );
    // VALUES refuses aggregate and window functions ("Invalid use of group function"); the
    // SELECT of the rewrite computes them over its one row and stores what the original refuses.
    if (aggregate !== undefined) {
      const what = isKeyword(sql, aggregate, "OVER")
        ? "a window function (OVER)"
        : `the aggregate function ${sql.slice(aggregate.start, aggregate.end)}()`;
      reject(
        `${what} in VALUES (offset ${aggregate.start}) is not supported on mysql (VALUES refuses it, the rewrite's INSERT … SELECT would compute it)`,
        sql,
      );
    }
  }
  return {
    kind: "insert",
    tokens,
    insertKw: tokens[0]!,
    tableStart: tableFirst!.start,
    tableEnd: tokens[afterTable - 1]!.end,
    columnsClose,
    valuesKw,
    valuesOpen,
    valuesClose,
  };
}

function recogniseUpdate(sql: string, tokens: Token[]): UpdateShape {
  checkModifiers(sql, tokens, "UPDATE");
  const afterTable = skipTableName(tokens, 1);
  if (afterTable < 0) reject(`expected a table name after UPDATE, got ${describe(sql, tokens[1])}`, sql);
  if (!isKeyword(sql, tokens[afterTable], "SET")) {
    reject(
      `expected SET after the table name (aliases, joins and multi-table UPDATE are not supported), got ${describe(sql, tokens[afterTable])}`,
      sql,
    );
  }
  // SET runs to the first top-level clause keyword.
  const setFirst = afterTable + 1;
  let i = setFirst;
  let assignmentStart = setFirst;
  let sawEquals = false;
  const checkAssignment = (endIndex: number, at: Token | undefined) => {
    if (endIndex === assignmentStart) reject(`empty assignment in SET before ${describe(sql, at)}`, sql);
    if (!sawEquals) reject(`SET assignment without '=' before ${describe(sql, at)}`, sql);
  };
  for (; i < tokens.length; i++) {
    const t = tokens[i]!;
    if (t.depth === 0) {
      if (
        t.kind === "word" &&
        (isKeyword(sql, t, "WHERE") ||
          isKeyword(sql, t, "FROM") ||
          isKeyword(sql, t, "ORDER") ||
          isKeyword(sql, t, "LIMIT") ||
          isKeyword(sql, t, "RETURNING"))
      ) {
        // `x IS DISTINCT FROM y` is an expression, not UPDATE … FROM.
        if (!(isKeyword(sql, t, "FROM") && isKeyword(sql, tokens[i - 1], "DISTINCT"))) break;
      }
      if (t.kind === ",") {
        checkAssignment(i, t);
        assignmentStart = i + 1;
        sawEquals = false;
        continue;
      }
      if (t.kind === "op" && !sawEquals && sql.charCodeAt(t.start) === 61) {
        sawEquals = true;
        for (let k = assignmentStart; k < i; k++) {
          const target = tokens[k]!;
          if (isSeqColumn(sql, target)) {
            reject("the statement already sets outbox_seq", sql);
          }
        }
      }
    }
  }
  checkAssignment(i, tokens[i]);
  const setEnd = tokens[i - 1]!.end;
  const stop = tokens[i];
  const end = tokens[tokens.length - 1]!.end;
  if (stop === undefined) return { kind: "update", tokens, setEnd, where: null, end };
  if (!isKeyword(sql, stop, "WHERE")) {
    const what = sql.slice(stop.start, stop.end).toUpperCase();
    reject(`UPDATE … ${what} is not supported`, sql);
  }
  const whereFirst = tokens[i + 1];
  if (whereFirst === undefined) reject("WHERE without a condition", sql);
  for (let k = i + 1; k < tokens.length; k++) {
    const t = tokens[k]!;
    if (t.depth === 0 && (isKeyword(sql, t, "ORDER") || isKeyword(sql, t, "LIMIT") || isKeyword(sql, t, "RETURNING"))) {
      reject(`UPDATE … ${sql.slice(t.start, t.end).toUpperCase()} is not supported`, sql);
    }
  }
  return { kind: "update", tokens, setEnd, where: { start: whereFirst.start, end }, end };
}
