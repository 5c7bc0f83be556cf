import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import { WriteError } from "../src/errors.ts";
import { createWriter } from "../src/writers/registry.ts";
import type { OutboxWriter, Statement, WriteResult } from "../src/writers/writer.ts";
import { startHranaServer } from "./support/hrana-server.ts";
import { fileRemote, type Remote } from "./support/remote.ts";
import { createMysqlDb, createPgDb, type ServerDb } from "./support/server-db.ts";

// Constraints checked only at COMMIT (DEFERRABLE INITIALLY DEFERRED) fail the batch's COMMIT with
// a row-fault code and no statement index. The writer must blame the statement that caused it
// (its namespace held, the others committed), not report an outage that stalls the whole target.

interface Engine {
  ph(n: number): string;
  /** parent(id), child(id, pid → parent DEFERRABLE INITIALLY DEFERRED), other(id, note); parent 1 exists. */
  schema: string[];
  /** The code a deferred foreign-key violation is reported with. */
  fkCode: string;
  open(): Promise<Remote>;
}

const sqliteSchema = [
  "CREATE TABLE parent (id INTEGER PRIMARY KEY)",
  "CREATE TABLE child (id INTEGER PRIMARY KEY, pid INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)",
  "CREATE TABLE other (id INTEGER PRIMARY KEY, note TEXT)",
  "INSERT INTO parent (id) VALUES (1)",
];

const engines: Array<[string, () => Engine]> = [
  [
    "sqlite",
    () => ({
      ph: () => "?",
      schema: sqliteSchema,
      fkCode: "SQLITE_CONSTRAINT_FOREIGNKEY",
      open: fileRemote((file) => createWriter("sqlite", { path: file, foreign_keys: true })),
    }),
  ],
  // @libsql/client turns foreign keys on for file: URLs itself.
  [
    "libsql file:",
    () => ({
      ph: () => "?",
      schema: sqliteSchema,
      fkCode: "SQLITE_CONSTRAINT_FOREIGNKEY",
      open: fileRemote((file) => createWriter("libsql", { url: `file:${file}` })),
    }),
  ],
  [
    "libsql over http",
    () => ({
      ph: () => "?",
      schema: sqliteSchema,
      // sqld sends the primary code only, but the violation is found by the writer's own
      // per-statement check (blameDeferred), which names it precisely.
      fkCode: "SQLITE_CONSTRAINT_FOREIGNKEY",
      open: fileRemote((file, onDone) => {
        const server = startHranaServer({ file, foreignKeys: true });
        onDone(() => server.stop());
        return createWriter("libsql", { url: server.url });
      }),
    }),
  ],
  [
    "postgres",
    () => {
      let db: ServerDb;
      beforeAll(async () => {
        db = await createPgDb();
      });
      afterAll(async () => {
        await db?.drop();
      });
      return {
        ph: (n) => `$${n}`,
        schema: [
          "CREATE TABLE parent (id BIGINT PRIMARY KEY)",
          "CREATE TABLE child (id BIGINT PRIMARY KEY, pid BIGINT REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)",
          "CREATE TABLE other (id BIGINT PRIMARY KEY, note TEXT)",
          "INSERT INTO parent (id) VALUES (1)",
        ],
        fkCode: "23503",
        async open() {
          for (const t of ["child", "parent", "other", "uniq"]) await db.sql.unsafe(`DROP TABLE IF EXISTS ${t}`);
          const writer = createWriter("postgres", { url: db.url });
          return {
            writer,
            read: async (sql) => Array.from((await db.sql.unsafe(sql).values()) as unknown[][]),
            exec: async (sql) => void (await db.sql.unsafe(sql)),
            done: async () => {
              await writer.close?.();
            },
          };
        },
      };
    },
  ],
];

const str = (rows: unknown[][]) => rows.map((r) => r.map((v) => (v === null ? null : String(v))));
const shape = (results: WriteResult[]) => results.map((r) => (r.ok ? "ok" : r.skipped ? "skipped" : "failed"));

