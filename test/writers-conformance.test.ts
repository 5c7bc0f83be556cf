import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import { WriteError } from "../src/errors.ts";
import { createWriter } from "../src/writers/registry.ts";
import type { OutboxWriter, Statement, WriteResult } from "../src/writers/writer.ts";
import type { BindValue } from "../src/vocabulary.ts";
import { type Engine, openRemote, type Remote } from "./support/remote.ts";

/** What the suite needs from one engine; everything else is the same SQL for every writer. */
interface Fixture {
  engine: Engine;
  /** `?` or `$n` for the n-th (1-based) bind parameter. */
  ph(n: number): string;
  /** CREATE TABLE statements for `events`, `other` and `kinds` in this dialect. */
  schema: string[];
  /** The most bind parameters one statement may carry (one more is refused). */
  maxBindParams: number;
  /** Driver codes for NOT NULL, CHECK, PRIMARY KEY, syntax error, missing table, missing column. */
  codes: { notNull: string; check: string; primaryKey: string; syntax: string; noTable: string; noColumn: string };
  /** Keys the writer under test adds to the remote's connection. */
  keys?: Record<string, unknown>;
  /** A writer whose server is unreachable (closed port), configured with `secret` as password/token. */
  unreachable(secret: string): OutboxWriter;
}

/** A TCP port on 127.0.0.1 that nothing listens on. */
function closedPort(): number {
  const l = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = l.port;
  l.stop(true);
  return port;
}

const sqliteSchema = [
  "CREATE TABLE events (id INTEGER PRIMARY KEY, name TEXT NOT NULL, qty INTEGER CHECK (qty >= 0))",
  "CREATE TABLE other (id INTEGER PRIMARY KEY, note TEXT)",
  "CREATE TABLE kinds (k TEXT PRIMARY KEY, s TEXT, i INTEGER, f REAL, b BOOLEAN, bytes BLOB)",
];
// SQLite as built into Bun, and libSQL, allow 250 000 (SQLITE_MAX_VARIABLE_NUMBER).
const SQLITE_MAX_BIND_PARAMS = 250_000;
const sqliteCodes = {
  notNull: "SQLITE_CONSTRAINT_NOTNULL",
  check: "SQLITE_CONSTRAINT_CHECK",
  primaryKey: "SQLITE_CONSTRAINT_PRIMARYKEY",
  syntax: "SQLITE_ERROR",
  noTable: "SQLITE_ERROR",
  noColumn: "SQLITE_ERROR",
};

function serverFixture(kind: "postgres" | "mysql"): Fixture {
  const isPg = kind === "postgres";
  return {
    engine: kind,
    ph: (n) => (isPg ? `$${n}` : "?"),
    maxBindParams: 65_535, // both wire protocols count parameters in 16 bits
    schema: isPg
      ? [
          "CREATE TABLE events (id BIGINT PRIMARY KEY, name TEXT NOT NULL, qty INTEGER CHECK (qty >= 0))",
          "CREATE TABLE other (id BIGINT PRIMARY KEY, note TEXT)",
          "CREATE TABLE kinds (k TEXT PRIMARY KEY, s TEXT, i BIGINT, f DOUBLE PRECISION, b BOOLEAN, bytes BYTEA)",
        ]
      : [
          "CREATE TABLE events (id BIGINT PRIMARY KEY, name VARCHAR(100) NOT NULL, qty INTEGER CHECK (qty >= 0)) ENGINE=InnoDB",
          "CREATE TABLE other (id BIGINT PRIMARY KEY, note TEXT) ENGINE=InnoDB",
          "CREATE TABLE kinds (k VARCHAR(20) PRIMARY KEY, s TEXT, i BIGINT, f DOUBLE, b BOOLEAN, bytes BLOB) ENGINE=InnoDB",
        ],
    codes: isPg
      ? { notNull: "23502", check: "23514", primaryKey: "23505", syntax: "42601", noTable: "42P01", noColumn: "42703" }
      : { notNull: "1048", check: "4025", primaryKey: "1062", syntax: "1064", noTable: "1146", noColumn: "1054" },
    keys: { connect_timeout: 5 },
    unreachable: (secret) =>
      createWriter(kind, { url: `${kind}://someone:${secret}@127.0.0.1:${closedPort()}/nowhere`, connect_timeout: 2 }),
  };
}

