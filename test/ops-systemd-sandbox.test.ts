// etc/sqloutbox.service's sandbox around the compiled binary, without systemd (this machine has
// none running): test/support/children/systemd-sandbox.py applies what one process can of the unit —
// its SystemCallFilter= (expanded by systemd-analyze) with SystemCallErrorNumber=EPERM,
// RestrictAddressFamilies=, ProtectProc=/ProcSubset= (a fresh /proc), ProtectSystem=strict with
// ReadWritePaths=, a non-root User=, UMask= — and the drain must still deliver, scan on SIGUSR1 and
// stop cleanly, and the notifier must reach NOTIFY_SOCKET. Not emulated: PrivateUsers=, PrivateTmp=,
// PrivateDevices=, PrivateIPC= (namespaces the drain does not look into). Needs root, unshare,
// python3, libseccomp and PostgreSQL; builds two binaries, so it runs with SQLOUTBOX_SLOW_TESTS=1.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import { buildBinary } from "../build.ts";
import { cleanEnv, REPO } from "./support/cli.ts";
import { seed } from "./support/queue.ts";
import { openRemote, type ServerRemote } from "./support/remote.ts";
import { SLOW } from "./support/slow.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";
import { waitFor } from "./support/wait.ts";

const tools = ["unshare", "mount", "python3", "systemd-analyze"].every((t) => Bun.which(t) !== null);
const ABLE = process.platform === "linux" && process.getuid?.() === 0 && tools;
const SUITE = !SLOW
  ? "the unit's sandbox (skipped: set SQLOUTBOX_SLOW_TESTS=1 to build the binary and run it sandboxed)"
  : !ABLE
    ? "the unit's sandbox (skipped: needs Linux, root, unshare, mount, python3 and systemd-analyze)"
    : "the unit's sandbox";

const UNIT_TEXT = fs.readFileSync(path.join(REPO, "etc", "sqloutbox.service"), "utf8");
const SANDBOX = path.join(REPO, "test", "support", "children", "systemd-sandbox.py");
const RECEIVER = path.join(REPO, "test", "support", "children", "notify-receiver.py");
const NOBODY = 65534;

function unitValues(key: string): string[] {
  return UNIT_TEXT.split("\n")
    .filter((l) => l.startsWith(`${key}=`))
    .map((l) => l.slice(key.length + 1).trim());
}

/** The system calls of `@group`, nested groups expanded, as `systemd-analyze syscall-filter` lists them. */
function expandGroup(group: string, seen = new Set<string>()): string[] {
  if (seen.has(group)) return [];
  seen.add(group);
  const out = Bun.spawnSync(["systemd-analyze", "syscall-filter", group], { stdout: "pipe", stderr: "pipe" });
  if (out.exitCode !== 0) throw new Error(`systemd-analyze syscall-filter ${group}: ${out.stderr.toString()}`);
  const names = out.stdout
    .toString()
    .split("\n")
    .slice(1) // the group's own name
    .map((l) => l.trim())
    .filter((l) => l !== "" && !l.startsWith("#"));
  return names.flatMap((n) => (n.startsWith("@") ? expandGroup(n, seen) : [n]));
}

/** The unit's SystemCallFilter= lines as systemd reads them: the first sets an allow-list, each `~` line takes away. */
function allowedSyscalls(): string[] {
  const lines = unitValues("SystemCallFilter");
  expect(lines[0]!.startsWith("~")).toBe(false); // an allow-list, which the fixture implements
  const allowed = new Set<string>();
  for (const line of lines) {
    const deny = line.startsWith("~");
    for (const token of (deny ? line.slice(1) : line).split(/\s+/).filter(Boolean)) {
      for (const name of token.startsWith("@") ? expandGroup(token) : [token]) {
        if (deny) allowed.delete(name);
        else allowed.add(name);
      }
    }
  }
  return [...allowed].sort();
}

const FAMILY_NUMBERS: Record<string, number> = { AF_UNIX: 1, AF_LOCAL: 1, AF_INET: 2, AF_INET6: 10, AF_NETLINK: 16 };

let tmp: TempDir;
let pg: ServerRemote;
let drainBinary: string;
let notifyBinary: string;
let rwDir: string;
let etcDir: string;