describe.each(engines)("%s writer, deferred constraints", (_name, makeEngine) => {
  const engine = makeEngine();
  const ph = engine.ph;
  let remote: Awaited<ReturnType<Engine["open"]>>;
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

  beforeEach(async () => {
    remote = await engine.open();
    for (const sql of engine.schema) await remote.exec(sql);
  });
  afterEach(async () => {
    await remote.done();
  });

  test("a row that violates a deferred foreign key at COMMIT fails its namespace alone: nothing of that namespace lands, everything else commits", async () => {
    const results = await remote.writer.writeBatch([
      child(1, 1, 1),
      note(1, 10),
      child(2, 2, 99), // no parent 99: only COMMIT notices
      note(2, 11),
      child(3, 3, 1),
      note(3, 12),
    ]);
    expect(shape(results)).toEqual(["skipped", "ok", "failed", "ok", "skipped", "ok"]);
    expect((results[2] as { errorClass?: string }).errorClass).toBe(engine.fkCode);
    expect(str(await remote.read("SELECT id, pid FROM child ORDER BY id"))).toEqual([]);
    expect(str(await remote.read("SELECT id FROM other ORDER BY id"))).toEqual([["10"], ["11"], ["12"]]);
  });

  test("a deferred foreign key satisfied later in the same batch still commits the batch in one piece", async () => {
    const results = await remote.writer.writeBatch([
      child(1, 1, 2), // parent 2 arrives two statements later
      note(1, 10),
      { sql: `INSERT INTO parent (id) VALUES (${ph(1)})`, args: [2], namespace: "child", seq: 2 },
    ]);
    expect(shape(results)).toEqual(["ok", "ok", "ok"]);
    expect(str(await remote.read("SELECT id, pid FROM child ORDER BY id"))).toEqual([["1", "2"]]);
  });

  test("a row that relies on a later row of its namespace for a deferred foreign key is not blamed for another namespace's violation", async () => {
    await remote.exec("INSERT INTO child (id, pid) VALUES (5, 1)");
    const results = await remote.writer.writeBatch([
      child(1, 1, 2), // parent 2 arrives later in this namespace
      note(1, 10),
      { sql: `DELETE FROM parent WHERE id = ${ph(1)}`, args: [1], namespace: "parent", seq: 1 }, // child 5 still references it
      { sql: `INSERT INTO parent (id) VALUES (${ph(1)})`, args: [2], namespace: "child", seq: 2 },
      note(2, 11),
    ]);
    expect(shape(results)).toEqual(["ok", "ok", "failed", "ok", "ok"]);
    expect((results[2] as { errorClass?: string }).errorClass).toBe(engine.fkCode);
    expect(str(await remote.read("SELECT id FROM parent ORDER BY id"))).toEqual([["1"], ["2"]]);
    expect(str(await remote.read("SELECT id, pid FROM child ORDER BY id"))).toEqual([
      ["1", "2"],
      ["5", "1"],
    ]);
    expect(str(await remote.read("SELECT id FROM other ORDER BY id"))).toEqual([["10"], ["11"]]);
  });

  test("deferred violations in two namespaces are each blamed on their own row", async () => {
    await remote.exec("INSERT INTO child (id, pid) VALUES (5, 1)");
    const parent = (seq: number, sql: string, id: number): Statement => ({ sql, args: [id], namespace: "parent", seq });
    const results = await remote.writer.writeBatch([
      child(1, 1, 98),
      note(1, 10),
      parent(1, `DELETE FROM parent WHERE id = ${ph(1)}`, 1), // child 5 still references it
      child(2, 2, 1),
      parent(2, `INSERT INTO parent (id) VALUES (${ph(1)})`, 3),
      note(2, 11),
    ]);
    expect(shape(results)).toEqual(["failed", "ok", "failed", "skipped", "skipped", "ok"]);
    expect((results[0] as { errorClass?: string }).errorClass).toBe(engine.fkCode);
    expect((results[2] as { errorClass?: string }).errorClass).toBe(engine.fkCode);
    expect(str(await remote.read("SELECT id FROM parent ORDER BY id"))).toEqual([["1"]]);
    expect(str(await remote.read("SELECT id FROM child ORDER BY id"))).toEqual([["5"]]);
    expect(str(await remote.read("SELECT id FROM other ORDER BY id"))).toEqual([["10"], ["11"]]);
  });
});

