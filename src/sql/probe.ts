import type { Dialect } from "../vocabulary.ts";
import { quoteIdent } from "./ident.ts";
import { ledgerDdl, ledgerProbeSql } from "./ledger.ts";
import { schemaSql, seqIndexName, seqIndexProbe } from "./schema.ts";

/**
 * One piece of remote schema the drain relies on: the DDL that creates it, and a read-only probe
 * that says whether it is there already. The drain and `sqloutbox schema --apply` ask the probe
 * first and run the DDL only when something is missing: an ALTER takes PostgreSQL's ACCESS
 * EXCLUSIVE lock, and the application's own queries on the table would queue behind it at every
 * start. `present`: the probe succeeding means present (`ok`), or it must also return a row (`row`).
 */
export interface SchemaStep {
  what: string;
  ddl: string;
  probe: { sql: string; args: string[]; present: "ok" | "row" };
}

/** The delivery ledger table. */
export function ledgerStep(table: string, dialect: Dialect): SchemaStep {
  return {
    what: `ledger table ${table}`,
    ddl: ledgerDdl(table, dialect),
    probe: { sql: ledgerProbeSql(table, dialect), args: [], present: "ok" },
  };
}

/** The compatibility mode's `outbox_seq` column and its unique index on an injected table. */
export function injectedSteps(table: string, dialect: Dialect): SchemaStep[] {
  const [addColumn, createIndex] = schemaSql([table], dialect) as [string, string];
  const index = seqIndexName(table);
  const indexProbe = seqIndexProbe(table, dialect);
  return [
    {
      what: `outbox_seq column of ${table}`,
      ddl: addColumn,
      probe: { sql: `SELECT outbox_seq FROM ${quoteIdent(table, dialect)} WHERE 1 = 0`, args: [], present: "ok" },
    },
    { what: `unique index ${index}`, ddl: createIndex, probe: { ...indexProbe, present: "row" } },
  ];
}
