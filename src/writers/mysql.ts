import { BunSqlWriter } from "./bun-sql.ts";
import { classifyMysql } from "./classify.ts";
import type { WriterSpec } from "./writer-spec.ts";
import { describeServer, serverKeys, validateServer } from "./server-keys.ts";

/** The `mysql` writer: MySQL or MariaDB through Bun.SQL, one pipelined transaction per batch. */
export const mysqlWriter: WriterSpec = {
  dialect: "mysql",
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
  create: (connection) => new BunSqlWriter("mysql", connection, classifyMysql),
};