describe("postgres writer, other deferred constraints", () => {
  let db: ServerDb;
  let writer: OutboxWriter;
  beforeAll(async () => {
    db = await createPgDb();
    writer = createWriter("postgres", { url: db.url });
  });
  afterAll(async () => {
    await writer?.close?.();
    await db?.drop();
  });

  test("a row that breaks a DEFERRABLE INITIALLY DEFERRED unique constraint fails its namespace alone with 23505", async () => {
    await db.sql.unsafe(
      "CREATE TABLE uniq (id BIGINT, code TEXT, CONSTRAINT uniq_code UNIQUE (code) DEFERRABLE INITIALLY DEFERRED)",
    );
    await db.sql.unsafe("CREATE TABLE other2 (id BIGINT PRIMARY KEY)");
    const results = await writer.writeBatch([
      { sql: "INSERT INTO uniq (id, code) VALUES ($1, $2)", args: [1, "a"], namespace: "uniq", seq: 1 },
      { sql: "INSERT INTO other2 (id) VALUES ($1)", args: [1], namespace: "other2", seq: 1 },
      { sql: "INSERT INTO uniq (id, code) VALUES ($1, $2)", args: [2, "a"], namespace: "uniq", seq: 2 },
      { sql: "INSERT INTO uniq (id, code) VALUES ($1, $2)", args: [3, "b"], namespace: "uniq", seq: 3 },
      { sql: "INSERT INTO other2 (id) VALUES ($1)", args: [2], namespace: "other2", seq: 2 },
    ]);
    expect(shape(results)).toEqual(["skipped", "ok", "failed", "skipped", "ok"]);
    expect((results[2] as { errorClass?: string }).errorClass).toBe("23505");
    expect(
      str(Array.from((await db.sql.unsafe("SELECT id, code FROM uniq ORDER BY id").values()) as unknown[][])),
    ).toEqual([]);
    expect(str(Array.from((await db.sql.unsafe("SELECT id FROM other2 ORDER BY id").values()) as unknown[][]))).toEqual(
      [["1"], ["2"]],
    );
  });

  test("a deferred violation the checking pass cannot blame on a statement is still an outage (WriteError), nothing committed", async () => {
    // The batch defers the constraint again after the writer made it immediate: only COMMIT sees it.
    await db.sql.unsafe("CREATE TABLE p3 (id BIGINT PRIMARY KEY)");
    await db.sql.unsafe(
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
    expect(Array.from((await db.sql.unsafe("SELECT id FROM c3").values()) as unknown[][])).toEqual([]);
  });
});

describe("mysql writer, foreign keys", () => {
  let db: ServerDb;
  beforeAll(async () => {
    db = await createMysqlDb();
  });
  afterAll(async () => {
    await db?.drop();
  });

  test("InnoDB checks a foreign key per statement (no deferred constraints): the violating row fails its namespace with 1452", async () => {
    await db.sql.unsafe("CREATE TABLE parent (id BIGINT PRIMARY KEY) ENGINE=InnoDB");
    await db.sql.unsafe(
      "CREATE TABLE child (id BIGINT PRIMARY KEY, pid BIGINT, FOREIGN KEY (pid) REFERENCES parent (id)) ENGINE=InnoDB",
    );
    await db.sql.unsafe("INSERT INTO parent (id) VALUES (1)");
    const writer = createWriter("mysql", { url: db.url });
    try {
      const results = await writer.writeBatch([
        { sql: "INSERT INTO child (id, pid) VALUES (?, ?)", args: [1, 1], namespace: "child", seq: 1 },
        { sql: "INSERT INTO child (id, pid) VALUES (?, ?)", args: [2, 99], namespace: "child", seq: 2 },
        { sql: "INSERT INTO child (id, pid) VALUES (?, ?)", args: [3, 1], namespace: "child", seq: 3 },
      ]);
      expect(shape(results)).toEqual(["skipped", "failed", "skipped"]);
      expect((results[1] as { errorClass?: string }).errorClass).toBe("1452");
      expect(
        str(Array.from((await db.sql.unsafe("SELECT id FROM child ORDER BY id").values()) as unknown[][])),
      ).toEqual([]);
    } finally {
      await writer.close?.();
    }
  });
});
