import { BunSqlWriter } from "./bun-sql.ts";
import { classifyMysql } from "./classify.ts";
import type { WriterSpec } from "./writer-spec.ts";
import { describeServer, serverKeys, validateServer } from "./server-keys.ts";

/** The `mysql` writer: MySQL or MariaDB through Bun.SQL, one pipelined transaction per batch. */
export const mysqlWriter: WriterSpec = {
  dialect: "mysql",
  keys: serverKeys(3306),
  validate: (connection) => validateServer(connection, ["mysql", "mariadb"]),
  describe: (connection) => describeServer(connection, "mysql"),
  create: (connection) => new BunSqlWriter("mysql", connection, classifyMysql),
};
