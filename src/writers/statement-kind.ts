/** What a statement does, from its first keyword: `read` returns rows, `ddl` changes the schema. */
export type StatementKind = "read" | "ddl" | "write";

const READ = new Set(["SELECT", "WITH", "VALUES", "SHOW", "EXPLAIN", "PRAGMA", "TABLE", "DESCRIBE", "DESC"]);
const DDL = new Set(["CREATE", "ALTER", "DROP", "TRUNCATE", "COMMENT", "RENAME", "GRANT", "REVOKE"]);

/** Classifies by the first keyword after whitespace, comments and opening parentheses. */
export function statementKind(sql: string): StatementKind {
  const m = /^(?:\s+|--[^\n]*(?:\n|$)|\/\*[\s\S]*?\*\/|\()*([A-Za-z]+)/.exec(sql);
  const word = m?.[1]?.toUpperCase() ?? "";
  if (READ.has(word)) return "read";
  if (DDL.has(word)) return "ddl";
  return "write";
}
