// etc/sqloutbox.service: what systemd does with it must match what runservice does on SIGTERM,
// its sandbox must rate as systemd-analyze security says below, and a burst of failed starts must
// never leave it failed for good. (test/ops-systemd-sandbox.test.ts runs the binary inside it.)
import { describe, expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import { STOP_TIMEOUT_MS } from "../src/cli/commands/runservice.ts";
import { DEFAULTS } from "../src/config/types.ts";
import { REPO } from "./support/cli.ts";
import { makeTempDir } from "./support/tmp.ts";

const UNIT = path.join(REPO, "etc", "sqloutbox.service");
const text = fs.readFileSync(UNIT, "utf8");

/** The values of `key=` in the unit, in order (comments skipped). */
function values(key: string): string[] {
  return text
    .split("\n")
    .filter((l) => l.startsWith(`${key}=`))
    .map((l) => l.slice(key.length + 1).trim());
}

/** The one value of `key=` as a number of seconds (the unit writes plain seconds), or `fallback` when unset. */
function seconds(key: string, fallback: number): number {
  const all = values(key);
  expect(all.length).toBeLessThanOrEqual(1);
  if (all.length === 0) return fallback;
  expect(all[0]).toMatch(/^[0-9]+$/);
  return Number(all[0]);
}

const ANALYZE = Bun.which("systemd-analyze");
/** A test that needs systemd-analyze: skipped where it is missing (not every machine has systemd), its name saying so. */
const withAnalyze = (name: string) => (ANALYZE !== null ? name : `${name} (skipped: systemd-analyze is not installed)`);
const testWithAnalyze = test.if(ANALYZE !== null);

/** Runs systemd-analyze on a copy of the unit named sqloutbox.service in a temp dir; stdout, then stderr. */
async function analyze(args: string[]): Promise<[string, string]> {
  const dir = makeTempDir("sqloutbox-unit-");
  try {
    fs.copyFileSync(UNIT, dir.file("sqloutbox.service"));
    const proc = Bun.spawn([ANALYZE!, ...args, dir.file("sqloutbox.service")], { stdout: "pipe", stderr: "pipe" });
    const output: [string, string] = [await new Response(proc.stdout).text(), await new Response(proc.stderr).text()];
    await proc.exited;
    return output;
  } finally {
    dir.cleanup();
  }
}

/** `systemd-analyze security`'s overall exposure (0 safe … 10 exposed) for this unit; it was 3.2 before readiness and the stronger sandbox. */
const EXPOSURE_MAX = 1.2;

/** The findings systemd-analyze security may still report as open (✗), and why each stays open. */
const ACCEPTED_OPEN: Record<string, string> = {
  "MemoryDenyWriteExecute=": "Bun's JIT needs writable+executable memory",
  "PrivateNetwork=": "the drain delivers over the network",
  "RestrictAddressFamilies=~AF_(INET|INET6)": "the remotes are reached over TCP",
  "RestrictAddressFamilies=~AF_UNIX": "NOTIFY_SOCKET, and PostgreSQL/MySQL over a local socket",
  "IPAddressDeny=": "the remotes' addresses are the operator's to allow-list, not the shipped unit's",
  "RootDirectory=/RootImage=": "a single binary that runs on the host's root; a chroot buys little here",
  "DeviceAllow=": "ProtectClock= itself allows reading the RTC (char-rtc r)",
};

describe("etc/sqloutbox.service", () => {
  test("stops with SIGTERM and gives the drain more time than its own stop timeout before SIGKILL", () => {
    expect(values("KillSignal")).toEqual(["SIGTERM"]);
    const [timeout] = values("TimeoutStopSec");
    expect(Number(timeout)).toBeGreaterThan(STOP_TIMEOUT_MS / 1000);
  });

  test("runs the installed binary's runservice on the config the operations runbook installs, with JSON logs", () => {
    expect(values("ExecStart")).toEqual(["/usr/local/bin/sqloutbox runservice --config /etc/sqloutbox/outbox.toml"]);
    expect(values("Environment")).toContain("LOG_FORMAT=json");
    const runbook = fs.readFileSync(path.join(REPO, "docs", "operations.md"), "utf8");
    expect(runbook).toContain("sudo install -m 0755 dist/sqloutbox /usr/local/bin/sqloutbox");
    expect(runbook).toContain("/etc/sqloutbox/outbox.toml");
    expect(values("ReadWritePaths")).toEqual(["/var/lib/sqloutbox"]);
  });

  testWithAnalyze(
    withAnalyze("passes systemd-analyze verify (apart from the binary not being installed here)"),
    async () => {
      const problems = (await analyze(["verify"]))
        .join("\n")
        .split("\n")
        .filter((l) => l.trim() !== "" && !l.includes("/usr/local/bin/sqloutbox is not executable"));
      expect(problems).toEqual([]);
    },
  );

  test("is Type=notify for the main process only, with a watchdog, and gives startup time beyond the default write_timeout", () => {
    expect(values("Type")).toEqual(["notify"]);
    expect(values("NotifyAccess")).toEqual(["main"]);
    const watchdogSec = seconds("WatchdogSec", 0);
    expect(watchdogSec).toBeGreaterThan(0);
    // runservice pings at half of it; anything shorter than a few seconds would race a busy SQLite wait.
    expect(watchdogSec).toBeGreaterThanOrEqual(30);
    // READY=1 comes after every target's startup, which write_timeout bounds.
    expect(seconds("TimeoutStartSec", 90)).toBeGreaterThan(DEFAULTS.writeTimeout);
  });

  test("restarts after a failure or a reload (SIGHUP exits 0) after a pause, and no burst of failed starts leaves it failed for good", () => {
    expect(values("Restart")).toEqual(["always"]);
    expect(values("ExecReload")).toEqual(["/bin/kill -HUP $MAINPID"]);
    const restartSec = seconds("RestartSec", 0.1);
    expect(restartSec).toBeGreaterThanOrEqual(1); // not a tight loop against a broken config
    // systemd's defaults (DefaultStartLimitIntervalSec=10s, DefaultStartLimitBurst=5) apply when unset.
    const interval = seconds("StartLimitIntervalSec", 10);
    const burst = seconds("StartLimitBurst", 5);
    // Restarts come at least restartSec apart, so an interval holds at most interval/restartSec + 1 starts.
    const neverTrips = interval === 0 || Math.floor(interval / restartSec) + 1 <= burst;
    expect({ interval, burst, restartSec, neverTrips }).toEqual({ interval, burst, restartSec, neverTrips: true });
    expect(values("StartLimitAction")).toEqual([]); // and nothing reboots the host either
    for (const key of ["RestartPreventExitStatus", "SuccessExitStatus"]) expect(values(key)).toEqual([]); // exit 1 is a failure that restarts
  });

  testWithAnalyze(
    withAnalyze(`rates at or below ${EXPOSURE_MAX} in systemd-analyze security, with only the accepted findings open`),
    async () => {
      const overall = /Overall exposure level for sqloutbox\.service: (\d+\.\d+)/.exec(
        (await analyze(["security", "--offline=true"]))[0],
      );
      expect(overall).not.toBeNull();
      const score = Number(overall![1]);
      console.info(
        `etc/sqloutbox.service: systemd-analyze security exposure ${score} (bound ${EXPOSURE_MAX}, was 3.2)`,
      );
      expect(score).toBeLessThanOrEqual(EXPOSURE_MAX);

      const findings = JSON.parse((await analyze(["security", "--offline=true", "--json=short"]))[0]) as {
        name: string;
        set: boolean;
      }[];
      const open = findings.filter((f) => !f.set).map((f) => f.name);
      expect(open.sort()).toEqual(Object.keys(ACCEPTED_OPEN).sort());
      const named = [
        "SystemCallFilter=",
        "ProtectProc=",
        "ProcSubset=",
        "RemoveIPC=",
        "PrivateUsers=",
        "UMask=",
        "NotifyAccess=",
        "PrivateMounts=",
        "CapabilityBoundingSet=",
      ];
      for (const directive of named) {
        const rows = findings.filter((f) => f.name.startsWith(directive));
        expect(rows.length).toBeGreaterThan(0);
        expect(rows.filter((f) => !f.set)).toEqual([]);
      }
    },
  );

  test("allows exactly @system-service less @privileged and @resources, failing the rest with EPERM, and never MemoryDenyWriteExecute", () => {
    expect(values("SystemCallFilter")).toEqual(["@system-service", "~@privileged @resources"]);
    expect(values("SystemCallErrorNumber")).toEqual(["EPERM"]);
    expect(values("SystemCallArchitectures")).toEqual(["native"]);
    expect(values("MemoryDenyWriteExecute")).toEqual([]);
    expect(values("RestrictAddressFamilies")).toEqual(["AF_UNIX AF_INET AF_INET6"]);
    expect(values("UMask")).toEqual(["0077"]);
  });

  test("tells the operator how to ask the running drain for an integrity scan (USR1) and a retry now (USR2)", () => {
    expect(text).toContain("systemctl kill -s USR1 --kill-who=main sqloutbox");
    expect(text).toContain("systemctl kill -s USR2 --kill-who=main sqloutbox");
  });
});
