// libc through bun:ffi, opened once per process for everyone who needs it: the drain lock's flock
// (drain/lock.ts) and sd_notify's datagram socket (ops/systemd.ts). Linux, glibc or musl, and macOS.
import { dlopen, FFIType, read, type Pointer } from "bun:ffi";

/** The libc functions we call, as bun:ffi binds them. */
export interface Libc {
  flock(fd: number, operation: number): number;
  socket(domain: number, type: number, protocol: number): number;
  sendto(fd: number, buf: Uint8Array, len: number, flags: number, addr: Uint8Array, addrlen: number): number | bigint;
  close(fd: number): number;
  /** errno right after a failed call, or null when libc gave no address for it. */
  errno(): number | null;
}

// glibc's soname first; Alpine's musl has no libc.so.6 unless gcompat is installed.
const NAMES: readonly string[] =
  process.platform === "linux"
    ? ["libc.so.6", `libc.musl-${process.arch === "arm64" ? "aarch64" : "x86_64"}.so.1`]
    : process.platform === "darwin"
      ? ["/usr/lib/libSystem.B.dylib"]
      : [];

/** Whether this platform has a libc we know how to open (Linux, macOS). */
export const hasLibc = NAMES.length > 0;

/** What errno's address is called: glibc and musl `__errno_location`, macOS `__error`. */
const ERRNO_LOCATION = process.platform === "darwin" ? "__error" : "__errno_location";

const SYMBOLS = {
  flock: { args: [FFIType.i32, FFIType.i32], returns: FFIType.i32 },
  socket: { args: [FFIType.i32, FFIType.i32, FFIType.i32], returns: FFIType.i32 },
  sendto: {
    args: [FFIType.i32, FFIType.ptr, FFIType.u64, FFIType.i32, FFIType.ptr, FFIType.u32],
    returns: FFIType.i64,
  },
  close: { args: [FFIType.i32], returns: FFIType.i32 },
  [ERRNO_LOCATION]: { args: [], returns: FFIType.ptr },
} as const;

type Bound = Omit<Libc, "errno"> & Record<typeof ERRNO_LOCATION, () => Pointer | null>;

let libc: Libc | null = null;

/** This process's libc, opened on first use; throws when there is none to open (a failure is not cached). */
export function loadLibc(): Libc {
  if (libc) return libc;
  if (!hasLibc) throw new Error(`libc is not available on ${process.platform}`);
  let lastError: unknown;
  for (const name of NAMES) {
    let fns: Bound;
    try {
      fns = dlopen(name, SYMBOLS).symbols as unknown as Bound;
    } catch (error) {
      lastError = error;
      continue;
    }
    const errnoAt = fns[ERRNO_LOCATION];
    libc = {
      flock: fns.flock,
      socket: fns.socket,
      sendto: fns.sendto,
      close: fns.close,
      errno() {
        const where = errnoAt();
        return where === null ? null : read.i32(where, 0);
      },
    };
    return libc;
  }
  throw lastError;
}
