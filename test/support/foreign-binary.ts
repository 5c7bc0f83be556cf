// How to start an executable built for another libc or CPU on this Debian x86_64 host, from
// Debian packages only (.ci/run installs them): musl + musl-tools for the musl build,
// qemu-user-static + libc6-arm64-cross for the arm64 build.
import fs from "node:fs";
import path from "node:path";

/** What goes before the executable on the command line, and what to add to its environment. */
export interface Launcher {
  prefix: string[];
  env: Record<string, string>;
}

/** This machine's own executables need nothing. */
export const NATIVE: Launcher = { prefix: [], env: {} };

const MUSL_LOADER = "/lib/ld-musl-x86_64.so.1";
const GLIBC_LIBS = "/usr/lib/x86_64-linux-gnu";
const ARM64_SYSROOT = "/usr/aarch64-linux-gnu";

/**
 * Prepares `dir` for a linux-x64-musl executable and returns how to start it: Debian's
 * libstdc++ and libgcc_s, plus musl-glibc-compat.c compiled with musl-gcc for the glibc-only
 * names they use, found through LD_LIBRARY_PATH by musl's loader (the executable's interpreter).
 */
export function muslLauncher(dir: string): Launcher {
  need(MUSL_LOADER, fs.existsSync(MUSL_LOADER), "musl");
  need("musl-gcc", Bun.which("musl-gcc") !== null, "musl-tools");
  fs.mkdirSync(dir, { recursive: true });
  // The glibc builds name ld-linux-x86-64.so.2 as a dependency; under musl this library takes its place.
  const compat = path.join(dir, "ld-linux-x86-64.so.2");
  const cc = Bun.spawnSync(
    ["musl-gcc", "-shared", "-fPIC", "-O2", "-o", compat, path.join(import.meta.dir, "musl-glibc-compat.c")],
    { stderr: "pipe" },
  );
  if (cc.exitCode !== 0) throw new Error(`musl-gcc failed:\n${cc.stderr.toString()}`);
  for (const lib of ["libstdc++.so.6", "libgcc_s.so.1"]) {
    const target = path.join(GLIBC_LIBS, lib);
    need(target, fs.existsSync(target), lib === "libgcc_s.so.1" ? "libgcc-s1" : "libstdc++6");
    fs.rmSync(path.join(dir, lib), { force: true });
    fs.symlinkSync(target, path.join(dir, lib));
  }
  return { prefix: [], env: { LD_LIBRARY_PATH: dir } };
}

/**
 * Starts a linux-arm64 executable under qemu user emulation, called directly (binfmt_misc need
 * not be registered in a container) with Debian's arm64 glibc as the library root.
 */
export function qemuArm64Launcher(): Launcher {
  need("qemu-aarch64-static", Bun.which("qemu-aarch64-static") !== null, "qemu-user-static");
  const loader = path.join(ARM64_SYSROOT, "lib/ld-linux-aarch64.so.1");
  need(loader, fs.existsSync(loader), "libc6-arm64-cross");
  return { prefix: ["qemu-aarch64-static", "-L", ARM64_SYSROOT], env: {} };
}

function need(what: string, present: boolean, debianPackage: string): void {
  if (!present) throw new Error(`${what} is missing: apt-get install ${debianPackage} (.ci/run installs it)`);
}
