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
  const out: string[] = [];
  for (const table of tables) {
    const t = quoteIdent(table, dialect);
    const idx = quoteIdent(seqIndexName(table), dialect);
    switch (dialect) {
      case "sqlite":
      case "libsql":
        out.push(`ALTER TABLE ${t} ADD COLUMN outbox_seq INTEGER NOT NULL DEFAULT 0`);
        out.push(`CREATE UNIQUE INDEX IF NOT EXISTS ${idx} ON ${t} (outbox_seq) WHERE outbox_seq != 0`);
        break;
      case "postgres":
        out.push(`ALTER TABLE ${t} ADD COLUMN IF NOT EXISTS outbox_seq BIGINT NOT NULL DEFAULT 0`);
        out.push(`CREATE UNIQUE INDEX IF NOT EXISTS ${idx} ON ${t} (outbox_seq) WHERE outbox_seq != 0`);
        break;
      case "mysql":
        // Portable across MySQL 8 and MariaDB (MySQL has no IF NOT EXISTS here).
        out.push(`ALTER TABLE ${t} ADD COLUMN outbox_seq BIGINT NULL DEFAULT NULL`);
        out.push(`CREATE UNIQUE INDEX ${idx} ON ${t} (outbox_seq)`);
        break;
    }
  }
  return out;
}

/**
 * The DDL that removes what `schemaSql` added, in order: per table the index, then the column.
 * An explicit operator action; the drain never runs it on its own.
 */
export function dropSchemaSql(tables: readonly string[], dialect: Dialect): string[] {
  const out: string[] = [];
  for (const table of tables) {
    const t = quoteIdent(table, dialect);
    const idx = quoteIdent(seqIndexName(table), dialect);
    switch (dialect) {
      case "sqlite":
      case "libsql":
        out.push(`DROP INDEX IF EXISTS ${idx}`);
        out.push(`ALTER TABLE ${t} DROP COLUMN outbox_seq`);
        break;
      case "postgres":
        out.push(`DROP INDEX IF EXISTS ${idx}`);
        out.push(`ALTER TABLE ${t} DROP COLUMN IF EXISTS outbox_seq`);
        break;
      case "mysql":
        out.push(`DROP INDEX ${idx} ON ${t}`);
        out.push(`ALTER TABLE ${t} DROP COLUMN outbox_seq`);
        break;
    }
  }
  return out;
}

/** `SELECT MAX(outbox_seq) FROM <table>`: one row, one column, NULL on an empty table (may arrive as a string). */
export function maxSeqSql(table: string, dialect: Dialect): string {
  return `SELECT MAX(outbox_seq) FROM ${quoteIdent(table, dialect)}`;
}
