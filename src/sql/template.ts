import { UnsupportedStatementError } from "../errors.ts";
import type { BindValue, Dialect } from "../vocabulary.ts";
import { checkDialect, DIALECT_TRAITS } from "./dialect.ts";
import { Emitter, resolveParams, SEQ_ARG } from "./emit.ts";
import { isWordChar, tokenize, type Token } from "./lexer.ts";
import { recognise, type InsertShape, type UpdateShape } from "./shape.ts";

export { SEQ_ARG } from "./emit.ts";

/**
 * A rewrite that does not depend on the argument values: the SQL text to send, and per output
 * placeholder the input argument it binds (an index) or `SEQ_ARG` for the row's seq. One
 * template serves every row that carries the same SQL text and argument count.
 */
export interface RewriteTemplate {
  sql: string;
  args: readonly number[];
}

/**
 * What `rewriteTemplate` does: inject outbox_seq (`inject`, optionally in the reference's `compat` form) or
 * translate placeholders only.
 */
export interface TemplateOptions {
  inject: boolean;
  /** sqlite/libsql only: the reference implementation's forms (see `InjectOptions.compat`). Default false. */
  compat?: boolean;
}

/**
 * The rewrite of `sql` for `dialect` as a template, for statements taking `argCount` arguments:
 * with `inject`, what `injectOutboxSeq` sends; without, what `toDialect` sends. Throws
 * `UnsupportedStatementError` (with `reason`) where those do, `InvalidArgumentError` for an
 * unknown dialect. Pure: the same inputs always give the same template.
 */
export function rewriteTemplate(
  sql: string,
  dialect: Dialect,
  argCount: number,
  options: TemplateOptions,
): RewriteTemplate {
  checkDialect(dialect);
  if (!options.inject) return placeholderTemplate(sql, dialect, argCount);
  const compat = options.compat === true;
  if (compat && !DIALECT_TRAITS[dialect].compat) {
    throw new UnsupportedStatementError(
      `compat mode reproduces the reference's SQLite forms and exists only for sqlite/libsql, not ${dialect}`,
      sql,
    );
  }
  const shape = recognise(sql, dialect);
  const { params, argIndex } = resolveParams(sql, shape.tokens, argCount);
  const out = new Emitter(sql, params, argIndex, dialect);
  if (shape.kind === "insert") injectInsert(out, shape, sql, dialect, compat);
  else injectUpdate(out, shape, dialect, compat);
  // Whatever follows the statement's last token (a `;`, comments, whitespace) is kept as written.
  out.copyTo(sql.length);
  return { sql: out.toString(), args: out.picks };
}

/** The arguments of one row for `template`: the row's `args` in template order, `seq` where it says `SEQ_ARG`. */
export function bindTemplate(template: RewriteTemplate, args: readonly BindValue[], seq: number): BindValue[] {
  const picks = template.args;
  const out: BindValue[] = [];
  for (let i = 0; i < picks.length; i++) {
    const p = picks[i]!;
    out.push(p === SEQ_ARG ? seq : args[p]!);
  }
  return out;
}

function identity(sql: string, argCount: number): RewriteTemplate {
  const args = new Array<number>(argCount);
  for (let i = 0; i < argCount; i++) args[i] = i;
  return { sql, args };
}

function placeholderTemplate(sql: string, dialect: Dialect, argCount: number): RewriteTemplate {
  const tokens = tokenize(sql, dialect, [], true, true);
  const traits = DIALECT_TRAITS[dialect];
  const my = traits.lexer === "mysql";
  const last = tokens.length - 1;
  let params = 0;
  let mysqlWork = false;
  let native: Token | undefined;
  for (let k = 0; k <= last; k++) {
    const t = tokens[k]!;
    const kind = t.kind;
    if (kind === "param") {
      params++;
      // MySQL does not know `?NNN`, and MariaDB refuses a `?` touching a word (`?AND`).
      if (my && (t.num !== 0 || isWordChar(sql.charCodeAt(t.start - 1)) || isWordChar(sql.charCodeAt(t.end))))
        mysqlWork = true;
    } else if (kind === ";") {
      if (k < last)
        throw new UnsupportedStatementError(
          `more than one statement: ';' at offset ${t.start} is followed by more SQL`,
          sql,
        );
    } else if (kind === "named" && native === undefined) native = t;
  }
  if (traits.readsQuestionMarks || params === 0 || (my && !mysqlWork)) return identity(sql, argCount);
  if (native !== undefined) {
    throw new UnsupportedStatementError(
      `statement mixes ? placeholders with ${sql.slice(native.start, native.end)} at offset ${native.start}`,
      sql,
    );
  }
  const resolved = resolveParams(sql, tokens, argCount);
  const out = new Emitter(sql, resolved.params, resolved.argIndex, dialect).copyTo(sql.length);
  return { sql: out.toString(), args: out.picks };
}

function injectInsert(out: Emitter, s: InsertShape, sql: string, dialect: Dialect, compat: boolean): void {
  if (compat) out.copyTo(s.insertKw.end).text(" OR IGNORE");
  out.copyTo(s.columnsClose.start).text(", outbox_seq");
  if (DIALECT_TRAITS[dialect].seqGuard === "nullable-unique") {
    // No partial indexes: outbox_seq is a nullable UNIQUE column and the row is only inserted when
    // no row carries this seq yet. Every other constraint (NOT NULL, CHECK, keys) still raises.
    const table = sql.slice(s.tableStart, s.tableEnd);
    out
      .copyTo(s.valuesKw.start)
      .space()
      .text("SELECT")
      .skipTo(s.valuesKw.end)
      .copyTo(s.valuesOpen.start)
      .skipTo(s.valuesOpen.end)
      .space()
      .copyTo(s.valuesClose.start)
      .text(", ")
      .seq()
      .skipTo(s.valuesClose.end)
      .text(` FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM ${table} WHERE outbox_seq = `)
      .seq()
      .text(")");
    return;
  }
  out.copyTo(s.valuesClose.start).text(", ").seq().copyTo(s.valuesClose.end);
  if (!compat) out.text(" ON CONFLICT (outbox_seq) WHERE outbox_seq != 0 DO NOTHING");
}

function injectUpdate(out: Emitter, s: UpdateShape, dialect: Dialect, compat: boolean): void {
  out.copyTo(s.setEnd).text(", outbox_seq = ").seq();
  if (compat) return;
  if (s.where !== null) out.copyTo(s.where.start).text("(").copyTo(s.where.end).text(") AND ");
  else out.copyTo(s.end).text(" WHERE ");
  if (DIALECT_TRAITS[dialect].seqGuard === "nullable-unique") {
    // MySQL's outbox_seq is nullable (rows written around the outbox): NULL counts as older. Not
    // `outbox_seq IS NULL OR outbox_seq < ?`: MariaDB then reads the rows through the outbox_seq
    // index, and a strict-mode conversion error the original WHERE raises (1292) is not raised.
    out.text("COALESCE(outbox_seq, 0) < ").seq();
  } else {
    // NOT NULL here, and the partial unique index (WHERE outbox_seq != 0) cannot serve `<`: the
    // rows are read as the original reads them, and its errors surface (test/sql-engines.test.ts).
    out.text("outbox_seq < ").seq();
  }
}