const fixtures: Array<[string, Fixture]> = [
  [
    "sqlite",
    {
      engine: "sqlite",
      ph: () => "?",
      schema: sqliteSchema,
      maxBindParams: SQLITE_MAX_BIND_PARAMS,
      codes: sqliteCodes,
      unreachable: () => createWriter("sqlite", { path: "/nonexistent-dir-sqloutbox/x/remote.db" }),
    },
  ],
  [
    "libsql",
    {
      engine: "libsql",
      ph: () => "?",
      schema: sqliteSchema,
      maxBindParams: SQLITE_MAX_BIND_PARAMS,
      codes: sqliteCodes,
      unreachable: (secret) =>
        createWriter("libsql", { url: `http://127.0.0.1:${closedPort()}`, auth_token: secret, batch_timeout: 10 }),
    },
  ],
  [
    // Remote libSQL: the client's Hrana-over-HTTP transport against a test server that runs every
    // statement on the same kind of SQLite file (see test/support/hrana-server.ts). Codes are what
    // sqld sends: the primary SQLite code only, SQLITE_ERROR as SQLITE_UNKNOWN, parse errors its own.
    "libsql over http",
    {
      engine: "libsql-http",
      ph: () => "?",
      schema: sqliteSchema,
      maxBindParams: SQLITE_MAX_BIND_PARAMS,
      codes: {
        notNull: "SQLITE_CONSTRAINT",
        check: "SQLITE_CONSTRAINT",
        primaryKey: "SQLITE_CONSTRAINT",
        syntax: "SQL_PARSE_ERROR",
        noTable: "SQLITE_UNKNOWN",
        noColumn: "SQLITE_UNKNOWN",
      },
      unreachable: (secret) =>
        createWriter("libsql", { url: `http://127.0.0.1:${closedPort()}`, auth_token: secret, batch_timeout: 10 }),
    },
  ],
  ["postgres", serverFixture("postgres")],
  ["mysql", serverFixture("mysql")],
];

const norm = (rows: unknown[][]) =>
  rows.map((r) => r.map((v) => (v === null ? null : v instanceof Uint8Array ? [...v] : String(v))));