/** The fixture's JSON spec from the unit, with `rwDir` standing in for its ReadWritePaths=. */
function sandboxSpec() {
  expect(unitValues("ProtectProc")).toEqual(["invisible"]);
  expect(unitValues("ProcSubset")).toEqual(["pid"]);
  expect(unitValues("SystemCallErrorNumber")).toEqual(["EPERM"]);
  expect(unitValues("ProtectSystem")).toEqual(["strict"]);
  return {
    uid: NOBODY,
    gid: NOBODY,
    umask: parseInt(unitValues("UMask")[0]!, 8),
    readWrite: [rwDir],
    proc: "hidepid=invisible,subset=pid",
    syscalls: allowedSyscalls(),
    families: unitValues("RestrictAddressFamilies")[0]!
      .split(/\s+/)
      .map((f) => FAMILY_NUMBERS[f]!),
  };
}

function sandboxed(command: string[], env: Record<string, string | undefined> = {}) {
  return Bun.spawn(
    ["unshare", "--mount", "--propagation", "private", "python3", SANDBOX, JSON.stringify(sandboxSpec()), ...command],
    {
      cwd: etcDir, // WorkingDirectory=/etc/sqloutbox
      env: cleanEnv(env),
      stdout: "pipe",
      stderr: "pipe",
    },
  );
}

beforeAll(async () => {
  if (!SLOW || !ABLE) return;
  // On disk, not in the run's tmpfs under /dev: ProtectSystem=strict leaves /dev writable, so the
  // read-only config dir would not be read-only there.
  tmp = makeTempDir("sqloutbox-sandbox-", "/var/tmp");
  fs.chmodSync(tmp.path, 0o755); // the service user walks through it to its bin/, etc/ and lib/
  drainBinary = tmp.file("bin/sqloutbox");
  notifyBinary = tmp.file("bin/notify-once");
  await buildBinary(drainBinary);
  const built = await Bun.build({
    entrypoints: [path.join(REPO, "test", "support", "children", "notify-once.ts")],
    compile: { outfile: notifyBinary },
  });
  if (!built.success) throw new Error(built.logs.map(String).join("\n"));
  etcDir = tmp.file("etc");
  rwDir = tmp.file("lib");
  fs.mkdirSync(etcDir);
  fs.mkdirSync(rwDir);
  fs.chownSync(rwDir, NOBODY, NOBODY); // ReadWritePaths= belongs to User=
  pg = await openRemote("postgres");
}, 120_000);
afterAll(async () => {
  await pg?.done();
  tmp?.cleanup();
});

