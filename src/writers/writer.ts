/** The SQL dialect a writer speaks; selects how statements are rewritten and DDL is generated. */
export type Dialect = "sqlite" | "libsql" | "postgres" | "mysql";

/** Bind values every writer accepts: exactly what bun:sqlite can bind. */
export type BindValue = string | number | bigint | boolean | null | Uint8Array;

/** One statement of a batch: already rewritten for the writer's dialect. */
export interface Statement {
  sql: string;
  args: BindValue[];
  /** The outbox namespace (table) this statement belongs to. */
  namespace: string;
  /** The outbox seq of the row this statement delivers. */
  seq: number;
}

/**
 * One result per statement, in order.
 * - `{ ok: true, rowsAffected }`: applied (0 is fine: an absorbed redelivery).
 * - `{ ok: true, rows }`: a SELECT's rows.
 * - `{ ok: false, error, skipped: true }`: not attempted because an earlier statement of the same
 *   namespace failed in this batch (not the row's fault; no attempt is charged).
 * - `{ ok: false, error, errorClass? }`: this statement failed and was rolled back on its own
 *   (the row's fault: constraint, syntax, type). `errorClass` is the driver code if known.
 */
export type WriteResult =
  | { ok: true; rowsAffected?: number; rows?: unknown[][] }
  | { ok: false; error: string; errorClass?: string; skipped?: boolean };

/**
 * The contract of a remote writer.
 *
 * `writeBatch` applies statements in order. It must not apply a statement of a namespace after an
 * earlier statement of that namespace failed in the same batch (report those `skipped`). Built-in
 * writers run the whole batch in one remote transaction with per-statement isolation, so every
 * `ok` result is committed together when the promise resolves (after a COMMIT refused by a deferred
 * constraint, in one transaction per namespace or per statement: see `runIsolated`). Throwing (or returning a result
 * array of the wrong length/shape) means the target as a whole failed: an outage, not the rows'
 * fault, and nothing is confirmed.
 */
export interface OutboxWriter {
  readonly dialect?: Dialect;
  writeBatch(stmts: Statement[]): Promise<WriteResult[]>;

  close?(): Promise<void> | void;
}
