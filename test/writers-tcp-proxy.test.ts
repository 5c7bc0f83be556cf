import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { WriteError } from "../src/errors.ts";
import { createWriter } from "../src/writers/registry.ts";
import type { OutboxWriter, Statement } from "../src/writers/writer.ts";
import { openRemote, type ServerRemote } from "./support/remote.ts";
import { startTcpProxy, type TcpProxy } from "./support/tcp-proxy.ts";

describe("postgres writer behind a cuttable TCP proxy", () => {
  let remote: ServerRemote;
  let proxy: TcpProxy;
  let writer: OutboxWriter;
  const insert = (id: number): Statement => ({
    sql: "INSERT INTO t (id) VALUES ($1)",
    args: [id],
    namespace: "t",
    seq: id,
  });

  beforeAll(async () => {
    remote = await openRemote("postgres");
    await remote.exec("CREATE TABLE t (id BIGINT PRIMARY KEY)");
    proxy = startTcpProxy(remote.port, remote.host);
    writer = createWriter("postgres", {
      host: "127.0.0.1",
      port: proxy.port,
      user: remote.user,
      database: remote.name,
      connect_timeout: 0.5,
      batch_timeout: 5,
    });
  });
  afterAll(async () => {
    await writer?.close?.();
    proxy?.close();
    await remote?.done();
  });

  test("forwards a writer's batches to the real server", async () => {
    expect(await writer.writeBatch([insert(1), insert(2)])).toEqual([
      { ok: true, rowsAffected: 1 },
      { ok: true, rowsAffected: 1 },
    ]);
    expect(proxy.connections).toBeGreaterThan(0);
  });

  test("cut() makes writeBatch throw WriteError and commits nothing", async () => {
    proxy.cut();
    expect(proxy.isCut).toBe(true);
    expect(proxy.connections).toBe(0);
    await expect(writer.writeBatch([insert(3)])).rejects.toBeInstanceOf(WriteError);
    // A second batch during the cut fails too: new connections are refused, not just old ones closed.
    await expect(writer.writeBatch([insert(4)])).rejects.toBeInstanceOf(WriteError);
    expect(await remote.rows("SELECT id FROM t ORDER BY id")).toEqual([["1"], ["2"]]);
  });

  test("restore() lets the pool reconnect and the same writer deliver again", async () => {
    proxy.restore();
    expect(await writer.writeBatch([insert(3), insert(4)])).toEqual([
      { ok: true, rowsAffected: 1 },
      { ok: true, rowsAffected: 1 },
    ]);
    expect(await remote.rows("SELECT id FROM t ORDER BY id")).toEqual([["1"], ["2"], ["3"], ["4"]]);
  });

  test("a blackholed cut makes new connections time out as WriteError, and restore recovers", async () => {
    proxy.cut("blackhole");
    // The pooled connection was closed by the cut; the next one is accepted and never answered.
    for (let i = 0; i < 2; i++) await expect(writer.writeBatch([insert(5)])).rejects.toBeInstanceOf(WriteError);
    proxy.restore();
    expect(await writer.writeBatch([insert(5)])).toEqual([{ ok: true, rowsAffected: 1 }]);
  });
});
