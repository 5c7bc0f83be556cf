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

describe("a TCP proxy with a round trip", () => {
  /** An echo server: every chunk comes straight back. */
  const echo = () =>
    Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data: (socket, bytes) => void socket.write(bytes) } });

  /** A client of `port` that sends `messages` one at a time (each after the last came back) or all at once. */
  async function exchange(port: number, messages: string[], pipelined: boolean): Promise<string> {
    let received = "";
    let wake = () => {};
    const socket = await Bun.connect({
      hostname: "127.0.0.1",
      port,
      socket: {
        data(_s, bytes) {
          received += Buffer.from(bytes).toString();
          wake();
        },
      },
    });
    const until = (text: string) =>
      new Promise<void>((resolve) => {
        wake = () => received.endsWith(text) && resolve();
        wake();
      });
    if (pipelined) {
      for (const m of messages) socket.write(m);
      await until(messages.at(-1)!);
    } else
      for (const m of messages) {
        socket.write(m);
        await until(m);
      }
    socket.end();
    return received;
  }

  test("delays each direction by half the round trip, in order, and counts one turn per answer waited for", async () => {
    const server = echo();
    const proxy = startTcpProxy(server.port, "127.0.0.1", { rttMs: 30 });
    try {
      const start = performance.now();
      expect(await exchange(proxy.port, ["a", "b", "c"], false)).toBe("abc");
      expect(performance.now() - start).toBeGreaterThanOrEqual(3 * 30 - 3);
      expect(proxy.turns).toBe(3);
      // Sent without waiting: one turn, whatever the number of chunks.
      expect(await exchange(proxy.port, ["d", "e", "f", "g"], true)).toBe("defg");
      expect(proxy.turns).toBe(4);
      const now = performance.timeOrigin + performance.now();
      expect(proxy.turnsBetween(now - 60_000, now)).toBe(4);
      expect(proxy.turnsBetween(now + 1, now + 60_000)).toBe(0);
    } finally {
      proxy.close();
      server.stop(true);
    }
  });

  test("a connection slowed on its own takes its own round trip; the others keep the proxy's", async () => {
    const server = echo();
    const proxy = startTcpProxy(server.port, "127.0.0.1", { rttMs: 10 });
    proxy.slowConnection(1, 200);
    try {
      const timed = async (message: string) => {
        const start = performance.now();
        expect(await exchange(proxy.port, [message], false)).toBe(message);
        return performance.now() - start;
      };
      const [first, second, third] = [await timed("a"), await timed("b"), await timed("c")];
      expect(second).toBeGreaterThanOrEqual(200 - 3);
      expect(Math.max(first, third)).toBeLessThan(200 - 3);
    } finally {
      proxy.close();
      server.stop(true);
    }
  });
});
