import type { ReservedSQL } from "bun";
import { BunSqlWriter, type PassTools, settle, startStatement } from "./bun-sql.ts";
import { classifyMysql } from "./classify.ts";
import { errorText, type Outcome, type PassResult } from "./isolate.ts";
import { describeServer, serverKeys, validateServer } from "./server-keys.ts";
import { unitOf, type Statement } from "./writer.ts";
import type { WriterSpec } from "./writer-spec.ts";

/** The `mysql` writer: MySQL or MariaDB through Bun.SQL, one pipelined transaction per batch. */
export const mysqlWriter: WriterSpec = {
  dialect: "mysql",
  concurrent: true,
  keys: serverKeys(3306),
  validate: (connection) => [
    ...validateServer(connection, ["mysql", "mariadb"]),
    // Bun's MySQL driver always prepares (and keeps at most 256 texts per connection, the oldest closed first).
    ...(connection.prepare === false
      ? [
          {
            key: "prepare",
            message:
              "false is not supported by the MySQL driver, which always prepares (keeping at most 256 statement texts per connection)",
          },
        ]
      : []),
  ],
  describe: (connection) => describeServer(connection, "mysql"),
  create: (connection) => new BunSqlWriter("mysql", connection, classifyMysql, mysqlPass),
};

/**
 * Autocommit off instead of BEGIN, and a sql_mode the drain can rely on: STRICT_TRANS_TABLES
 * added, and ANSI_QUOTES, NO_BACKSLASH_ESCAPES (and ANSI, which implies the first) removed, since
 * the statement checks read `"…"` as a string and `\` as an escape, as MySQL does by default.
 */
const MYSQL_BEGIN =
  "SET autocommit = 0, sql_mode = TRIM(BOTH ',' FROM REPLACE(REPLACE(REPLACE(REPLACE(CONCAT(',', @@sql_mode, ',STRICT_TRANS_TABLES,'), ',ANSI_QUOTES,', ','), ',NO_BACKSLASH_ESCAPES,', ','), ',ANSI,', ','), ',,', ','))";

/**
 * Two round trips: autocommit off and every statement pipelined, then COMMIT or ROLLBACK after
 * looking at the outcomes. MySQL rolls back just a failed statement, never its transaction, so a
 * COMMIT sent behind the statements would commit the rest of a failed namespace, and nothing in
 * the protocol makes a COMMIT depend on what went before it; it commits when no later statement
 * of a failed namespace was applied, and otherwise rolls back for a re-run. Autocommit off rather
 * than BEGIN, so statements that run after a server-side rollback (deadlock) or an implicit commit
 * (DDL) are still undone by our ROLLBACK. Strict mode whatever the server's default: without it a
 * bad value is stored truncated or as a default (a warning, not an error), and the
 * duplicate-absorbing INSERT … SELECT form would even differ from the original VALUES statement.
 * MySQL has no deferred constraints (InnoDB checks foreign keys per statement), so `checking`
 * never comes.
 */
export async function mysqlPass(
  reserved: ReservedSQL,
  stmts: Statement[],
  _checking: boolean,
  { classify, fail, ended: endIssued }: PassTools,
): Promise<PassResult> {
  const begin = settle(reserved.unsafe(MYSQL_BEGIN));
  const running = stmts.map((s) => startStatement(reserved, s, "mysql").outcome);
  const began = await begin;
  if ("error" in began) throw fail(`BEGIN failed: ${errorText(began.error)}`, began.error);
  const outcomes: Outcome[] = await Promise.all(running);
  const committed = isolatedByServer(stmts, outcomes, classify);
  const end = settle(reserved.unsafe(committed ? "COMMIT" : "ROLLBACK"));
  // A pass behind this one on the connection issues its statements now, with this COMMIT: a round
  // trip of its own saved. Before it, they would have run inside this transaction.
  endIssued();
  const ended = await end;
  if ("error" in ended)
    throw fail(`${committed ? "COMMIT" : "ROLLBACK"} failed: ${errorText(ended.error)}`, ended.error);
  return { outcomes, committed };
}

/**
 * MySQL rolls back only a failed statement: the transaction may still commit when every failure
 * is the statement's own (row or schema) and nothing else of its namespace was applied, which
 * keeps namespaces atomic. Otherwise it rolls back for a re-run without the failed namespace.
 */
function isolatedByServer(stmts: Statement[], outcomes: Outcome[], classify: PassTools["classify"]): boolean {
  const failed = new Set<string>();
  const applied = new Set<string>();
  for (const [i, o] of outcomes.entries()) {
    const namespace = unitOf(stmts[i]!);
    if ("result" in o) applied.add(namespace);
    else if (!("error" in o)) return false;
    else {
      const kind = classify(o.error).kind;
      if (kind !== "row" && kind !== "schema") return false;
      failed.add(namespace);
    }
  }
  return [...failed].every((namespace) => !applied.has(namespace));
}
