import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import { WriteError } from "../src/errors.ts";
import type { OutboxWriter, Statement, WriteResult } from "../src/writers/writer.ts";
import { type Engine, openRemote, type Remote, type ServerRemote } from "./support/remote.ts";

// Constraints checked only at COMMIT (DEFERRABLE INITIALLY DEFERRED) fail the batch's COMMIT with
// a row-fault code and no statement index. The writer must blame the statement that caused it
// (its namespace held, the others committed), not report an outage that stalls the whole target.

interface Fixture {
  engine: Engine;
  ph(n: number): string;
  /** parent(id), child(id, pid → parent DEFERRABLE INITIALLY DEFERRED), other(id, note); parent 1 exists. */
  schema: string[];
  /** The code a deferred foreign-key violation is reported with. */
  fkCode: string;
}

const sqliteSchema = [
  "CREATE TABLE parent (id INTEGER PRIMARY KEY)",
  "CREATE TABLE child (id INTEGER PRIMARY KEY, pid INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)",
  "CREATE TABLE other (id INTEGER PRIMARY KEY, note TEXT)",
  "INSERT INTO parent (id) VALUES (1)",
];

const fixtures: Array<[string, Fixture]> = [
  ["sqlite", { engine: "sqlite", ph: () => "?", schema: sqliteSchema, fkCode: "SQLITE_CONSTRAINT_FOREIGNKEY" }],
  // @libsql/client turns foreign keys on for file: URLs itself.
  ["libsql file:", { engine: "libsql", ph: () => "?", schema: sqliteSchema, fkCode: "SQLITE_CONSTRAINT_FOREIGNKEY" }],
  [
    "libsql over http",
    {
      engine: "libsql-http",
      ph: () => "?",
      schema: sqliteSchema,
      // sqld sends the primary code only, but the violation is found by the writer's own
      // per-statement check (blameDeferred), which names it precisely.
      fkCode: "SQLITE_CONSTRAINT_FOREIGNKEY",
    },
  ],
  [
    "postgres",
    {
      engine: "postgres",
      ph: (n) => `$${n}`,
      schema: [
        "CREATE TABLE parent (id BIGINT PRIMARY KEY)",
        "CREATE TABLE child (id BIGINT PRIMARY KEY, pid BIGINT REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)",
        "CREATE TABLE other (id BIGINT PRIMARY KEY, note TEXT)",
        "INSERT INTO parent (id) VALUES (1)",
      ],
      fkCode: "23503",
    },
  ],
];

const str = (rows: unknown[][]) => rows.map((r) => r.map((v) => (v === null ? null : String(v))));
const shape = (results: WriteResult[]) => results.map((r) => (r.ok ? "ok" : r.skipped ? "skipped" : "failed"));

