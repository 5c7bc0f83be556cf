// sd_notify(3) without libsystemd: Bun's JS API has no unix datagram sockets, so the socket is
// libc's (src/libc.ts, which the drain lock's flock shares). Linux only; elsewhere there is no systemd.
import os from "node:os";
import { loadLibc, type Libc } from "../libc.ts";

/** Where a notifier reports a failed send (once per run of failures); a Logger satisfies it. */
export interface NotifyLogger {
  warn(message: string): void;
}

/**
 * A connection to the service manager's notification socket. Every method returns true when the
 * datagram was sent and false otherwise, never throws, and does not block: a full or vanished
 * socket loses that one message (the next ping may get through).
 */
export interface SystemdNotifier {
  /** The socket messages go to, as NOTIFY_SOCKET gave it (`/run/systemd/notify`, or `@name` for an abstract one). */
  readonly socket: string;
  /**
   * How often (ms) to call `watchdog()`: half of systemd's WatchdogSec, as sd_watchdog_enabled(3) advises;
   * null when no watchdog watches this process.
   */
  readonly watchdogIntervalMs: number | null;
  /** Sends `READY=1` (startup finished: systemd's `Type=notify` start completes), with `STATUS=` when given. */
  ready(status?: string): boolean;
  /** Sends `STOPPING=1` (shutdown began), with `STATUS=` when given. */
  stopping(status?: string): boolean;
  /**
   * Sends `STATUS=<text>`, the one line `systemctl status` shows; newlines become spaces, and past 1000
   * characters it is cut with "…".
   */
  status(text: string): boolean;
  /** Sends `WATCHDOG=1`: the process is alive; without one every `WatchdogSec` systemd kills and restarts it. */
  watchdog(): boolean;
  /**
   * Sends raw `KEY=value` assignments, one per element (a newline inside one becomes a space); false if they
   * exceed 4096 bytes.
   */
  notify(...assignments: string[]): boolean;
  /** Closes the socket; idempotent, and every later send returns false. */
  close(): void;
}

/** Options of `createSystemdNotifier`. */
export interface SystemdNotifierOptions {
  /** Told about the first failed send of each run of failures, and about an unusable NOTIFY_SOCKET. Default: silent. */
  logger?: NotifyLogger;
  /** This process's id, compared with WATCHDOG_PID. Default `process.pid`. */
  pid?: number;
}

// Linux x86-64 and arm64 values (SOCK_* differ only on mips/sparc/alpha, which Bun does not target).
const AF_UNIX = 1;
const SOCK_DGRAM = 2;
const SOCK_NONBLOCK = 0o4000;
const SOCK_CLOEXEC = 0o2000000;
const MSG_NOSIGNAL = 0x4000;
const SUN_PATH_BYTES = 108; // sizeof(sockaddr_un.sun_path)
const SUN_PATH_OFFSET = 2; // after sa_family_t sun_family
// systemd reads notifications into a PIPE_BUF buffer and drops a longer datagram whole, READY=1 with it.
const NOTIFY_MAX_BYTES = 4096;
const STATUS_MAX_CHARS = 1000; // at most 4 bytes each in UTF-8, so READY=1 plus a status always fits

// First name wins: EAGAIN rather than its alias EWOULDBLOCK.
const ERRNO_NAMES = new Map<number, string>();
for (const [name, n] of Object.entries(os.constants.errno)) if (!ERRNO_NAMES.has(n)) ERRNO_NAMES.set(n, name);

/** errno right after a failed libc call, by name ("ECONNREFUSED"); best effort, for the warning only. */
function lastErrno(c: Libc): string {
  const n = c.errno();
  if (n === null) return "unknown error";
  return ERRNO_NAMES.get(n) ?? `errno ${n}`;
}

/**
 * The `sockaddr_un` for NOTIFY_SOCKET: a filesystem path, or `@name` for an abstract socket
 * (a leading NUL, and a length that counts exactly the name, since abstract names are not
 * NUL-terminated); null for anything else (e.g. systemd 253's `vsock:`) or a name that is too long.
 */
export function notifySocketAddress(socket: string): Uint8Array | null {
  const abstract = socket.startsWith("@");
  if (!abstract && !socket.startsWith("/")) return null;
  const name = Buffer.from(abstract ? socket.slice(1) : socket, "utf8");
  // A path needs its terminating NUL inside sun_path; an abstract name may use all of it after the leading NUL.
  if (name.length === 0 || name.length + 1 > SUN_PATH_BYTES || name.includes(0)) return null;
  const addr = new Uint8Array(SUN_PATH_OFFSET + 1 + name.length); // the zeroed spare byte is the path's NUL or the abstract's lead
  new DataView(addr.buffer).setUint16(0, AF_UNIX, true);
  addr.set(name, SUN_PATH_OFFSET + (abstract ? 1 : 0));
  return addr;
}

