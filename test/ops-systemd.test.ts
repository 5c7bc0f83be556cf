// src/ops/systemd.ts against a real unix datagram socket: a python3 process binds it the way
// systemd does (SO_PASSCRED on) and reports each datagram with the sender's pid.
import { afterEach, describe, expect, test } from "bun:test";
import path from "node:path";
import {
  createSystemdNotifier,
  notifySocketAddress,
  watchdogIntervalMs,
  type SystemdNotifier,
} from "../src/ops/systemd.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";

const RECEIVER = path.join(import.meta.dir, "support", "children", "notify-receiver.py");
const PYTHON = Bun.which("python3");
const linuxWithPython = process.platform === "linux" && PYTHON !== null;

interface Datagram {
  pid: number | null;
  data: string;
}

/** A python3 process bound at `where`; `next()` resolves with its next datagram. */
interface Receiver {
  next(): Promise<Datagram>;
  stop(): Promise<void>;
}

async function startReceiver(where: string, mode: "read" | "hold" = "read"): Promise<Receiver> {
  const proc = Bun.spawn([PYTHON!, RECEIVER, where, mode], { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
  const lines = (async function* () {
    let buffered = "";
    for await (const chunk of proc.stdout.pipeThrough(new TextDecoderStream())) {
      buffered += chunk;
      let nl: number;
      while ((nl = buffered.indexOf("\n")) >= 0) {
        yield buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
      }
    }
  })();
  const nextLine = async () => {
    const { value, done } = await lines.next();
    if (done) throw new Error(`receiver at ${where} exited (code ${await proc.exited})`);
    return value;
  };
  expect(await nextLine()).toBe("listening");
  return {
    next: async () => JSON.parse(await nextLine()) as Datagram,
    async stop() {
      proc.stdin.end();
      await proc.exited;
    },
  };
}

let tmp: TempDir | null = null;
let receiver: Receiver | null = null;
let notifier: SystemdNotifier | null = null;
afterEach(async () => {
  notifier?.close();
  await receiver?.stop();
  tmp?.cleanup();
  tmp = receiver = notifier = null;
});

/** A fresh abstract name: abstract sockets live in the network namespace, not in a directory. */
const abstractName = () => `@sqloutbox-test-${process.pid}-${Math.random().toString(36).slice(2)}`;

describe("createSystemdNotifier", () => {
  test("returns null when NOTIFY_SOCKET is unset or empty (not started by systemd with Type=notify)", () => {
    expect(createSystemdNotifier({})).toBeNull();
    expect(createSystemdNotifier({ NOTIFY_SOCKET: "" })).toBeNull();
  });

  test.if(process.platform === "linux")("returns null and says why for an address it cannot use", () => {
    const warnings: string[] = [];
    const logger = { warn: (m: string) => warnings.push(m) };
    expect(createSystemdNotifier({ NOTIFY_SOCKET: "vsock:2:1234" }, { logger })).toBeNull();
    expect(createSystemdNotifier({ NOTIFY_SOCKET: "run/notify" }, { logger })).toBeNull();
    expect(createSystemdNotifier({ NOTIFY_SOCKET: `/${"x".repeat(107)}` }, { logger })).toBeNull();
    expect(warnings).toHaveLength(3);
    expect(warnings[0]).toContain("NOTIFY_SOCKET=vsock:2:1234");
  });

  test.if(linuxWithPython)(
    "sends READY=1, STATUS=, WATCHDOG=1 and STOPPING=1 as single datagrams to a socket path, from this pid",
    async () => {
      tmp = makeTempDir();
      const where = tmp.file("notify");
      receiver = await startReceiver(where);
      notifier = createSystemdNotifier({ NOTIFY_SOCKET: where })!;
      expect(notifier.socket).toBe(where);

      expect(notifier.ready()).toBe(true);
      expect(await receiver.next()).toEqual({ pid: process.pid, data: "READY=1" });
      expect(notifier.ready("draining 2 tables to pg")).toBe(true);
      expect(await receiver.next()).toEqual({ pid: process.pid, data: "READY=1\nSTATUS=draining 2 tables to pg" });
      expect(notifier.status("pg: outage, retrying in 30 s")).toBe(true);
      expect(await receiver.next()).toEqual({ pid: process.pid, data: "STATUS=pg: outage, retrying in 30 s" });
      expect(notifier.watchdog()).toBe(true);
      expect(await receiver.next()).toEqual({ pid: process.pid, data: "WATCHDOG=1" });
      expect(notifier.stopping()).toBe(true);
      expect(await receiver.next()).toEqual({ pid: process.pid, data: "STOPPING=1" });
      expect(notifier.stopping("finishing the in-flight batch")).toBe(true);
      expect(await receiver.next()).toEqual({
        pid: process.pid,
        data: "STOPPING=1\nSTATUS=finishing the in-flight batch",
      });
      expect(notifier.notify("EXTEND_TIMEOUT_USEC=5000000", "STATUS=still stopping")).toBe(true);
      expect(await receiver.next()).toEqual({
        pid: process.pid,
        data: "EXTEND_TIMEOUT_USEC=5000000\nSTATUS=still stopping",
      });
    },
  );

  test.if(linuxWithPython)("reaches an abstract socket (@name) by its exact name", async () => {
    const where = abstractName();
    receiver = await startReceiver(where);
    notifier = createSystemdNotifier({ NOTIFY_SOCKET: where })!;
    expect(notifier.ready("é ünïcode ✓")).toBe(true);
    expect(await receiver.next()).toEqual({ pid: process.pid, data: "READY=1\nSTATUS=é ünïcode ✓" });
    expect(notifier.watchdog()).toBe(true);
    expect(await receiver.next()).toEqual({ pid: process.pid, data: "WATCHDOG=1" });
    // A name that only shares a prefix is another socket: nobody listens there.
    const other = createSystemdNotifier({ NOTIFY_SOCKET: `${where}x` })!;
    expect(other.ready()).toBe(false);
    other.close();
  });

  test.if(linuxWithPython)("keeps a status text to one assignment: a newline cannot smuggle READY=1 in", async () => {
    tmp = makeTempDir();
    receiver = await startReceiver(tmp.file("notify"));
    notifier = createSystemdNotifier({ NOTIFY_SOCKET: tmp.file("notify") })!;
    expect(notifier.status("error: bad row\nREADY=1\r\nMAINPID=1\0")).toBe(true);
    expect(await receiver.next()).toEqual({ pid: process.pid, data: "STATUS=error: bad row READY=1 MAINPID=1 " });
  });

  test.if(linuxWithPython)(
    "cuts a long status to 1000 characters and refuses raw assignments systemd would drop whole (over 4096 bytes)",
    async () => {
      tmp = makeTempDir();
      receiver = await startReceiver(tmp.file("notify"));
      const warnings: string[] = [];
      notifier = createSystemdNotifier(
        { NOTIFY_SOCKET: tmp.file("notify") },
        { logger: { warn: (m) => warnings.push(m) } },
      )!;
      expect(notifier.ready("✓".repeat(5000))).toBe(true); // 3 bytes each: uncut, READY=1 would be lost with it
      expect(await receiver.next()).toEqual({ pid: process.pid, data: `READY=1\nSTATUS=${"✓".repeat(999)}…` });
      expect(notifier.notify(`STATUS=${"x".repeat(4090)}`)).toBe(false);
      expect(warnings).toEqual(["systemd: not sending a 4097-byte notification: systemd drops any over 4096 bytes"]);
      expect(notifier.watchdog()).toBe(true);
      expect(await receiver.next()).toEqual({ pid: process.pid, data: "WATCHDOG=1" });
    },
  );

  test.if(linuxWithPython)(
    "survives a vanished socket: returns false, warns once, and reaches the socket again once it is back",
    async () => {
      tmp = makeTempDir();
      const where = tmp.file("notify");
      const warnings: string[] = [];
      notifier = createSystemdNotifier({ NOTIFY_SOCKET: where }, { logger: { warn: (m) => warnings.push(m) } })!;
      expect(notifier.ready()).toBe(false); // nothing bound there yet
      expect(notifier.watchdog()).toBe(false);
      expect(notifier.status("x")).toBe(false);
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toContain(`cannot notify ${where} (ENOENT)`);
      expect(warnings[0]).toContain("READY lost");

      // As after `systemctl daemon-reexec`: a new socket at the same path.
      receiver = await startReceiver(where);
      expect(notifier.watchdog()).toBe(true);
      expect(await receiver.next()).toEqual({ pid: process.pid, data: "WATCHDOG=1" });
      await receiver.stop();
      receiver = null;
      expect(notifier.watchdog()).toBe(false);
      expect(warnings).toHaveLength(2); // a new run of failures is reported again
    },
  );

  test.if(linuxWithPython)(
    "never blocks on a manager that stopped reading: a full queue loses the message instead",
    async () => {
      tmp = makeTempDir();
      const where = tmp.file("notify");
      receiver = await startReceiver(where, "hold");
      const warnings: string[] = [];
      notifier = createSystemdNotifier({ NOTIFY_SOCKET: where }, { logger: { warn: (m) => warnings.push(m) } })!;
      let sent = 0;
      while (notifier.watchdog() && sent < 100_000) sent++;
      expect(sent).toBeGreaterThan(0);
      expect(sent).toBeLessThan(100_000);
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toContain("(EAGAIN)");
    },
  );

  test.if(linuxWithPython)("after close() every send returns false and close() can be called again", async () => {
    tmp = makeTempDir();
    receiver = await startReceiver(tmp.file("notify"));
    notifier = createSystemdNotifier({ NOTIFY_SOCKET: tmp.file("notify") })!;
    notifier.close();
    notifier.close();
    expect(notifier.ready()).toBe(false);
    expect(notifier.watchdog()).toBe(false);
  });

  test.if(process.platform === "linux")(
    "takes its watchdog interval from WATCHDOG_USEC when WATCHDOG_PID is this process",
    () => {
      const socket = abstractName();
      const a = createSystemdNotifier({
        NOTIFY_SOCKET: socket,
        WATCHDOG_USEC: "60000000",
        WATCHDOG_PID: String(process.pid),
      })!;
      const b = createSystemdNotifier({
        NOTIFY_SOCKET: socket,
        WATCHDOG_USEC: "60000000",
        WATCHDOG_PID: String(process.pid + 1),
      })!;
      const c = createSystemdNotifier({ NOTIFY_SOCKET: socket })!;
      expect([a.watchdogIntervalMs, b.watchdogIntervalMs, c.watchdogIntervalMs]).toEqual([30_000, null, null]);
      for (const n of [a, b, c]) n.close();
    },
  );
});

describe("watchdogIntervalMs", () => {
  const pid = 4242;
  test.each([
    ["WatchdogSec=60, main pid", { WATCHDOG_USEC: "60000000", WATCHDOG_PID: "4242" }, 30_000],
    ["WATCHDOG_PID unset (older managers)", { WATCHDOG_USEC: "60000000" }, 30_000],
    ["sub-millisecond half", { WATCHDOG_USEC: "1500" }, 1],
    ["another process's watchdog", { WATCHDOG_USEC: "60000000", WATCHDOG_PID: "4243" }, null],
    ["empty WATCHDOG_PID", { WATCHDOG_USEC: "60000000", WATCHDOG_PID: "" }, null],
    ["garbage WATCHDOG_PID", { WATCHDOG_USEC: "60000000", WATCHDOG_PID: "42x" }, null],
    ["no watchdog", {}, null],
    ["WatchdogSec=0", { WATCHDOG_USEC: "0" }, null],
    ["negative", { WATCHDOG_USEC: "-5" }, null],
    ["not a number", { WATCHDOG_USEC: "60s" }, null],
    ["beyond 2^53", { WATCHDOG_USEC: "18446744073709551615" }, null],
  ])("%s", (_name, env, expected) => {
    expect(watchdogIntervalMs(env, pid)).toBe(expected);
  });
});

describe("notifySocketAddress", () => {
  test.each([
    ["/run/systemd/notify", [1, 0, ...Buffer.from("/run/systemd/notify"), 0]],
    ["@name", [1, 0, 0, ...Buffer.from("name")]],
  ])("encodes %s as a sockaddr_un of exactly the bytes that matter", (socket, bytes) => {
    expect([...notifySocketAddress(socket)!]).toEqual(bytes);
  });

  test.each([["relative"], ["vsock:2:1"], ["@"], ["/a\0b"], [`/${"x".repeat(107)}`], [`@${"x".repeat(108)}`]])(
    "refuses %j",
    (socket) => {
      expect(notifySocketAddress(socket)).toBeNull();
    },
  );

  test("accepts the longest names sun_path holds", () => {
    expect(notifySocketAddress(`/${"x".repeat(106)}`)).toHaveLength(2 + 108);
    expect(notifySocketAddress(`@${"x".repeat(107)}`)).toHaveLength(2 + 108);
  });
});
