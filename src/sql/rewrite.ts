import { InvalidArgumentError, UnsupportedStatementError } from "../errors.ts";
import type { BindValue, Dialect } from "../writers/writer.ts";
import { Emitter, resolveParams } from "./emit.ts";
import { tokenize } from "./lexer.ts";
import { recognise, type InsertShape, type UpdateShape } from "./shape.ts";

/** Options of `injectOutboxSeq`. */
export interface InjectOptions {
  /**
   * Emit exactly the reference implementation's SQL (`INSERT OR IGNORE INTO …`, an unguarded
   * `UPDATE … SET …, outbox_seq = ?`). sqlite/libsql only. Default false.
   */
  compat?: boolean;
}

/** A rewritten statement: SQL for the dialect and a fresh argument array. */
export interface RewrittenStatement {
  sql: string;
  args: BindValue[];
}

/** Every SQL dialect the rewriter (and `dialect = "…"` in outbox.toml) accepts. */
export const DIALECTS: readonly Dialect[] = ["sqlite", "libsql", "postgres", "mysql"];

function checkDialect(dialect: Dialect): void {
  if (!DIALECTS.includes(dialect)) throw new InvalidArgumentError(`unknown SQL dialect "${String(dialect)}" (expected one of ${DIALECTS.join(", ")})`);
}

/**
 * Rewrites a single-row INSERT or an UPDATE so that delivering it twice, or after a newer
 * statement, changes nothing: it adds `outbox_seq = seq` and the dialect's duplicate-absorbing
 * clause or guard. Never mutates `args`. Throws `UnsupportedStatementError` (with `reason`) for
 * every other shape, and `InvalidArgumentError` for a `seq` that is not a positive safe integer.
 */
export function injectOutboxSeq(
  sql: string,
  args: readonly BindValue[],
  seq: number,
  dialect: Dialect,
  options: InjectOptions = {},
): RewrittenStatement {
  checkDialect(dialect);
  if (!Number.isSafeInteger(seq) || seq < 1) throw new InvalidArgumentError(`outbox seq must be a positive safe integer, got ${String(seq)}`);
  const compat = options.compat === true;
  if (compat && dialect !== "sqlite" && dialect !== "libsql") {
    throw new UnsupportedStatementError(`compat mode reproduces the reference's SQLite forms and exists only for sqlite/libsql, not ${dialect}`, sql);
  }
  const shape = recognise(sql, dialect);
  const { params, argIndex } = resolveParams(sql, shape.tokens, args.length);
  const out = new Emitter(sql, params, argIndex, args, dialect);
  if (shape.kind === "insert") rewriteInsert(out, shape, sql, seq, dialect, compat);
  else rewriteUpdate(out, shape, seq, dialect, compat);
  return { sql: out.toString(), args: out.args };
}

function rewriteInsert(out: Emitter, s: InsertShape, sql: string, seq: number, dialect: Dialect, compat: boolean): void {
  if (compat) out.text("INSERT OR IGNORE INTO").skipTo(s.afterInto);
  out.copyTo(s.columnsClose.start).text(", outbox_seq");
  if (dialect === "mysql") {
    // No partial indexes: outbox_seq is a nullable UNIQUE column and the row is only inserted when
    // no row carries this seq yet. Every other constraint (NOT NULL, CHECK, keys) still raises.
    const table = sql.slice(s.tableStart, s.tableEnd);
    out
      .copyTo(s.columnsClose.end)
      .text(" SELECT ")
      .skipTo(s.valuesOpen.end)
      .copyTo(s.valuesClose.start)
      .text(", ")
      .bind(seq)
      .text(` FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM ${table} WHERE outbox_seq = `)
      .bind(seq)
      .text(")");
    return;
  }
  out.copyTo(s.valuesClose.start).text(", ").bind(seq).copyTo(s.valuesClose.end);
  if (!compat) out.text(" ON CONFLICT (outbox_seq) WHERE outbox_seq != 0 DO NOTHING");
}

function rewriteUpdate(out: Emitter, s: UpdateShape, seq: number, dialect: Dialect, compat: boolean): void {
  out.copyTo(s.setEnd).text(", outbox_seq = ").bind(seq);
  if (compat) {
    out.copyTo(s.end);
    return;
  }
  if (s.where !== null) out.text(" WHERE (").skipTo(s.where.start).copyTo(s.where.end).text(") AND ");
  else out.text(" WHERE ");
  // MySQL's outbox_seq is nullable (rows written around the outbox): NULL counts as older.
  if (dialect === "mysql") out.text("(outbox_seq IS NULL OR outbox_seq < ").bind(seq).text(")");
  else out.text("outbox_seq < ").bind(seq);
}

/**
 * Translates placeholders only, for tables delivered without injection: `?`/`?NNN` become
 * `$1…$n` for PostgreSQL, `?NNN` becomes `?` (arguments reordered) for MySQL; SQLite/libSQL get
 * the statement unchanged. Literal- and comment-aware; never mutates `args`. Throws
 * `UnsupportedStatementError` when the placeholders cannot be translated faithfully.
 */
export function toDialect(sql: string, args: readonly BindValue[], dialect: Dialect): RewrittenStatement {
  checkDialect(dialect);
  // MySQL only needs work for `?NNN`, which it does not know; SQLite/libSQL read the SQL as is.
  if (dialect === "sqlite" || dialect === "libsql" || (dialect === "mysql" ? !/\?\d/.test(sql) : !sql.includes("?"))) {
    return { sql, args: args.slice() };
  }
  const tokens = tokenize(sql, dialect);
  if (!tokens.some((t) => t.kind === "param")) return { sql, args: args.slice() };
  if (dialect === "postgres") {
    const native = tokens.find((t) => t.kind === "named");
    if (native !== undefined) {
      throw new UnsupportedStatementError(`statement mixes ? placeholders with ${sql.slice(native.start, native.end)} at offset ${native.start}`, sql);
    }
  }
  const { params, argIndex } = resolveParams(sql, tokens, args.length);
  const out = new Emitter(sql, params, argIndex, args, dialect);
  out.copyTo(sql.length);
  return { sql: out.toString(), args: out.args };
}
