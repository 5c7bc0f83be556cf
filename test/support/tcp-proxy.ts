import type { Socket, TCPSocketListener } from "bun";

/**
 * A TCP proxy on 127.0.0.1 in front of a real server, for outage tests and for a long link.
 * `cut()` closes every live connection and stops forwarding: new connections are closed at once
 * (mode "reset", the default: the client sees "connection closed") or accepted and left unanswered
 * (mode "blackhole": the client runs into its own timeout). `restore()` forwards again, including
 * the blackholed connections that are still open (like a healed network partition).
 *
 * `rttMs` delays every chunk by half of it in each direction, in order (a link `rttMs` long, of
 * unbounded bandwidth), and `turns` counts the round trips clients waited for: a chunk from a
 * client that arrives after the proxy handed it something from the server since it last sent.
 * Pipelined requests are one turn however many chunks carry them. `slowConnection` gives one
 * connection a round trip of its own: the link of one pooled connection slower than the others'.
 */
export interface TcpProxy {
  /** The port the proxy listens on (127.0.0.1). */
  port: number;
  /** True between `cut()` and `restore()`. */
  readonly isCut: boolean;
  /** Live proxied connections (client sides). */
  readonly connections: number;
  /** Round trips clients have waited for so far, summed over connections (see above). */
  readonly turns: number;
  /** Turns that began between two epoch times in milliseconds (`performance.timeOrigin + performance.now()`). */
  turnsBetween(fromMs: number, toMs: number): number;
  /** The round trip the proxy adds, in milliseconds; settable while it runs. */
  rttMs: number;
  /** Gives the `index`-th connection accepted (0: the first, past or future) a round trip of its own, instead of `rttMs`. */
  slowConnection(index: number, rttMs: number): void;
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
  /** The client was handed something from the server since it last sent: its next chunk is a new turn. */
  answered: boolean;
  /** Chunks on their way (delayed), each direction in arrival order. */
  late: { up: Delayed[]; down: Delayed[] };
  /** Its place in the order connections were accepted (0: the first). */
  index: number;
}
interface Delayed {
  at: number;
  bytes: Uint8Array;
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

/** Starts a proxy forwarding 127.0.0.1:<random port> to `targetHost:targetPort`, `rttMs` long (default 0). */
export function startTcpProxy(
  targetPort: number,
  targetHost = "127.0.0.1",
  options: { rttMs?: number } = {},
): TcpProxy {
  let mode: "open" | "reset" | "blackhole" = "open";
  const live = new Set<Conn>();
  const held = new Set<Conn>();
  let rttMs = options.rttMs ?? 0;
  /** Round trips of their own, by connection index (slowConnection). */
  const ownRtt = new Map<number, number>();
  let accepted = 0;

  /** When each turn began (epoch milliseconds, `performance.timeOrigin` based: comparable across processes). */
  const turnTimes: number[] = [];

  /** Hands `bytes` to the socket on the other side now, or half a round trip later, in order. */
  const pass = (c: Conn, way: "up" | "down", bytes: Uint8Array) => {
    const late = c.late[way];
    const rtt = ownRtt.get(c.index) ?? rttMs;
    if (rtt <= 0 && late.length === 0) return deliver(c, way, [bytes]);
    late.push({ at: performance.now() + rtt / 2, bytes });
    if (late.length > 1) return; // this direction's timer is running
    const tick = () => {
      const due: Uint8Array[] = [];
      while (late.length > 0 && late[0]!.at <= performance.now() + 0.5) due.push(late.shift()!.bytes);
      deliver(c, way, due);
      if (late.length > 0) setTimeout(tick, Math.max(0, late[0]!.at - performance.now()));
    };
    setTimeout(tick, rtt / 2);
  };
  const deliver = (c: Conn, way: "up" | "down", chunks: Uint8Array[]) => {
    if (c.closed) return;
    if (way === "up") {
      c.toUpstream.push(...chunks);
      if (c.upstream) flush(c.upstream, c.toUpstream);
    } else {
      c.answered ||= chunks.length > 0;
      c.toClient.push(...chunks);
      flush(c.client, c.toClient);
    }
  };

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
          if (!c.closed) pass(c, "down", new Uint8Array(bytes));
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
        const c: Conn = {
          client,
          upstream: null,
          toUpstream: [],
          toClient: [],
          closed: false,
          answered: true,
          late: { up: [], down: [] },
          index: accepted++,
        };
        client.data = c;
        // Blackholed: keep what the client sends until restore() (or the client gives up).
        if (mode === "blackhole") held.add(c);
        else forward(c);
      },
      data(client, bytes) {
        const c = client.data;
        if (!c || c.closed) return;
        if (c.answered) turnTimes.push(performance.timeOrigin + performance.now());
        c.answered = false;
        if (held.has(c)) c.toUpstream.push(new Uint8Array(bytes));
        else pass(c, "up", new Uint8Array(bytes));
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
    get turns() {
      return turnTimes.length;
    },
    turnsBetween(fromMs, toMs) {
      return turnTimes.filter((t) => t >= fromMs && t <= toMs).length;
    },
    get rttMs() {
      return rttMs;
    },
    set rttMs(ms: number) {
      rttMs = ms;
    },
    slowConnection(index, ms) {
      ownRtt.set(index, ms);
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

/** A server's connection URL, pointed at a proxy on 127.0.0.1:`port` in front of it. */
export function throughProxy(url: string, port: number): string {
  const u = new URL(url);
  u.hostname = "127.0.0.1";
  u.port = String(port);
  return u.toString();
}

/**
 * The fresh PostgreSQL database `db` reached through a proxy the test can cut: the proxy (closed
 * with the test's clean-ups) and the connection URL through it.
 */
export function pgBehindProxy(
  db: { host: string; port: number; user: string; name: string },
  cleanups: Array<() => unknown>,
  options: { rttMs?: number } = {},
): { proxy: TcpProxy; url: string } {
  const proxy = startTcpProxy(db.port, db.host, options);
  cleanups.push(() => proxy.close());
  return { proxy, url: `postgres://${db.user}@127.0.0.1:${proxy.port}/${db.name}` };
}
