import type { Dialect } from "../vocabulary.ts";
import { quoteIdent } from "./ident.ts";

/** The name of the unique index on a table's outbox_seq column: `idx_<table>_outbox_seq`. */
export function seqIndexName(table: string): string {
  return `idx_${table}_outbox_seq`;
}

/**
 * The remote DDL that prepares injected tables, in order: per table the `outbox_seq` column then
 * its unique index `idx_<table>_outbox_seq`.
 * - sqlite/libsql: `INTEGER NOT NULL DEFAULT 0`, partial unique index `WHERE outbox_seq != 0`;
 * - postgres: `BIGINT NOT NULL DEFAULT 0` (`ADD COLUMN IF NOT EXISTS`), partial unique index;
 * - mysql: `BIGINT NULL DEFAULT NULL` and a plain unique index (NULLs never collide).
 * Index creation is `IF NOT EXISTS` where the dialect has it; the column add is idempotent on
 * postgres only, so a caller applying it twice must tolerate "duplicate column" (and on mysql
 * "duplicate key name"). Throws `InvalidArgumentError` for a name that cannot be quoted.
 */
export function schemaSql(tables: readonly string[], dialect: Dialect): string[] {
  return tables.flatMap((table) => {
    const d = SEQ_SCHEMA[dialect];
    const t = quoteIdent(table, dialect);
    return [d.addColumn(t), d.createIndex(quoteIdent(seqIndexName(table), dialect), t)];
  });
}

/**
 * The DDL that removes what `schemaSql` added, in order: per table the index, then the column.
 * An explicit operator action; the drain never runs it on its own.
 */
export function dropSchemaSql(tables: readonly string[], dialect: Dialect): string[] {
  return tables.flatMap((table) => {
    const d = SEQ_SCHEMA[dialect];
    const t = quoteIdent(table, dialect);
    return [d.dropIndex(quoteIdent(seqIndexName(table), dialect), t), d.dropColumn(t)];
  });
}

/** A read-only query returning a row when the unique index named `index` on `table` exists. */
export function seqIndexProbe(table: string, dialect: Dialect): { sql: string; args: string[] } {
  return SEQ_SCHEMA[dialect].indexProbe(seqIndexName(table), table);
}

/** The outbox_seq column and its index per dialect; `t` and `idx` arrive quoted. */
interface SeqSchema {
  addColumn: (t: string) => string;
  createIndex: (idx: string, t: string) => string;
  dropIndex: (idx: string, t: string) => string;
  dropColumn: (t: string) => string;
  indexProbe: (index: string, table: string) => { sql: string; args: string[] };
}

const SQLITE_SEQ_SCHEMA: SeqSchema = {
  addColumn: (t) => `ALTER TABLE ${t} ADD COLUMN outbox_seq INTEGER NOT NULL DEFAULT 0`,
  createIndex: (idx, t) => `CREATE UNIQUE INDEX IF NOT EXISTS ${idx} ON ${t} (outbox_seq) WHERE outbox_seq != 0`,
  dropIndex: (idx) => `DROP INDEX IF EXISTS ${idx}`,
  dropColumn: (t) => `ALTER TABLE ${t} DROP COLUMN outbox_seq`,
  indexProbe: (index) => ({ sql: "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?", args: [index] }),
};

const SEQ_SCHEMA: Readonly<Record<Dialect, SeqSchema>> = {
  sqlite: SQLITE_SEQ_SCHEMA,
  libsql: SQLITE_SEQ_SCHEMA,
  postgres: {
    addColumn: (t) => `ALTER TABLE ${t} ADD COLUMN IF NOT EXISTS outbox_seq BIGINT NOT NULL DEFAULT 0`,
    createIndex: (idx, t) => `CREATE UNIQUE INDEX IF NOT EXISTS ${idx} ON ${t} (outbox_seq) WHERE outbox_seq != 0`,
    dropIndex: (idx) => `DROP INDEX IF EXISTS ${idx}`,
    dropColumn: (t) => `ALTER TABLE ${t} DROP COLUMN IF EXISTS outbox_seq`,
    indexProbe: (index) => ({
      sql: "SELECT 1 FROM pg_indexes WHERE schemaname = current_schema() AND indexname = $1",
      args: [index],
    }),
  },
  mysql: {
    // Portable across MySQL 8 and MariaDB (MySQL has no IF NOT EXISTS here).
    addColumn: (t) => `ALTER TABLE ${t} ADD COLUMN outbox_seq BIGINT NULL DEFAULT NULL`,
    createIndex: (idx, t) => `CREATE UNIQUE INDEX ${idx} ON ${t} (outbox_seq)`,
    dropIndex: (idx, t) => `DROP INDEX ${idx} ON ${t}`,
    dropColumn: (t) => `ALTER TABLE ${t} DROP COLUMN outbox_seq`,
    indexProbe: (index, table) => ({
      sql: "SELECT 1 FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = ? AND index_name = ? LIMIT 1",
      args: [table, index],
    }),
  },
};

/** `SELECT MAX(outbox_seq) FROM <table>`: one row, one column, NULL on an empty table (may arrive as a string). */
export function maxSeqSql(table: string, dialect: Dialect): string {
  return `SELECT MAX(outbox_seq) FROM ${quoteIdent(table, dialect)}`;
}
