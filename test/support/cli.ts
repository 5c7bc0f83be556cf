// The CLI as the tests run it: the real command in a child process or in-process, with output
// normalised for comparison.
import fs from "node:fs";
import path from "node:path";
import { runCli } from "../../src/cli/main.ts";

/** The repository root and the CLI entry point the tests run. */
export const REPO = path.resolve(import.meta.dir, "../..");
export const BIN = path.join(REPO, "src/cli/bin.ts");

/** What a finished command left behind. */
export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** An environment without the caller's logging/colour settings, so output is the same everywhere. */
export function cleanEnv(extra: Record<string, string | undefined> = {}): Record<string, string> {
  const env: Record<string, string | undefined> = { ...process.env, NO_COLOR: "1", ...extra };
  for (const key of ["LOG_LEVEL", "LOG_FORMAT", "DOPPLER_TOKEN", "FORCE_COLOR"]) if (!(key in extra)) delete env[key];
  return Object.fromEntries(Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined));
}

/** Runs `bun src/cli/bin.ts ...args` (or `cmd` instead of it) to completion. */
export async function run(
  args: string[],
  options: { cwd?: string; env?: Record<string, string | undefined>; cmd?: string[] } = {},
): Promise<RunResult> {
  const proc = Bun.spawn([...(options.cmd ?? ["bun", BIN]), ...args], {
    cwd: options.cwd ?? REPO,
    env: cleanEnv(options.env),
    stdout: "pipe",
    stderr: "pipe",
    stdin: "ignore",
  });
  const [stdout, stderr, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited,
  ]);
  return { code, stdout, stderr };
}

/**
 * Runs the CLI inside this process (`runCli`, what bin.ts calls) with stdout and stderr captured
 * and seen as pipes (isTTY false, so consola prints its basic `[level] message` lines as it does
 * for `run`), the working directory and the environment of `run` set for the call and restored
 * after. Starting a `bun` per command costs ~150 ms; use `run` where the test needs a process of
 * its own: signals, a long-running command, or a command that runs beside another.
 */
export async function runInProcess(
  args: string[],
  options: { cwd?: string; env?: Record<string, string | undefined> } = {},
): Promise<RunResult> {
  const wanted = cleanEnv(options.env);
  const keys = new Set([...Object.keys(process.env), ...Object.keys(wanted)]);
  const savedEnv = Object.fromEntries([...keys].map((k) => [k, process.env[k]]));
  const savedCwd = process.cwd();
  const out = { stdout: "", stderr: "" };
  const writes = { stdout: process.stdout.write, stderr: process.stderr.write };
  const capture = (name: "stdout" | "stderr") =>
    ((chunk: string | Uint8Array, ...rest: unknown[]) => {
      out[name] += typeof chunk === "string" ? chunk : new TextDecoder().decode(chunk);
      const done = rest.find((r) => typeof r === "function") as (() => void) | undefined;
      done?.();
      return true;
    }) as typeof process.stdout.write;
  const ttys = {
    stdout: Object.getOwnPropertyDescriptor(process.stdout, "isTTY"),
    stderr: Object.getOwnPropertyDescriptor(process.stderr, "isTTY"),
  };
  for (const k of keys) setEnv(k, wanted[k]);
  process.chdir(options.cwd ?? REPO);
  process.stdout.write = capture("stdout");
  process.stderr.write = capture("stderr");
  for (const name of ["stdout", "stderr"] as const)
    Object.defineProperty(process[name], "isTTY", { value: false, configurable: true, writable: true });
  try {
    const code = await runCli(args);
    return { code, ...out };
  } finally {
    for (const name of ["stdout", "stderr"] as const) {
      const saved = ttys[name];
      if (saved) Object.defineProperty(process[name], "isTTY", saved);
      else delete (process[name] as { isTTY?: boolean }).isTTY;
    }
    process.stdout.write = writes.stdout;
    process.stderr.write = writes.stderr;
    process.chdir(savedCwd);
    for (const k of keys) setEnv(k, savedEnv[k]);
  }
}

function setEnv(key: string, value: string | undefined): void {
  if (value === undefined) delete process.env[key];
  else process.env[key] = value;
}

/**
 * Makes output comparable across runs: `dir` → `<DIR>`, ISO timestamps → `<TIME>`, and the
 * right-aligned OLDEST ages (`37ms`, `5s`, `1m02s`) → `<age>` at a fixed width.
 */
export function normalize(text: string, dir?: string): string {
  let out = dir ? text.split(fs.realpathSync(dir)).join("<DIR>").split(dir).join("<DIR>") : text;
  out = out.replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)/g, "<TIME>");
  out = out.replace(/ +\d+(?:ms|s|m\d\ds)(?= )/g, "  <age>");
  return out;
}