describe.each(fixtures)("%s writer, deferred constraints", (_name, fx) => {
  const ph = fx.ph;
  // One remote per engine (foreign keys on); each test starts from the schema alone and a fresh writer.
  let remote: Remote;
  let writer: OutboxWriter;
  const child = (seq: number, id: number, pid: number): Statement => ({
    sql: `INSERT INTO child (id, pid) VALUES (${ph(1)}, ${ph(2)})`,
    args: [id, pid],
    namespace: "child",
    seq,
  });
  const note = (seq: number, id: number): Statement => ({
    sql: `INSERT INTO other (id, note) VALUES (${ph(1)}, ${ph(2)})`,
    args: [id, `n${id}`],
    namespace: "other",
    seq,
  });

  beforeAll(async () => {
    remote = await openRemote(fx.engine, { foreignKeys: true });
  });
  afterAll(async () => {
    await remote?.done();
  });
  beforeEach(async () => {
    for (const t of ["child", "parent", "other", "uniq"]) await remote.exec(`DROP TABLE IF EXISTS ${t}`);
    for (const sql of fx.schema) await remote.exec(sql);
    writer = remote.createWriter();
  });
  afterEach(async () => {
    await writer.close?.();
  });

  test("a row that violates a deferred foreign key at COMMIT fails its namespace alone: nothing of that namespace lands, everything else commits", async () => {
    const results = await writer.writeBatch([
      child(1, 1, 1),
      note(1, 10),
      child(2, 2, 99), // no parent 99: only COMMIT notices
      note(2, 11),
      child(3, 3, 1),
      note(3, 12),
    ]);
    expect(shape(results)).toEqual(["skipped", "ok", "failed", "ok", "skipped", "ok"]);
    expect((results[2] as { errorClass?: string }).errorClass).toBe(fx.fkCode);
    expect(str(await remote.rows("SELECT id, pid FROM child ORDER BY id"))).toEqual([]);
    expect(str(await remote.rows("SELECT id FROM other ORDER BY id"))).toEqual([["10"], ["11"], ["12"]]);
  });

  test("a deferred foreign key satisfied later in the same batch still commits the batch in one piece", async () => {
    const results = await writer.writeBatch([
      child(1, 1, 2), // parent 2 arrives two statements later
      note(1, 10),
      { sql: `INSERT INTO parent (id) VALUES (${ph(1)})`, args: [2], namespace: "child", seq: 2 },
    ]);
    expect(shape(results)).toEqual(["ok", "ok", "ok"]);
    expect(str(await remote.rows("SELECT id, pid FROM child ORDER BY id"))).toEqual([["1", "2"]]);
  });

  test("a row that relies on a later row of its namespace for a deferred foreign key is not blamed for another namespace's violation", async () => {
    await remote.exec("INSERT INTO child (id, pid) VALUES (5, 1)");
    const results = await writer.writeBatch([
      child(1, 1, 2), // parent 2 arrives later in this namespace
      note(1, 10),
      { sql: `DELETE FROM parent WHERE id = ${ph(1)}`, args: [1], namespace: "parent", seq: 1 }, // child 5 still references it
      { sql: `INSERT INTO parent (id) VALUES (${ph(1)})`, args: [2], namespace: "child", seq: 2 },
      note(2, 11),
    ]);
    expect(shape(results)).toEqual(["ok", "ok", "failed", "ok", "ok"]);
    expect((results[2] as { errorClass?: string }).errorClass).toBe(fx.fkCode);
    expect(str(await remote.rows("SELECT id FROM parent ORDER BY id"))).toEqual([["1"], ["2"]]);
    expect(str(await remote.rows("SELECT id, pid FROM child ORDER BY id"))).toEqual([
      ["1", "2"],
      ["5", "1"],
    ]);
    expect(str(await remote.rows("SELECT id FROM other ORDER BY id"))).toEqual([["10"], ["11"]]);
  });

  test("deferred violations in two namespaces are each blamed on their own row", async () => {
    await remote.exec("INSERT INTO child (id, pid) VALUES (5, 1)");
    const parent = (seq: number, sql: string, id: number): Statement => ({ sql, args: [id], namespace: "parent", seq });
    const results = await writer.writeBatch([
      child(1, 1, 98),
      note(1, 10),
      parent(1, `DELETE FROM parent WHERE id = ${ph(1)}`, 1), // child 5 still references it
      child(2, 2, 1),
      parent(2, `INSERT INTO parent (id) VALUES (${ph(1)})`, 3),
      note(2, 11),
    ]);
    expect(shape(results)).toEqual(["failed", "ok", "failed", "skipped", "skipped", "ok"]);
    expect((results[0] as { errorClass?: string }).errorClass).toBe(fx.fkCode);
    expect((results[2] as { errorClass?: string }).errorClass).toBe(fx.fkCode);
    expect(str(await remote.rows("SELECT id FROM parent ORDER BY id"))).toEqual([["1"]]);
    expect(str(await remote.rows("SELECT id FROM child ORDER BY id"))).toEqual([["5"]]);
    expect(str(await remote.rows("SELECT id FROM other ORDER BY id"))).toEqual([["10"], ["11"]]);
  });
});