describe.if(SLOW && ABLE)(SUITE, () => {
  test("the sandbox bites: no /proc/meminfo, no setpriority, no netlink socket, a read-only config dir, private new files", async () => {
    const probe = sandboxed([
      "sh",
      "-c",
      `cat /proc/meminfo; nice -n 1 true; python3 -c 'import socket; socket.socket(socket.AF_NETLINK, socket.SOCK_RAW)' 2>&1 | tail -1; touch ${etcDir}/x; touch ${rwDir}/probe; stat -c '%a %u' ${rwDir}/probe`,
    ]);
    const [stdout, stderr] = [await new Response(probe.stdout).text(), await new Response(probe.stderr).text()];
    await probe.exited;
    expect(stderr).toContain("/proc/meminfo: No such file or directory"); // ProcSubset=pid
    expect(stderr).toContain("nice: cannot set niceness: Operation not permitted"); // ~@resources, EPERM
    expect(stdout + stderr).toContain("PermissionError: [Errno 1] Operation not permitted"); // RestrictAddressFamilies=
    expect(stderr).toContain(`touch: cannot touch '${etcDir}/x': Read-only file system`); // ProtectSystem=strict
    expect(stdout.trim().split("\n").at(-1)).toBe(`600 ${NOBODY}`); // UMask=0077, User=
    fs.rmSync(path.join(rwDir, "probe"));
  }, 30_000);

  test("the compiled drain delivers to sqlite and PostgreSQL, scans on SIGUSR1 and stops with 0 on SIGTERM, logging no warning", async () => {
    const queue = path.join(rwDir, "queue");
    const remote = await openRemote("sqlite", { path: path.join(rwDir, "remote.db") });
    await remote.exec("CREATE TABLE orders (id INTEGER)"); // no key: seed() numbers from 1 again below
    await pg.exec("CREATE TABLE payments (id integer PRIMARY KEY)");
    seed(queue, "orders", 40);
    seed(queue, "payments", 30);
    for (const entry of fs.readdirSync(rwDir, { recursive: true }))
      fs.chownSync(path.join(rwDir, String(entry)), NOBODY, NOBODY);
    // By name, as a deployed config would: the resolver reads /etc/hosts and may try netlink (refused).
    const pgUrl = pg.url.replace("127.0.0.1", "localhost");
    fs.writeFileSync(
      path.join(etcDir, "outbox.toml"),
      `[app.shop]
db_dir = "${queue}"
flush_interval = 0.05
table_flush_threshold = 1

[app.shop.db.local]
writer = "sqlite"
tables = ["orders"]

[app.shop.db.local.connection]
path = "${remote.path}"

[app.shop.db.pg]
writer = "postgres"
tables = ["payments"]

[app.shop.db.pg.connection]
url = "${pgUrl}"
`,
    );
    const drain = sandboxed([drainBinary, "runservice", "--config", path.join(etcDir, "outbox.toml")], {
      LOG_FORMAT: "json",
    });
    let log = "";
    const pump = (async () => {
      const decoder = new TextDecoder();
      for await (const chunk of drain.stderr) log += decoder.decode(chunk, { stream: true });
    })();
    try {
      await waitFor(async () => (await remote.count("orders")) === 40, "the first 40 orders", 20_000);
      await waitFor(async () => (await pg.count("payments")) === 30, "the first 30 payments", 20_000);
      // Rows pushed while it runs (by root here; SQLite hands new -wal files to the db's owner).
      seed(queue, "orders", 5);
      await waitFor(async () => (await remote.count("orders")) === 45, "5 more orders", 20_000);
      drain.kill("SIGUSR1");
      await waitFor(() => log.includes("integrity scan of"), "the integrity scan's log line", 20_000);
      drain.kill("SIGTERM");
      expect(await drain.exited).toBe(0);
      await pump;
    } catch (error) {
      drain.kill("SIGKILL");
      await pump;
      throw new Error(`${(error as Error).message}; the drain logged:\n${log}`);
    } finally {
      await remote.done();
    }
    const lines = log
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { level: string; msg: string });
    expect(lines.filter((l) => l.level === "error" || l.level === "warn")).toEqual([]);
    expect(lines.some((l) => l.msg.includes("integrity scan of 2 file(s): clean"))).toBe(true);
    expect(lines.some((l) => l.msg === "drain: stopped")).toBe(true);
  }, 60_000);

  test("a compiled binary reaches NOTIFY_SOCKET from inside the sandbox, as the main pid", async () => {
    const runDir = tmp.file("run");
    fs.mkdirSync(runDir, { mode: 0o755 });
    const socket = path.join(runDir, "notify");
    const receiver = Bun.spawn(["python3", RECEIVER, socket], { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
    const reader = receiver.stdout.pipeThrough(new TextDecoderStream()).getReader();
    let received = "";
    const lineCount = () => received.split("\n").length - 1;
    const pump = (async () => {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        received += value;
      }
    })();
    try {
      await waitFor(() => received.startsWith("listening\n"), "the receiver", 20_000);
      const sender = sandboxed([notifyBinary], { NOTIFY_SOCKET: socket, WATCHDOG_USEC: "60000000" });
      const out = await new Response(sender.stdout).text();
      expect({ code: await sender.exited, out, err: await new Response(sender.stderr).text() }).toEqual({
        code: 0,
        out: "ready=true watchdog=true stopping=true interval=30000\n",
        err: "",
      });
      await waitFor(() => lineCount() >= 4, "three datagrams", 20_000);
      const datagrams = received
        .trim()
        .split("\n")
        .slice(1)
        .map((l) => JSON.parse(l));
      // unshare and the sandbox exec in place, so the sender is the pid systemd would have forked.
      expect(datagrams).toEqual([
        { pid: sender.pid, data: "READY=1\nSTATUS=sandboxed" },
        { pid: sender.pid, data: "WATCHDOG=1" },
        { pid: sender.pid, data: "STOPPING=1" },
      ]);
    } finally {
      receiver.stdin.end();
      await receiver.exited;
      await pump;
    }
  }, 30_000);
});
