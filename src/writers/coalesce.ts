import { memoPerDialect } from "../bounded-memo.ts";
import { maxRows, multiRowSql, valuesInsert, type ValuesInsert } from "../sql/coalesce.ts";
import { splitTraceComment } from "../sql/trace-comment.ts";
import type { BindValue, Dialect } from "../vocabulary.ts";
import type { Statement } from "./writer.ts";

/** What is sent for a batch: statements, each carrying the original statements at `members`. */
export interface CoalescedBatch {
  sent: Statement[];
  /** Per sent statement, the indexes (into the original list) of the statements it carries, in order. */
  members: number[][];
}

// A backlog repeats a few statement texts thousands of times: recognise each text once.
const shapes = memoPerDialect<ValuesInsert | null>(4096);

function shapeOf(sql: string, dialect: Dialect): ValuesInsert | null {
  return shapes(dialect).get(sql, () => valuesInsert(sql, dialect));
}

/**
 * The shape of a text the drain gave a trace comment (trace_comments), read from the text without
 * it — one lexing per statement text, not per row — and where the comment goes back in.
 */
function commentedShapeOf(
  sql: string,
  dialect: Dialect,
): { shape: ValuesInsert | null; comment: ReturnType<typeof splitTraceComment> } {
  const comment = splitTraceComment(sql);
  return { shape: shapeOf(comment === null ? sql : comment.base, dialect), comment };
}

// Full batches carry the same number of rows every time: build each merged text once per shape.
const texts = new WeakMap<ValuesInsert, Map<number, string>>();

function textOf(shape: ValuesInsert, rows: number): string {
  let byRows = texts.get(shape);
  if (!byRows) texts.set(shape, (byRows = new Map()));
  let text = byRows.get(rows);
  if (text === undefined) {
    text = multiRowSql(shape, rows);
    if (byRows.size < MAX_TEXTS_PER_SHAPE) byRows.set(rows, text);
  }
  return text;
}

/** Merged texts kept per shape: the full batch's row count and the odd remainders. */
const MAX_TEXTS_PER_SHAPE = 64;

/**
 * Merges each run of consecutive statements of one namespace with the same coalescible text (see
 * `valuesInsert`) into one multi-row statement, within the dialect's parameter limit. Everything
 * else — a fence, a statement with another text, one whose argument count does not fit its text —
 * is sent as it is. Returns the batch unchanged (one member each) when nothing merges. Texts with a
 * trace comment (trace_comments) merge only with the same comment — the rows of one trace context,
 * such as a transaction's — and the merged statement keeps it.
 */
export function coalesce(stmts: readonly Statement[], dialect: Dialect): CoalescedBatch {
  const sent: Statement[] = [];
  const members: number[][] = [];
  let i = 0;
  while (i < stmts.length) {
    const first = stmts[i]!;
    const { shape, comment } = first.fence ? { shape: null, comment: null } : commentedShapeOf(first.sql, dialect);
    let j = i + 1;
    if (shape !== null && first.args.length === shape.width) {
      const limit = maxRows(shape, dialect);
      while (j < stmts.length && j - i < limit) {
        const next = stmts[j]!;
        if (
          next.fence ||
          next.sql !== first.sql ||
          next.namespace !== first.namespace ||
          next.unit !== first.unit ||
          next.args.length !== shape.width
        )
          break;
        j++;
      }
    }
    if (j - i === 1) {
      sent.push(first);
      members.push([i]);
    } else {
      const args: BindValue[] = [];
      const carried: number[] = [];
      for (let k = i; k < j; k++) {
        const a = stmts[k]!.args;
        for (let m = 0; m < a.length; m++) args.push(a[m]!);
        carried.push(k);
      }
      const text = textOf(shape!, j - i);
      const sql =
        comment === null
          ? text
          : text.slice(0, text.length - comment.fromEnd) + comment.comment + text.slice(text.length - comment.fromEnd);
      sent.push({
        sql,
        args,
        namespace: first.namespace,
        seq: stmts[j - 1]!.seq,
        ...(first.unit === undefined ? {} : { unit: first.unit }),
      });
      members.push(carried);
    }
    i = j;
  }
  return { sent, members };
}
