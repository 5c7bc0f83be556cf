import { describe, expect, test } from "bun:test";
import { ConfigError, WriteError } from "../src/errors.ts";
import { classifyMysql, classifyPostgres, classifySqlite } from "../src/writers/classify.ts";
import { builtinWriters, createWriter } from "../src/writers/registry.ts";
import { statementKind } from "../src/writers/statement-kind.ts";
import { errorOf } from "./support/errors.ts";

describe("writer registry", () => {
  test("registers sqlite, libsql, postgres and mysql with their dialects", () => {
    expect(Object.fromEntries(Object.entries(builtinWriters).map(([name, spec]) => [name, spec.dialect]))).toEqual({
      sqlite: "sqlite",
      libsql: "libsql",
      postgres: "postgres",
      mysql: "mysql",
    });
  });

  test("marks passwords, tokens and URLs that may embed them as secret", () => {
    const secret = (name: keyof typeof builtinWriters) =>
      builtinWriters[name].keys
        .filter((k) => k.secret)
        .map((k) => k.name)
        .sort();
    expect(secret("postgres")).toEqual(["password", "url"]);
    expect(secret("mysql")).toEqual(["password", "url"]);
    expect(secret("libsql")).toEqual(["auth_token", "db_token"]);
    expect(secret("sqlite")).toEqual([]);
  });

  test("rejects an unknown writer name with ConfigError", () => {
    expect(() => createWriter("oracle", {})).toThrow(ConfigError);
    expect(() => createWriter("toString", {})).toThrow(/unknown writer "toString"/);
  });

  test.each([
    ["postgres", {}, "url", /either url or host is required/],
    ["postgres", { url: "mysql://x@h/db" }, "url", /must start with postgres:\/\/ or postgresql:\/\//],
    ["postgres", { url: "postgres://h/db", host: "h" }, "host", /not both/],
    ["postgres", { host: "h", port: 70000 }, "port", /port number/],
    ["mysql", { host: "h", ssl: "sometimes" }, "ssl", /must be true, false or one of/],
    ["mysql", { host: "h", user: "a", username: "b" }, "username", /alias/],
    ["mysql", { host: "h", connect_timeout: -1 }, "connect_timeout", /positive number/],
    ["libsql", {}, "url", /is required/],
    ["libsql", { url: "ftp://x" }, "url", /must start with libsql:\/\//],
    ["libsql", { url: "file:a.db", db_url: "file:b.db" }, "db_url", /alias/],
    ["sqlite", { path: "x.db", busy_timeout: "soon" }, "busy_timeout", /positive number/],
    ["sqlite", { path: "x.db", foreign_keys: "yes" }, "foreign_keys", /must be true or false/],
  ] as const)("%s validate flags %j at key %s", (name, connection, key, message) => {
    const problems = builtinWriters[name].validate!(connection as Record<string, unknown>);
    expect(problems.find((p) => p.key === key)?.message).toMatch(message);
  });

  test.each([
    ["postgres", { url: "postgres://u@127.0.0.1/db" }],
    ["postgres", { host: "127.0.0.1", port: 5432, user: "u", password: "p", database: "db", ssl: false }],
    ["mysql", { url: "mariadb://root@127.0.0.1:3306/test" }],
    ["libsql", { db_url: "libsql://example.turso.io", db_token: "t" }],
    ["libsql", { url: "file:local.db" }],
    ["sqlite", { path: "/tmp/x.db" }],
    ["sqlite", { path: "/tmp/x.db", foreign_keys: true }],
    ["sqlite", { path: "/tmp/x.db", foreign_keys: "false" }],
  ] as const)("%s accepts %j", (name, connection) => {
    expect(builtinWriters[name].validate!(connection as Record<string, unknown>)).toEqual([]);
  });

  // A tenant template says whether its writers are concurrent before it makes one (TenantWriters.concurrent).
  test.each([
    ["postgres", { url: "postgres://u@127.0.0.1/db" }],
    ["mysql", { url: "mysql://root@127.0.0.1:3306/test" }],
    ["libsql", { url: "file:/tmp/x.db" }],
    ["sqlite", { path: "/tmp/x.db" }],
  ] as const)("the %s spec says whether its writers take concurrent calls, as they do", async (name, connection) => {
    const writer = createWriter(name, connection);
    expect(builtinWriters[name].concurrent ?? false).toBe(writer.concurrent ?? false);
    await writer.close?.();
  });

  test("createWriter reports every problem of a connection table in one ConfigError", () => {
    const error = errorOf<ConfigError>(() => createWriter("postgres", { port: "x" }));
    expect(error).toBeInstanceOf(ConfigError);
    expect(error!.code).toBe("E_CONFIG");
    expect(error!.message).toContain("connection.port");
    expect(error!.message).toContain("connection.url");
  });

  test.each([
    ["sqlite", "connection.path"],
    ["libsql", "connection.url"],
  ] as const)(
    "a %s writer created past the registry's checks without its required key is a ConfigError at %s, not a WriteError",
    (name, keyPath) => {
      const error = errorOf<ConfigError>(() => builtinWriters[name].create({}));
      expect(error).toBeInstanceOf(ConfigError);
      expect(error).not.toBeInstanceOf(WriteError);
      expect(error).toMatchObject({ code: "E_CONFIG", keyPath });
      expect(error.message).toStartWith(`[${keyPath}]: is required by the ${name} writer`);
    },
  );

  test("describe says writer, user, host, port and database, never a password, token or URL parameter", () => {
    expect(
      builtinWriters.postgres.describe!({ url: "postgres://app:hunter2@db.example:5432/prod?sslmode=require" }),
    ).toBe("postgres app@db.example:5432/prod");
    expect(builtinWriters.postgres.describe!({ url: "postgresql://app@db.example/prod" })).toBe(
      "postgres app@db.example:5432/prod",
    );
    expect(builtinWriters.mysql.describe!({ host: "db", user: "app", password: "hunter2", database: "d" })).toBe(
      "mysql app@db:3306/d",
    );
    expect(builtinWriters.mysql.describe!({ url: "mysql://root:pw@127.0.0.1:3307/x?password=pw" })).toBe(
      "mysql root@127.0.0.1:3307/x",
    );
    expect(builtinWriters.libsql.describe!({ url: "libsql://x.turso.io?authToken=abc", auth_token: "abc" })).toBe(
      "libsql libsql://x.turso.io",
    );
    expect(builtinWriters.libsql.describe!({ url: "file:/srv/local.db" })).toBe("libsql file:/srv/local.db");
  });
});

describe("error classification", () => {
  test.each([
    ["23505", "row"],
    ["23502", "row"],
    ["23514", "row"],
    ["22P02", "row"],
    ["42601", "row"],
    ["2BP01", "row"],
    ["0A000", "row"],
    ["P0001", "row"],
    ["42P01", "schema"],
    ["42703", "schema"],
    ["42P10", "schema"],
    ["42501", "schema"],
    ["3F000", "schema"],
    ["28P01", "misconfigured"],
    ["28000", "misconfigured"],
    ["3D000", "misconfigured"],
    ["08006", "outage"],
    ["57P01", "outage"],
    ["57014", "outage"],
    ["53300", "outage"],
    ["40001", "outage"],
    ["40P01", "outage"],
    ["XX000", "outage"],
    ["55P03", "outage"],
  ])("postgres SQLSTATE %s is %s", (errno, kind) => {
    expect(classifyPostgres({ code: "ERR_POSTGRES_SERVER_ERROR", errno }).kind).toBe(kind as "row" | "outage");
  });

  test("postgres errors without a SQLSTATE (refused, closed, timeout) are outages", () => {
    expect(classifyPostgres({ code: "ERR_POSTGRES_CONNECTION_CLOSED" })).toEqual({ kind: "outage" });
    expect(classifyPostgres(new Error("boom"))).toEqual({ kind: "outage" });
  });

  test.each([
    [1062, "row"],
    [1048, "row"],
    [3819, "row"],
    [4025, "row"],
    [1064, "row"],
    [1366, "row"],
    [1265, "row"],
    [1406, "row"],
    [1146, "schema"],
    [1054, "schema"],
    [1142, "schema"],
    [1143, "schema"],
    [1045, "misconfigured"],
    [1044, "misconfigured"],
    [1049, "misconfigured"],
    [2002, "outage"],
    [2003, "outage"],
    [2006, "outage"],
    [2013, "outage"],
    [1927, "outage"],
    [1053, "outage"],
    [1205, "outage"],
    [1213, "outage"],
    [1040, "outage"],
  ])("mysql errno %d is %s", (errno, kind) => {
    expect(classifyMysql({ code: "ERR_MYSQL_SERVER_ERROR", errno }).kind).toBe(kind as "row" | "outage");
  });

  test.each([
    ["SQLITE_CONSTRAINT_UNIQUE", "row"],
    ["SQLITE_CONSTRAINT_NOTNULL", "row"],
    ["SQLITE_ERROR", "row"],
    ["SQLITE_MISMATCH", "row"],
    ["SQLITE_TOOBIG", "row"],
    ["SQL_PARSE_ERROR", "row"],
    ["SQLITE_BUSY", "outage"],
    ["SQLITE_LOCKED", "outage"],
    ["SQLITE_IOERR_WRITE", "outage"],
    ["SQLITE_FULL", "outage"],
    ["SQLITE_CANTOPEN", "outage"],
    ["SQLITE_CORRUPT", "outage"],
    ["ECONNREFUSED", "outage"],
    ["SERVER_ERROR", "outage"],
  ])("sqlite/libsql code %s is %s", (code, kind) => {
    expect(classifySqlite({ code }).kind).toBe(kind as "row" | "outage");
  });

  test.each([
    ["SQLITE_ERROR", "no such table: orders"],
    ["SQLITE_ERROR", "table orders has no column named note"],
    ["SQLITE_ERROR", "no such column: note"],
    ["SQLITE_ERROR", "ON CONFLICT clause does not match any PRIMARY KEY or UNIQUE constraint"],
    ["SQLITE_UNKNOWN", "SQLite error: no such table: orders"],
  ])("sqlite/libsql %s %j is the remote schema's fault", (code, message) => {
    expect(classifySqlite({ code, message }).kind).toBe("schema");
  });

  test("libsql's extendedCode wins over the primary code", () => {
    expect(classifySqlite({ code: "SQLITE_CONSTRAINT", extendedCode: "SQLITE_CONSTRAINT_PRIMARYKEY" })).toEqual({
      kind: "row",
      errorClass: "SQLITE_CONSTRAINT_PRIMARYKEY",
    });
  });
});

describe("statement kind", () => {
  test.each([
    ["SELECT MAX(outbox_seq) FROM t", "read"],
    ["  -- seed\n/* x */ (select 1)", "read"],
    ["WITH x AS (SELECT 1) SELECT * FROM x", "read"],
    ["ALTER TABLE t ADD COLUMN outbox_seq BIGINT", "ddl"],
    ["create unique index i on t (outbox_seq)", "ddl"],
    ["INSERT INTO t VALUES (1)", "write"],
    ["UPDATE t SET a = 1", "write"],
  ])("%j is %s", (sql, kind) => {
    expect(statementKind(sql)).toBe(kind as "read" | "ddl" | "write");
  });
});

describe("credentials in errors", () => {
  test.each(["postgres", "mysql"] as const)(
    "a refused %s connection configured with host/password never shows the password",
    async (name) => {
      const listener = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
      const port = listener.port;
      listener.stop(true);
      const password = "p@ss w0rd/with:specials";
      const writer = createWriter(name, {
        host: "127.0.0.1",
        port,
        user: "app",
        password,
        database: "db",
        connect_timeout: 2,
      });
      try {
        const error = (await writer
          .writeBatch([{ sql: "SELECT 1", args: [], namespace: "t", seq: 1 }])
          .catch((e: unknown) => e)) as Error;
        expect(error).toBeInstanceOf(WriteError);
        expect(error.message).toContain(`127.0.0.1:${port}`);
        for (const text of [error.message, String(error.stack), String((error.cause as Error | undefined)?.message)]) {
          expect(text).not.toContain(password);
          expect(text).not.toContain(encodeURIComponent(password));
        }
      } finally {
        await writer.close?.();
      }
    },
  );
});