describe.each(fixtures)("%s writer", (_name, fx) => {
  // One remote per engine; each test starts from the schema alone and a fresh writer.
  let remote: Remote;
  let writer: OutboxWriter;
  beforeAll(async () => {
    remote = await openRemote(fx.engine, { bigints: true, token: "test-token" });
  });
  afterAll(async () => {
    await remote?.done();
  });
  const ph = fx.ph;
  const ins = (ns: string, seq: number, id: number, name: string | null, qty: number | null = 1): Statement => ({
    sql: `INSERT INTO events (id, name, qty) VALUES (${ph(1)}, ${ph(2)}, ${ph(3)})`,
    args: [id, name, qty],
    namespace: ns,
    seq,
  });
  const note = (seq: number, id: number, text: string): Statement => ({
    sql: `INSERT INTO other (id, note) VALUES (${ph(1)}, ${ph(2)})`,
    args: [id, text],
    namespace: "other",
    seq,
  });

  beforeEach(async () => {
    for (const t of ["events", "other", "kinds", "created"]) await remote.exec(`DROP TABLE IF EXISTS ${t}`);
    for (const sql of fx.schema) await remote.exec(sql);
    writer = remote.createWriter(fx.keys);
  });
  afterEach(async () => {
    await writer.close?.();
  });

  test("applies a batch in order and returns one rowsAffected result per statement", async () => {
    const results = await writer.writeBatch([
      ins("events", 1, 1, "first"),
      {
        sql: `UPDATE events SET name = ${ph(1)} WHERE id = ${ph(2)}`,
        args: ["renamed", 1],
        namespace: "events",
        seq: 2,
      },
      ins("events", 3, 2, "second"),
      { sql: `DELETE FROM events WHERE id = ${ph(1)}`, args: [404], namespace: "events", seq: 4 },
    ]);
    expect(results).toEqual([
      { ok: true, rowsAffected: 1 },
      { ok: true, rowsAffected: 1 },
      { ok: true, rowsAffected: 1 },
      { ok: true, rowsAffected: 0 },
    ]);
    expect(norm(await remote.rows("SELECT id, name FROM events ORDER BY id"))).toEqual([
      ["1", "renamed"],
      ["2", "second"],
    ]);
  });

  test("returns an empty result list for an empty batch", async () => {
    expect(await writer.writeBatch([])).toEqual([]);
  });

  test("applies a namespace whole or not at all: a failed statement rolls back its namespace (before and after it) and the other namespaces commit", async () => {
    const results = await writer.writeBatch([
      ins("events", 1, 1, "a"),
      note(1, 10, "x"),
      ins("events", 2, 1, "duplicate"),
      note(2, 11, "y"),
      ins("events", 3, 2, "behind the failure"),
      { sql: `INSERT INTO kinds (k, s) VALUES (${ph(1)}, ${ph(2)})`, args: ["k1", null], namespace: "kinds", seq: 1 },
      { sql: `INSERT INTO kinds (k, s) VALUES (${ph(1)}, ${ph(2)})`, args: ["k1", "dup"], namespace: "kinds", seq: 2 },
      note(3, 12, "z"),
      { sql: `INSERT INTO kinds (k, s) VALUES (${ph(1)}, ${ph(2)})`, args: ["k2", null], namespace: "kinds", seq: 3 },
    ]);
    expect(results.map((r) => (r.ok ? "ok" : r.skipped ? "skipped" : "failed"))).toEqual([
      "skipped",
      "ok",
      "failed",
      "ok",
      "skipped",
      "skipped",
      "failed",
      "ok",
      "skipped",
    ]);
    const failed = results[2] as Extract<WriteResult, { ok: false }>;
    expect(failed.errorClass).toBe(fx.codes.primaryKey);
    expect(failed.error.length).toBeGreaterThan(0);
    expect((results[6] as { errorClass?: string }).errorClass).toBe(fx.codes.primaryKey);
    expect((results[0] as { skipped?: boolean }).skipped).toBe(true);
    expect((results[4] as { skipped?: boolean }).skipped).toBe(true);
    // Read back through an independent connection: every ok statement is committed, nothing else.
    expect(norm(await remote.rows("SELECT id, name FROM events ORDER BY id"))).toEqual([]);
    expect(norm(await remote.rows("SELECT id, note FROM other ORDER BY id"))).toEqual([
      ["10", "x"],
      ["11", "y"],
      ["12", "z"],
    ]);
    expect(norm(await remote.rows("SELECT k, s FROM kinds ORDER BY k"))).toEqual([]);
  });

  test("isolates failures in several namespaces of one batch, each at its own position", async () => {
    // Six namespaces interleaved; namespace k < 5 fails at its (k+1)-th statement (a duplicate id),
    // namespace 5 never fails and is the only one applied.
    const stmts: Statement[] = [];
    const expected: Array<"ok" | "failed" | "skipped"> = [];
    const kept: number[] = [];
    for (let round = 0; round < 6; round++) {
      for (let k = 0; k < 6; k++) {
        const fails = round === k + 1;
        const id = fails ? k * 100 : k * 100 + round;
        stmts.push({ ...note(round, id, `n${k}`), namespace: `ns${k}` });
        expected.push(k === 5 ? "ok" : fails ? "failed" : "skipped");
        if (k === 5) kept.push(id);
      }
    }
    const results = await writer.writeBatch(stmts);
    expect(results.map((r) => (r.ok ? "ok" : r.skipped ? "skipped" : "failed"))).toEqual(expected);
    const ids = (await remote.rows("SELECT id FROM other ORDER BY id")).map((r) => Number(r[0]));
    expect(ids).toEqual(kept.sort((a, b) => a - b));
  });

  test("refuses text holding more than one statement as that row's fault: none of it runs, the victim table survives", async () => {
    const results = await writer.writeBatch([
      { sql: "INSERT INTO other (id, note) VALUES (1, 'x'); DROP TABLE events", args: [], namespace: "other", seq: 1 },
      { sql: "INSERT INTO other (id, note) VALUES (2, 'y');;", args: [], namespace: "other2", seq: 1 },
      ins("events", 1, 1, "a"),
    ]);
    expect(results[0]).toMatchObject({ ok: false, errorClass: "E_UNSUPPORTED_STATEMENT" });
    expect((results[0] as { error: string }).error).toContain("2 statements");
    expect(results[1]).toMatchObject({ ok: true }); // a trailing empty statement is still one statement
    expect(results[2]).toMatchObject({ ok: true, rowsAffected: 1 });
    expect(norm(await remote.rows("SELECT id FROM events"))).toEqual([["1"]]); // not dropped
    expect(norm(await remote.rows("SELECT id FROM other ORDER BY id"))).toEqual([["2"]]);
  });

  test("reports a statement whose argument is not a bind value as the row's fault and skips the rest of its namespace", async () => {
    const results = await writer.writeBatch([
      { ...note(1, 1, "x"), args: [1, { not: "bindable" } as unknown as BindValue] },
      note(2, 2, "behind it"),
      ins("events", 1, 1, "other namespace"),
    ]);
    expect(results[0]).toMatchObject({ ok: false, errorClass: "E_INVALID_ARG" });
    expect(results[1]).toMatchObject({ ok: false, skipped: true });
    expect(results[2]).toEqual({ ok: true, rowsAffected: 1 });
    expect(norm(await remote.rows("SELECT id FROM other"))).toEqual([]);
  });

  test("a statement the driver refuses (too many bind parameters) fails its namespace alone: nothing of it lands, the other namespace lands once", async () => {
    // One past the engine's limit (PostgreSQL's is refused by Bun before sending).
    const n = fx.maxBindParams + 1;
    const big: Statement = {
      sql: `INSERT INTO other (id) VALUES ${Array.from({ length: n }, (_, i) => `(${ph(i + 1)})`).join(", ")}`,
      args: Array.from({ length: n }, (_, i) => 1000 + i),
      namespace: "other",
      seq: 2,
    };
    const results = await writer.writeBatch([
      note(1, 1, "before"),
      ins("events", 1, 1, "a"),
      big,
      note(3, 3, "after"),
      ins("events", 2, 2, "b"),
    ]);
    expect(results.map((r) => (r.ok ? "ok" : r.skipped ? "skipped" : "failed"))).toEqual([
      "skipped",
      "ok",
      "failed",
      "skipped",
      "ok",
    ]);
    expect((results[2] as { errorClass?: string }).errorClass).toBeString();
    expect(norm(await remote.rows("SELECT id FROM other ORDER BY id"))).toEqual([]);
    expect(norm(await remote.rows("SELECT id FROM events ORDER BY id"))).toEqual([["1"], ["2"]]);
  });

  test("commits every statement of a successful batch together, visible to another connection", async () => {
    const stmts = Array.from({ length: 300 }, (_, i) =>
      i % 3 === 0 ? note(i, i, `n${i}`) : ins("events", i, i, `e${i}`, i),
    );
    const results = await writer.writeBatch(stmts);
    expect(results.every((r) => r.ok && r.rowsAffected === 1)).toBe(true);
    expect(norm(await remote.rows("SELECT COUNT(*) FROM events"))).toEqual([["200"]]);
    expect(norm(await remote.rows("SELECT COUNT(*) FROM other"))).toEqual([["100"]]);
  });

  test("returns a SELECT's rows as arrays of values", async () => {
    await writer.writeBatch([ins("events", 1, 1, "one", 5), ins("events", 2, 2, "two", 7)]);
    const [result] = await writer.writeBatch([
      { sql: "SELECT id, name, qty FROM events ORDER BY id", args: [], namespace: "events", seq: 0 },
    ]);
    expect(result!.ok).toBe(true);
    expect(norm((result as { rows: unknown[][] }).rows)).toEqual([
      ["1", "one", "5"],
      ["2", "two", "7"],
    ]);
    const [max] = await writer.writeBatch([{ sql: "SELECT MAX(id) FROM other", args: [], namespace: "other", seq: 0 }]);
    expect(max).toEqual({ ok: true, rows: [[null]] });
  });

  test("runs DDL as a statement with rowsAffected 0 and reports a failing DDL as the row's fault", async () => {
    await writer.writeBatch([ins("events", 1, 1, "x")]);
    const results = await writer.writeBatch([
      { sql: "CREATE TABLE created (id INTEGER PRIMARY KEY)", args: [], namespace: "created", seq: 0 },
      { sql: "CREATE TABLE events (id INTEGER PRIMARY KEY)", args: [], namespace: "events", seq: 0 },
    ]);
    expect(results[0]).toEqual({ ok: true, rowsAffected: 0 });
    expect(results[1]!.ok).toBe(false);
    expect((results[1] as { errorClass?: string }).errorClass).toBeString();
    expect(norm(await remote.rows("SELECT COUNT(*) FROM created"))).toEqual([["0"]]);
  });

  test("binds every BindValue type and round-trips it", async () => {
    const big = 9007199254740993n; // 2^53 + 1: not representable as a double
    const bytes = new Uint8Array([0, 1, 127, 128, 255]);
    const row = (k: string, args: BindValue[]): Statement => ({
      sql: `INSERT INTO kinds (k, s, i, f, b, bytes) VALUES (${ph(1)}, ${ph(2)}, ${ph(3)}, ${ph(4)}, ${ph(5)}, ${ph(6)})`,
      args: [k, ...args],
      namespace: "kinds",
      seq: 1,
    });
    const results = await writer.writeBatch([
      row("a", ["héllo ✓", big, 1.5, true, bytes]),
      row("b", ["", -42, -0.25, false, new Uint8Array([])]),
      row("c", [null, null, null, null, null]),
    ]);
    expect(results.every((r) => r.ok)).toBe(true);
    const rows = await remote.rows("SELECT k, s, i, f, b, bytes FROM kinds ORDER BY k");
    const bool = (v: unknown) => (v === null ? null : v === true || v === 1 || v === 1n || v === "1" || v === "t");
    expect(
      rows.map((r) => [
        r[0],
        r[1],
        r[2] === null ? null : String(r[2]),
        r[3] === null ? null : Number(r[3]),
        bool(r[4]),
        r[5] === null ? null : [...(r[5] as Uint8Array)],
      ]),
    ).toEqual([
      ["a", "héllo ✓", "9007199254740993", 1.5, true, [...bytes]],
      ["b", "", "-42", -0.25, false, []],
      ["c", null, null, null, null, null],
    ]);
  });

  test.each([
    ["NOT NULL", "notNull", [1, null, 1]],
    ["CHECK", "check", [1, "negative", -1]],
  ] as const)("classifies a %s violation as the row's fault with the driver code", async (_label, code, args) => {
    const [result] = await writer.writeBatch([{ ...ins("events", 1, 0, ""), args: [...args] }]);
    expect(result).toMatchObject({ ok: false, errorClass: fx.codes[code] });
    expect((result as { skipped?: boolean }).skipped).toBeUndefined();
  });

  test("classifies a PRIMARY KEY violation and a syntax error as row faults, a missing table or column as the remote schema's", async () => {
    await writer.writeBatch([ins("events", 1, 1, "x")]);
    const results = await writer.writeBatch([
      ins("events", 2, 1, "again"),
      { sql: "INSERT INTO other VALUES VALUES (1)", args: [], namespace: "other", seq: 1 },
      { sql: "INSERT INTO no_such_table (id) VALUES (1)", args: [], namespace: "missing", seq: 1 },
      { sql: "INSERT INTO kinds (k, no_such_column) VALUES ('k', 1)", args: [], namespace: "kinds", seq: 1 },
    ]);
    expect(results.map((r) => (r as { errorClass?: string }).errorClass)).toEqual([
      fx.codes.primaryKey,
      fx.codes.syntax,
      fx.codes.noTable,
      fx.codes.noColumn,
    ]);
    expect(results.map((r) => (r as { remoteSchema?: boolean }).remoteSchema ?? false)).toEqual([
      false,
      false,
      true,
      true,
    ]);
  });

  test("throws WriteError naming where the target is, without the password, when the server is unreachable", async () => {
    const secret = "pw-S3cret-do-not-log";
    const unreachable = fx.unreachable(secret);
    try {
      const error = await unreachable.writeBatch([ins("events", 1, 1, "x")]).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(WriteError);
      expect((error as WriteError).code).toBe("E_WRITE");
      const text = `${(error as Error).message} ${String((error as Error).cause ?? "")} ${(error as Error).stack}`;
      expect(text).not.toContain(secret);
      // The writer, then where: host and port (and, for a server, the user and database).
      if (fx.engine !== "sqlite")
        expect((error as Error).message).toMatch(
          new RegExp(
            `^${fx.engine.startsWith("libsql") ? "libsql http://" : `${fx.engine} someone@`}127\\.0\\.0\\.1:\\d+`,
          ),
        );
    } finally {
      await unreachable.close?.();
    }
  });

  test("close() is idempotent and a later writeBatch throws WriteError", async () => {
    await writer.writeBatch([ins("events", 1, 1, "x")]);
    await writer.close?.();
    await writer.close?.();
    expect(writer.writeBatch([ins("events", 2, 2, "y")])).rejects.toBeInstanceOf(WriteError);
    expect(norm(await remote.rows("SELECT id FROM events"))).toEqual([["1"]]);
  });
});
