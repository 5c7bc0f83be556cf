import type { BindValue, Dialect } from "../vocabulary.ts";

/** One statement of a batch: already converted for the writer's dialect. */
export interface Statement {
  sql: string;
  args: BindValue[];
  /** The outbox namespace (table) this statement belongs to. */
  namespace: string;
  /** The outbox seq of the row this statement delivers; 0 for the drain's own statements. */
  seq: number;
  /**
   * Set on the drain's ledger statement that opens each namespace of a batch: it moves the
   * namespace's ledger row from the `through` this drain last saw to the batch's last seq, and fails
   * inside the engine (a NOT NULL violation) when another transaction moved it meanwhile. A writer
   * runs it like any other statement; it may check that it affected exactly one row.
   */
  fence?: boolean;
  /**
   * Set when a transaction the application committed spans tables (one `db_file`): every statement
   * of the tables it links carries the same `unit`, and they are applied all together or not at all
   * — one atomic unit instead of one per namespace. Absent: the statement's unit is its namespace.
   */
  unit?: string;
}

/** The atomic unit of a statement: its `unit` when a transaction links tables, else its namespace. */
export function unitOf(stmt: Statement): string {
  return stmt.unit ?? stmt.namespace;
}

/**
 * One result per statement, in order.
 * - `{ ok: true, rowsAffected }`: applied (0 is fine).
 * - `{ ok: true, rows }`: a SELECT's rows.
 * - `{ ok: false, error, skipped: true }`: not applied because another statement of the same
 *   namespace failed in this batch (not this row's fault; no attempt is charged).
 * - `{ ok: false, error, errorClass? }`: this statement failed (the row's fault: constraint,
 *   syntax, type). `errorClass` is the driver code if known.
 * - `remoteSchema: true` on a failure: the remote schema lacks something the statement needs (a
 *   table, a column, a unique index, a privilege): not the row's fault; the table is held until
 *   the schema is fixed, nothing is charged.
 */
export type WriteResult =
  | { ok: true; rowsAffected?: number; rows?: unknown[][] }
  | { ok: false; error: string; errorClass?: string; skipped?: boolean; remoteSchema?: boolean };

/**
 * The contract of a remote writer.
 *
 * `writeBatch` applies statements in order, grouped by atomic unit — the namespace, or the `unit`
 * a transaction spanning tables links them into (see `unitOf`): the statements of one unit in a
 * batch are applied all together or not at all. When one of them fails, it is reported with its
 * error and every other statement of its unit `skipped` (rolled back or never run); the other units
 * are unaffected. Built-in writers run the batch as one remote transaction and
 * re-run it without a failed namespace, so every `ok` result is committed together when the
 * promise resolves. Only then can the ledger's fence statement (`Statement.fence`), which opens
 * each namespace, account for exactly the rows applied with it. A writer that cannot run
 * transactions must be configured `ledger = false` (delivery is then at least once).
 *
 * Throwing (or returning a result array of the wrong length/shape) means the target as a whole
 * failed: an outage, not the rows' fault, and nothing is confirmed.
 */
export interface OutboxWriter {
  readonly dialect?: Dialect;
  /**
   * Whether `writeBatch` may be called again before an earlier call answered — each call on its own
   * connection, in its own transaction, and a statement that writes a row another open transaction
   * holds waits for it to end (row locks, as PostgreSQL and InnoDB take them) — so a target's
   * `connections` can keep several batches in flight, each fenced behind the one before. Absent or
   * false: the drain sends one batch at a time.
   */
  readonly concurrent?: boolean;
  /**
   * Whether a `concurrent` writer also takes a call while each of its connections carries one: it
   * queues the batch behind one on its connection, sent once that one's COMMIT is (PostgreSQL: with
   * it; MySQL: with the COMMIT that follows its answers), so the remote runs it right after that one
   * ends. The drain then keeps two batches in flight per connection, `connections = 1` included.
   * Absent or false: one per connection.
   */
  readonly pipelined?: boolean;
  writeBatch(stmts: Statement[], options?: WriteOptions): Promise<WriteResult[]>;

  close?(): Promise<void> | void;
}

/** What the drain passes along with a batch. */
export interface WriteOptions {
  /**
   * A `concurrent` writer calls it once the batch is on its connection — every statement issued,
   * in order — so the batch the drain sends behind it reaches the remote after it (and its fence
   * waits on this one's ledger rows instead of overtaking them) — not while a statement of it still
   * waits in the client (Bun's prepares of texts new to the connection). Not calling it only makes
   * the drain wait for the answer instead.
   */
  onSent?: () => void;
}

/**
 * The writers of a tenant template target (SPEC §4c): one per tenant's database, made on demand by
 * `open`. Making one connects to nothing yet (each built-in writer connects on its first batch), so
 * a tenant database that is missing or down surfaces at `writeBatch`, as an outage of that writer.
 */
export interface TenantWriters {
  readonly tenantTemplate: true;
  /** The template's dialect (every tenant's writer writes it). */
  readonly dialect: Dialect;
  /**
   * Whether each tenant's writer takes concurrent calls (see OutboxWriter.concurrent); unknown for a
   * writer_class until one is made.
   */
  readonly concurrent?: boolean;
  /**
   * Makes the writer of `tenant`'s database (its connection with {tenant} resolved); the caller
   * closes it. Throws like createWriter for a connection that cannot be used, and an
   * InvalidArgumentError for a name `tenantNameProblem` refuses.
   */
  open(tenant: string): Promise<OutboxWriter>;
  /** The template described for logs and status, no secret: writer, user@host:port/database with {tenant} left in. */
  describe(): string;
}

/** Whether `w` is the writers of a tenant template rather than one target's writer. */
export function isTenantWriters(w: unknown): w is TenantWriters {
  return typeof w === "object" && w !== null && (w as { tenantTemplate?: unknown }).tenantTemplate === true;
}
