import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { WriteError } from "../src/errors.ts";
import { createWriter } from "../src/writers/registry.ts";
import { createMysqlDb, createPgDb } from "./support/server-db.ts";

const engines = [
  { name: "postgres" as const, create: createPgDb, ph: "$1", sleep: "SELECT pg_sleep(1)" },
  { name: "mysql" as const, create: createMysqlDb, ph: "?", sleep: "SELECT SLEEP(1)" },
];

describe.each(engines)("$name writer batch_timeout", ({ name, create, ph, sleep }) => {
  let db: Awaited<ReturnType<typeof create>>;
  beforeAll(async () => {
    db = await create();
    await db.sql.unsafe("CREATE TABLE t (id BIGINT PRIMARY KEY)");
  });
  afterAll(async () => {
    await db?.drop();
  });

  test("a batch running past batch_timeout throws WriteError, commits nothing, and the writer recovers", async () => {
    const writer = createWriter(name, { url: db.url, batch_timeout: 0.5 });
    try {
      const insert = (id: number) => ({
        sql: `INSERT INTO t (id) VALUES (${ph})`,
        args: [id],
        namespace: "t",
        seq: id,
      });
      const error = await writer
        .writeBatch([insert(1), { sql: sleep, args: [], namespace: "t", seq: 2 }])
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(WriteError);
      expect((error as WriteError).message).toContain("timed out");
      expect(await writer.writeBatch([insert(3)])).toEqual([{ ok: true, rowsAffected: 1 }]);
      expect(
        (await db.sql.unsafe("SELECT id FROM t ORDER BY id").values()).map((r: unknown[]) => Number(r[0])),
      ).toEqual([3]);
    } finally {
      await writer.close?.();
    }
  });
});
