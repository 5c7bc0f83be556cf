import { BunSqlWriter } from "./bun-sql.ts";
import { classifyPostgres } from "./classify.ts";
import type { WriterSpec } from "./writer-spec.ts";
import { describeServer, serverKeys, validateServer } from "./server-keys.ts";

/** The `postgres` writer: PostgreSQL through Bun.SQL, one pipelined transaction per batch. */
export const postgresWriter: WriterSpec = {
  dialect: "postgres",
  keys: serverKeys(5432),
  validate: (connection) => validateServer(connection, ["postgres", "postgresql"]),
  describe: (connection) => describeServer(connection, "postgres"),
  create: (connection) => new BunSqlWriter("postgres", connection, classifyPostgres),
};