/**
 * systemd's ping interval for this process in ms (half of WATCHDOG_USEC), or null when
 * WATCHDOG_USEC is unset or not a positive integer, or WATCHDOG_PID names another process.
 */
export function watchdogIntervalMs(env: Record<string, string | undefined>, pid: number = process.pid): number | null {
  const usec = env.WATCHDOG_USEC;
  if (usec === undefined || !/^[0-9]+$/.test(usec)) return null;
  const pidText = env.WATCHDOG_PID;
  // Set by systemd for the main process; a child that inherited the environment must not ping.
  if (pidText !== undefined && (!/^[0-9]+$/.test(pidText) || Number(pidText) !== pid)) return null;
  const timeoutUs = Number(usec);
  if (!Number.isSafeInteger(timeoutUs) || timeoutUs <= 0) return null;
  return Math.max(1, Math.floor(timeoutUs / 2000));
}

/** A text as one assignment: a newline would start a new one (`…\nREADY=1`), a NUL makes systemd drop the datagram. */
function oneLine(text: string): string {
  return text.replace(/[\r\n\0]+/g, " ");
}

/** A status line that keeps its datagram under systemd's limit (cut by code point, never inside a surrogate pair). */
function statusLine(text: string): string {
  const chars = Array.from(oneLine(text));
  return `STATUS=${chars.length > STATUS_MAX_CHARS ? `${chars.slice(0, STATUS_MAX_CHARS - 1).join("")}…` : chars.join("")}`;
}

/**
 * A notifier for the NOTIFY_SOCKET in `env` (default `process.env`), or null when there is none
 * to talk to: NOTIFY_SOCKET unset or empty, not on Linux, or an address this client cannot use
 * (then the logger is told why). The environment is read once, here, and not modified.
 */
export function createSystemdNotifier(
  env: Record<string, string | undefined> = process.env,
  options: SystemdNotifierOptions = {},
): SystemdNotifier | null {
  const socket = env.NOTIFY_SOCKET;
  if (!socket || process.platform !== "linux") return null;
  const warn = (message: string) => options.logger?.warn(message);
  const address = notifySocketAddress(socket);
  if (!address) {
    warn(
      `systemd: NOTIFY_SOCKET=${socket} is not a unix socket path or @abstract name this process can use; not notifying systemd`,
    );
    return null;
  }
  let c: Libc;
  try {
    c = loadLibc();
  } catch (error) {
    warn(`systemd: cannot load libc to notify systemd (${(error as Error).message}); not notifying systemd`);
    return null;
  }
  // Non-blocking: a service manager that stopped reading must cost a lost ping, not a stalled drain.
  const fd = c.socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    warn(`systemd: cannot create a unix datagram socket (${lastErrno(c)}); not notifying systemd`);
    return null;
  }
  let open = true;
  let failing = false;
  const send = (assignments: string[]): boolean => {
    if (!open) return false;
    const datagram = new TextEncoder().encode(assignments.join("\n")); // its own buffer, not a slice of a pool
    if (datagram.length > NOTIFY_MAX_BYTES) {
      warn(
        `systemd: not sending a ${datagram.length}-byte notification: systemd drops any over ${NOTIFY_MAX_BYTES} bytes`,
      );
      return false;
    }
    // Unconnected sendto by address: after `systemctl daemon-reexec` the socket file is new, and the next
    // send reaches it.
    const sent = Number(c.sendto(fd, datagram, datagram.length, MSG_NOSIGNAL, address, address.length));
    if (sent === datagram.length) {
      failing = false;
      return true;
    }
    if (!failing) {
      failing = true;
      const why = sent < 0 ? lastErrno(c) : `sent ${sent} of ${datagram.length} bytes`;
      warn(
        `systemd: cannot notify ${socket} (${why}): ${assignments.map((a) => a.split("=")[0]).join(", ")} lost; later failures are not logged until one succeeds`,
      );
    }
    return false;
  };
  const withStatus = (assignment: string, status?: string) =>
    send(status === undefined ? [assignment] : [assignment, statusLine(status)]);
  return {
    socket,
    watchdogIntervalMs: watchdogIntervalMs(env, options.pid ?? process.pid),
    ready: (status) => withStatus("READY=1", status),
    stopping: (status) => withStatus("STOPPING=1", status),
    status: (text) => send([statusLine(text)]),
    watchdog: () => send(["WATCHDOG=1"]),
    notify: (...assignments) => send(assignments.map(oneLine)),
    close() {
      if (!open) return;
      open = false;
      c.close(fd);
    },
  };
}
