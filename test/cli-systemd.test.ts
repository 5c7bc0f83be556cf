// etc/sqloutbox.service: what systemd does with it must match what runservice does on SIGTERM.
import { describe, expect, test } from "bun:test";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { STOP_TIMEOUT_MS } from "../src/cli/runservice.ts";
import { REPO } from "./cli-support.ts";

const UNIT = path.join(REPO, "etc", "sqloutbox.service");
const text = fs.readFileSync(UNIT, "utf8");

/** The values of `key=` in the unit, in order (comments skipped). */
function values(key: string): string[] {
  return text
    .split("\n")
    .filter((l) => l.startsWith(`${key}=`))
    .map((l) => l.slice(key.length + 1).trim());
}

describe("etc/sqloutbox.service", () => {
  test("stops with SIGTERM and gives the drain more time than its own stop timeout before SIGKILL", () => {
    expect(values("KillSignal")).toEqual(["SIGTERM"]);
    const [timeout] = values("TimeoutStopSec");
    expect(Number(timeout)).toBeGreaterThan(STOP_TIMEOUT_MS / 1000);
  });

  test("runs the installed binary's runservice on the config the README installs, with JSON logs", () => {
    expect(values("ExecStart")).toEqual(["/usr/local/bin/sqloutbox runservice --config /etc/sqloutbox/outbox.toml"]);
    expect(values("Environment")).toContain("LOG_FORMAT=json");
    const readme = fs.readFileSync(path.join(REPO, "README.md"), "utf8");
    expect(readme).toContain("sudo install -m 0755 dist/sqloutbox /usr/local/bin/sqloutbox");
    expect(readme).toContain("/etc/sqloutbox/outbox.toml");
    expect(values("ReadWritePaths")).toEqual(["/var/lib/sqloutbox"]);
  });

  test("passes systemd-analyze verify (apart from the binary not being installed here)", async () => {
    const analyze = Bun.which("systemd-analyze");
    if (!analyze) return; // not every machine has systemd; the checks above still ran
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sqloutbox-unit-"));
    try {
      fs.copyFileSync(UNIT, path.join(dir, "sqloutbox.service"));
      const proc = Bun.spawn([analyze, "verify", path.join(dir, "sqloutbox.service")], { stdout: "pipe", stderr: "pipe" });
      const output = (await new Response(proc.stdout).text()) + (await new Response(proc.stderr).text());
      await proc.exited;
      const problems = output
        .split("\n")
        .filter((l) => l.trim() !== "" && !l.includes("/usr/local/bin/sqloutbox is not executable"));
      expect(problems).toEqual([]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
