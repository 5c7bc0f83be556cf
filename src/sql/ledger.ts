import type { Dialect } from "../vocabulary.ts";
import { placeholders } from "./dialect.ts";
import { quoteIdent } from "./ident.ts";

/*
 * The delivery ledger: one row per (origin, namespace) in each target, holding `through`, the
 * highest local seq of that queue file applied there. The drain advances it in the same remote
 * transaction as the rows it accounts for, with a fence that only matches the value this drain
 * last saw (see fenceSql), so a zombie or late transaction can never be applied twice.
 *
 * Every statement here is pure text plus the order of its bind arguments; the drain sends them
 * through the target's writer like any other statement.
 */

/** What the ledger's statements say differently per dialect. */
interface LedgerDialect {
  /** Column definitions of the ledger table (inside `CREATE TABLE … (…)`) and what follows its parenthesis. */
  columns: string;
  tableOptions: string;
  /** Engine-side UTC time, stored in `updated_at`; engine time, so hosts with skewed clocks agree. */
  now: string;
  /** `updated_at` read back as ISO-8601 text. */
  updatedAtText: string;
  /**
   * The fence's INSERT of its rows, each `[origin, namespace, through, label]` placeholders, with
   * `updated_at` = `now` (this dialect's), up to its upsert's assignments. SQLite evaluates `now`
   * once for them all (strftime per row: a quarter of a 65-row fence).
   */
  fenceInsert: (table: string, rows: readonly string[][], now: string) => string;
  /** A proposed row's column in the upsert. */
  proposed: (column: string) => string;
  /**
   * The fence's guard, from pairs of `[ledgerRow, expected]` placeholders: the proposed `through`
   * when the stored row is at the `expected` its pair names, else NULL (also for a row no pair
   * names). SQLite finds the expected value with `CASE namespace WHEN …` (one comparison a pair);
   * PostgreSQL and MySQL compare both columns a pair, so each expected value is typed by the
   * column it meets.
   */
  guard: (pairs: readonly string[][]) => string;
  /** What makes the settlement read wait for a transaction still holding the row. */
  settleLock: string;
}

const LEDGER: Readonly<Record<Dialect, LedgerDialect>> = {
  sqlite: sqliteLedger(),
  libsql: sqliteLedger(),
  postgres: {
    columns:
      "origin TEXT NOT NULL, namespace TEXT NOT NULL, through BIGINT NOT NULL, label TEXT NOT NULL DEFAULT '', updated_at TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (origin, namespace)",
    tableOptions: "",
    now: "now()",
    updatedAtText: `to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`,
    fenceInsert: (table, rows, now) =>
      `${insertValues(`${table} AS l`, rows, now)} ON CONFLICT (origin, namespace) DO UPDATE SET`,
    proposed: (column) => `EXCLUDED.${column}`,
    guard: (pairs) => comparedGuard(pairs, (column) => `l.${column}`, "EXCLUDED.through"),
    settleLock: " FOR UPDATE",
  },
  mysql: {
    // Binary collation: namespaces are file names, "Orders" and "orders" are two queues.
    columns:
      "origin VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, namespace VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, through BIGINT NOT NULL, label VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL DEFAULT '', updated_at DATETIME(6) NOT NULL, PRIMARY KEY (origin, namespace)",
    tableOptions: " ENGINE=InnoDB",
    now: "UTC_TIMESTAMP(6)",
    updatedAtText: "DATE_FORMAT(updated_at, '%Y-%m-%dT%H:%i:%s.%fZ')",
    // Assignments run left to right: `through` in the guard is still the stored value.
    fenceInsert: (table, rows, now) => `${insertValues(table, rows, now)} ON DUPLICATE KEY UPDATE`,
    proposed: (column) => `VALUES(${column})`,
    guard: (pairs) => comparedGuard(pairs, (column) => column, "VALUES(through)"),
    settleLock: " FOR UPDATE",
  },
};

/**
 * SQLite's ledger, which libSQL shares: it stores ISO-8601 text and its writers read inside BEGIN IMMEDIATE,
 * which needs no row lock.
 */
function sqliteLedger(): LedgerDialect {
  return {
    columns:
      "origin TEXT NOT NULL, namespace TEXT NOT NULL, through INTEGER NOT NULL, label TEXT NOT NULL DEFAULT '', updated_at TEXT NOT NULL, PRIMARY KEY (origin, namespace)",
    tableOptions: "",
    now: "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
    updatedAtText: "updated_at",
    // `WHERE true`: an INSERT … SELECT before ON CONFLICT needs it (SQLite would read ON as a join's).
    fenceInsert: (table, rows, now) =>
      `WITH fence_now (t) AS (SELECT ${now}) INSERT INTO ${table} (origin, namespace, through, label, updated_at) SELECT column1, column2, column3, column4, (SELECT t FROM fence_now) FROM (VALUES ${rows.map((r) => `(${r.join(", ")})`).join(", ")}) WHERE true ON CONFLICT (origin, namespace) DO UPDATE SET`,
    proposed: (column) => `excluded.${column}`,
    guard: (pairs) =>
      `CASE WHEN through = CASE namespace ${pairs.map(([row, expected]) => `WHEN ${row} THEN ${expected}`).join(" ")} END THEN excluded.through END`,
    settleLock: "",
  };
}