describe("postgres writer, other deferred constraints", () => {
  let remote: ServerRemote;
  let writer: OutboxWriter;
  beforeAll(async () => {
    remote = await openRemote("postgres");
    writer = remote.createWriter();
  });
  afterAll(async () => {
    await writer?.close?.();
    await remote?.done();
  });

  test("a row that breaks a DEFERRABLE INITIALLY DEFERRED unique constraint fails its namespace alone with 23505", async () => {
    await remote.exec(
      "CREATE TABLE uniq (id BIGINT, code TEXT, CONSTRAINT uniq_code UNIQUE (code) DEFERRABLE INITIALLY DEFERRED)",
    );
    await remote.exec("CREATE TABLE other2 (id BIGINT PRIMARY KEY)");
    const results = await writer.writeBatch([
      { sql: "INSERT INTO uniq (id, code) VALUES ($1, $2)", args: [1, "a"], namespace: "uniq", seq: 1 },
      { sql: "INSERT INTO other2 (id) VALUES ($1)", args: [1], namespace: "other2", seq: 1 },
      { sql: "INSERT INTO uniq (id, code) VALUES ($1, $2)", args: [2, "a"], namespace: "uniq", seq: 2 },
      { sql: "INSERT INTO uniq (id, code) VALUES ($1, $2)", args: [3, "b"], namespace: "uniq", seq: 3 },
      { sql: "INSERT INTO other2 (id) VALUES ($1)", args: [2], namespace: "other2", seq: 2 },
    ]);
    expect(shape(results)).toEqual(["skipped", "ok", "failed", "skipped", "ok"]);
    expect((results[2] as { errorClass?: string }).errorClass).toBe("23505");
    expect(str(await remote.rows("SELECT id, code FROM uniq ORDER BY id"))).toEqual([]);
    expect(str(await remote.rows("SELECT id FROM other2 ORDER BY id"))).toEqual([["1"], ["2"]]);
  });

  test("a deferred violation the checking pass cannot blame on a statement is still an outage (WriteError), nothing committed", async () => {
    // The batch defers the constraint again after the writer made it immediate: only COMMIT sees it.
    await remote.exec("CREATE TABLE p3 (id BIGINT PRIMARY KEY)");
    await remote.exec(
      "CREATE TABLE c3 (id BIGINT PRIMARY KEY, pid BIGINT REFERENCES p3 (id) DEFERRABLE INITIALLY IMMEDIATE)",
    );
    const error = await writer
      .writeBatch([
        { sql: "SET CONSTRAINTS ALL DEFERRED", args: [], namespace: "c3", seq: 1 },
        { sql: "INSERT INTO c3 (id, pid) VALUES ($1, $2)", args: [1, 7], namespace: "c3", seq: 2 },
      ])
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(WriteError);
    expect((error as Error).message).toContain("23503");
    expect(await remote.rows("SELECT id FROM c3")).toEqual([]);
  });
});

describe("mysql writer, foreign keys", () => {
  let remote: ServerRemote;
  beforeAll(async () => {
    remote = await openRemote("mysql");
  });
  afterAll(async () => {
    await remote?.done();
  });

  test("InnoDB checks a foreign key per statement (no deferred constraints): the violating row fails its namespace with 1452", async () => {
    await remote.exec("CREATE TABLE parent (id BIGINT PRIMARY KEY) ENGINE=InnoDB");
    await remote.exec(
      "CREATE TABLE child (id BIGINT PRIMARY KEY, pid BIGINT, FOREIGN KEY (pid) REFERENCES parent (id)) ENGINE=InnoDB",
    );
    await remote.exec("INSERT INTO parent (id) VALUES (1)");
    const writer = remote.createWriter();
    try {
      const results = await writer.writeBatch([
        { sql: "INSERT INTO child (id, pid) VALUES (?, ?)", args: [1, 1], namespace: "child", seq: 1 },
        { sql: "INSERT INTO child (id, pid) VALUES (?, ?)", args: [2, 99], namespace: "child", seq: 2 },
        { sql: "INSERT INTO child (id, pid) VALUES (?, ?)", args: [3, 1], namespace: "child", seq: 3 },
      ]);
      expect(shape(results)).toEqual(["skipped", "failed", "skipped"]);
      expect((results[1] as { errorClass?: string }).errorClass).toBe("1452");
      expect(str(await remote.rows("SELECT id FROM child ORDER BY id"))).toEqual([]);
    } finally {
      await writer.close?.();
    }
  });
});
