import { afterAll, beforeAll, expect, test } from "bun:test";
import { SQL } from "bun";
import { openRemote, type ServerRemote } from "./support/remote.ts";
import { MYSQL_BASE_URL } from "./support/server-db.ts";

// The server's default sql_mode is changed for this test only (new connections pick it up) and
// restored after: the writer must not depend on the server being configured strict.
let remote: ServerRemote;
let admin: SQL | undefined;
let saved: string;
beforeAll(async () => {
  remote = await openRemote("mysql");
  admin = new SQL(`${MYSQL_BASE_URL}/mysql`, { max: 1 });
  [{ mode: saved }] = await admin.unsafe("SELECT @@GLOBAL.sql_mode AS mode");
  await admin.unsafe("SET GLOBAL sql_mode = ''");
});
afterAll(async () => {
  if (admin === undefined) return; // the server was down: beforeAll failed, saying so, and changed nothing
  await admin.unsafe("SET GLOBAL sql_mode = ?", [saved]);
  await admin.close();
  await remote.done();
});

test("the mysql writer runs batches in strict mode even when the server's default is not", async () => {
  await remote.exec("CREATE TABLE t (id INT PRIMARY KEY, code VARCHAR(3) NOT NULL)");
  const writer = remote.createWriter();
  try {
    const results = await writer.writeBatch([
      { sql: "INSERT INTO t (id, code) VALUES (?, ?)", args: [1, "abc"], namespace: "t", seq: 1 },
      { sql: "INSERT INTO t (id, code) VALUES (?, ?)", args: [2, "too long"], namespace: "t2", seq: 2 },
    ]);
    expect(results[0]).toMatchObject({ ok: true });
    // Non-strict would store "too" with a warning: the row's fault must surface instead.
    expect(results[1]).toMatchObject({ ok: false, errorClass: "1406" });
  } finally {
    await writer.close?.();
  }
  expect(await remote.rows("SELECT id, code FROM t ORDER BY id")).toEqual([[1, "abc"]]);
});