/** `INSERT INTO target (…) VALUES …`: each row's four placeholders and `now`. */
function insertValues(target: string, rows: readonly string[][], now: string): string {
  const values = rows.map((r) => `(${r.join(", ")}, ${now})`).join(", ");
  return `INSERT INTO ${target} (origin, namespace, through, label, updated_at) VALUES ${values}`;
}

/** A guard comparing the stored row's namespace and through with each pair: the proposed through where both match. */
function comparedGuard(pairs: readonly string[][], stored: (column: string) => string, proposed: string): string {
  const whens = pairs.map(
    ([row, expected]) => `WHEN ${stored("namespace")} = ${row} AND ${stored("through")} = ${expected} THEN ${proposed}`,
  );
  return `CASE ${whens.join(" ")} END`;
}

/** The DDL that creates the ledger table if it does not exist (one statement). */
export function ledgerDdl(table: string, dialect: Dialect): string {
  const d = LEDGER[dialect];
  return `CREATE TABLE IF NOT EXISTS ${quoteIdent(table, dialect)} (${d.columns})${d.tableOptions}`;
}

/** A statement that succeeds when the ledger table exists and fails when it does not (reads no row). */
export function ledgerProbeSql(table: string, dialect: Dialect): string {
  return `SELECT through FROM ${quoteIdent(table, dialect)} WHERE 1 = 0`;
}

/**
 * The fence of `rows` ledger rows of one queue in a batch (the table's, or with lanes each lane's the
 * batch moves), one statement whatever their number; arguments: per row `[origin, ledgerRow,
 * newThrough, label]`, then per row `[ledgerRow, expectedThrough]`, in the same order. It creates
 * each row or moves its `through` from `expectedThrough` to `newThrough`, and takes the rows' locks
 * before the queue's rows are applied. When another transaction moved one of them meanwhile — a
 * zombie drain, a late commit, a restored file — its guard matches nothing and sets NULL into a NOT
 * NULL column, which fails the whole statement inside the engine (PostgreSQL 23502, MySQL 1048,
 * SQLite SQLITE_CONSTRAINT_NOTNULL), so the batch rolls back with it on every engine, libSQL's
 * one-shot batches included. A transaction waiting on a row lock sees the winner's value once it
 * commits, and fails the same way.
 */
export function fenceSql(table: string, dialect: Dialect, rows = 1): string {
  const d = LEDGER[dialect];
  const args = placeholders(dialect, 6 * rows);
  const values: string[][] = [];
  const pairs: string[][] = [];
  for (let r = 0; r < rows; r++) {
    values.push(args.slice(4 * r, 4 * r + 4));
    pairs.push(args.slice(4 * rows + 2 * r, 4 * rows + 2 * r + 2));
  }
  const set = `through = ${d.guard(pairs)}, label = ${d.proposed("label")}, updated_at = ${d.proposed("updated_at")}`;
  return `${d.fenceInsert(quoteIdent(table, dialect), values, d.now)} ${set}`;
}

/**
 * Reads one queue's `through` for settlement; arguments `[origin, namespace]`. On PostgreSQL and
 * MySQL it locks the row (`FOR UPDATE`), so it waits for a transaction still holding it — a batch
 * whose COMMIT is in flight — and returns what that transaction committed. SQLite and libSQL
 * writers read inside BEGIN IMMEDIATE, which waits for every other writer.
 */
export function settleReadSql(table: string, dialect: Dialect): string {
  const [origin, namespace] = placeholders(dialect, 2);
  return `SELECT through FROM ${quoteIdent(table, dialect)} WHERE origin = ${origin} AND namespace = ${namespace}${LEDGER[dialect].settleLock}`;
}

/**
 * Reads one queue's rows for a table with lanes, for settlement; arguments `[origin, namespace,
 * namespace + "#", namespace + "$"]`: the table's own row (rows without a key) and one per lane
 * (`namespace#lane`; "$" is the character after "#", so the range is exactly those), as
 * `namespace, through`, locked as settleReadSql locks one.
 */
export function settleLanesReadSql(table: string, dialect: Dialect): string {
  const [origin, namespace, from, to] = placeholders(dialect, 4);
  return `SELECT namespace, through FROM ${quoteIdent(table, dialect)} WHERE origin = ${origin} AND (namespace = ${namespace} OR (namespace > ${from} AND namespace < ${to}))${LEDGER[dialect].settleLock}`;
}

/**
 * Every origin's rows for the given tables, without locking: `origin, namespace, through, label,
 * updated_at` (ISO-8601 text), for the fleet view. Arguments: the `plain` tables' names (one ledger
 * row each), then per table with lanes `[name, name + "#", name + "$"]`: its own row and every lane's
 * (as settleLanesReadSql reads them; the caller keeps the rows it knows by name).
 */
export function fleetReadSql(table: string, dialect: Dialect, plain: number, laned = 0): string {
  const args = placeholders(dialect, plain + 3 * laned);
  const where: string[] = [];
  if (plain > 0) where.push(`namespace IN (${args.slice(0, plain).join(", ")})`);
  for (let i = plain; i < args.length; i += 3)
    where.push(`namespace = ${args[i]} OR (namespace > ${args[i + 1]} AND namespace < ${args[i + 2]})`);
  return `SELECT origin, namespace, through, label, ${LEDGER[dialect].updatedAtText} AS updated_at FROM ${quoteIdent(table, dialect)} WHERE ${where.length > 0 ? where.join(" OR ") : "1 = 0"} ORDER BY namespace, origin`;
}
