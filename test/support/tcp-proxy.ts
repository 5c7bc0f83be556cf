import type { Socket, TCPSocketListener } from "bun";

/**
 * A TCP proxy on 127.0.0.1 in front of a real server, for outage tests.
 * `cut()` closes every live connection and stops forwarding: new connections are closed at once
 * (mode "reset", the default: the client sees "connection closed") or accepted and left unanswered
 * (mode "blackhole": the client runs into its own timeout). `restore()` forwards again, including
 * the blackholed connections that are still open (like a healed network partition).
 */
export interface TcpProxy {
  /** The port the proxy listens on (127.0.0.1). */
  port: number;
  /** True between `cut()` and `restore()`. */
  readonly isCut: boolean;
  /** Live proxied connections (client sides). */
  readonly connections: number;
  cut(mode?: "reset" | "blackhole"): void;
  restore(): void;
  /** Closes the listener and every connection. */
  close(): void;
}

interface Conn {
  client: Socket<Conn>;
  upstream: Socket<Upstream> | null;
  /** Bytes from the client that could not be written upstream yet (not connected or backpressure). */
  toUpstream: Uint8Array[];
  /** Bytes from upstream that the client socket did not accept yet (backpressure). */
  toClient: Uint8Array[];
  closed: boolean;
}
interface Upstream {
  conn: Conn;
}

/** Writes queued chunks until the socket pushes back; keeps the unwritten rest queued, in order. */
function flush(sock: Socket<unknown>, queue: Uint8Array[]): void {
  while (queue.length > 0) {
    const chunk = queue[0]!;
    const n = sock.write(chunk);
    if (n < chunk.length) {
      queue[0] = chunk.subarray(Math.max(n, 0));
      return;
    }
    queue.shift();
  }
}

/** Starts a proxy forwarding 127.0.0.1:<random port> to `targetHost:targetPort`. */
export function startTcpProxy(targetPort: number, targetHost = "127.0.0.1"): TcpProxy {
  let mode: "open" | "reset" | "blackhole" = "open";
  const live = new Set<Conn>();
  const held = new Set<Conn>();

  const end = (c: Conn) => {
    if (c.closed) return;
    c.closed = true;
    live.delete(c);
    held.delete(c);
    c.client.terminate();
    c.upstream?.terminate();
  };

  const forward = (c: Conn) => {
    live.add(c);
    Bun.connect<Upstream>({
      hostname: targetHost,
      port: targetPort,
      data: { conn: c },
      socket: {
        open(up) {
          if (c.closed) return void up.terminate();
          c.upstream = up;
          flush(up, c.toUpstream);
        },
        data(_up, bytes) {
          if (c.closed) return;
          c.toClient.push(new Uint8Array(bytes));
          flush(c.client, c.toClient);
        },
        drain(up) {
          flush(up, c.toUpstream);
        },
        close() {
          end(c);
        },
        error() {
          end(c);
        },
        connectError() {
          end(c);
        },
      },
    }).catch(() => end(c));
  };

  const listener: TCPSocketListener<Conn> = Bun.listen<Conn>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(client) {
        if (mode === "reset") return void client.terminate();
        const c: Conn = { client, upstream: null, toUpstream: [], toClient: [], closed: false };
        client.data = c;
        // Blackholed: keep what the client sends until restore() (or the client gives up).
        if (mode === "blackhole") held.add(c);
        else forward(c);
      },
      data(client, bytes) {
        const c = client.data;
        if (!c || c.closed) return;
        c.toUpstream.push(new Uint8Array(bytes));
        if (c.upstream) flush(c.upstream, c.toUpstream);
      },
      drain(client) {
        const c = client.data;
        if (c && !c.closed) flush(client, c.toClient);
      },
      close(client) {
        if (client.data) end(client.data);
      },
      error(client) {
        if (client.data) end(client.data);
      },
    },
  });

  return {
    port: listener.port,
    get isCut() {
      return mode !== "open";
    },
    get connections() {
      return live.size;
    },
    cut(how = "reset") {
      mode = how;
      for (const c of [...live]) end(c);
    },
    restore() {
      mode = "open";
      for (const c of [...held]) {
        held.delete(c);
        forward(c);
      }
    },
    close() {
      mode = "reset";
      for (const c of [...live, ...held]) end(c);
      listener.stop(true);
    },
  };
}

/**
 * The fresh PostgreSQL database `db` reached through a proxy the test can cut: the proxy (closed
 * with the test's clean-ups) and the connection URL through it.
 */
export function pgBehindProxy(
  db: { host: string; port: number; user: string; name: string },
  cleanups: Array<() => unknown>,
): { proxy: TcpProxy; url: string } {
  const proxy = startTcpProxy(db.port, db.host);
  cleanups.push(() => proxy.close());
  return { proxy, url: `postgres://${db.user}@127.0.0.1:${proxy.port}/${db.name}` };
}
