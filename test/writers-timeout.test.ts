import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { WriteError } from "../src/errors.ts";
import { openRemote, type ServerRemote } from "./support/remote.ts";

const engines = [
  { name: "postgres" as const, ph: "$1", sleep: "SELECT pg_sleep(1)" },
  { name: "mysql" as const, ph: "?", sleep: "SELECT SLEEP(1)" },
];

describe.each(engines)("$name writer batch_timeout", ({ name, ph, sleep }) => {
  let remote: ServerRemote;
  beforeAll(async () => {
    remote = await openRemote(name);
    await remote.exec("CREATE TABLE t (id BIGINT PRIMARY KEY)");
  });
  afterAll(async () => {
    await remote?.done();
  });

  test("a batch running past batch_timeout throws WriteError, commits nothing, and the writer recovers", async () => {
    const writer = remote.createWriter({ batch_timeout: 0.5 });
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
      expect(await remote.ints("SELECT id FROM t ORDER BY id")).toEqual([[3]]);
    } finally {
      await writer.close?.();
    }
  });
});
