// The command line's contract: --version, --help everywhere, usage errors exit 2 with a hint.
// Everything runs in this process (runInProcess) but a few smoke cases, which start the real
// `bun src/cli/bin.ts`.
import { afterAll, describe, expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import pkg from "../package.json" with { type: "json" };
import { subCommandsOf } from "../src/cli/command-line.ts";
import { main } from "../src/cli/main.ts";
import { run, runInProcess } from "./support/cli.ts";
import { makeTempDir } from "./support/tmp.ts";

const tmp = makeTempDir("sqloutbox-cli-usage-");
afterAll(() => tmp.cleanup());

// The commands as main.ts registers them, so a new command is covered without editing this file.
const COMMANDS = (await subCommandsOf(main)).map(([name]) => name);
const COMMAND_LINES: string[] = [];
for (const [name, cmd] of await subCommandsOf(main)) {
  COMMAND_LINES.push(name);
  for (const [sub] of await subCommandsOf(cmd)) COMMAND_LINES.push(`${name} ${sub}`);
}

describe("version and help", () => {
  test("--version prints the package version and exits 0", async () => {
    const r = await runInProcess(["--version"]);
    expect(r).toEqual({ code: 0, stdout: `${pkg.version}\n`, stderr: "" });
  });

  test("--help lists every registered command, --version and --help", async () => {
    const r = await runInProcess(["--help"]);
    expect(r.code).toBe(0);
    expect(COMMANDS.length).toBeGreaterThanOrEqual(8);
    for (const cmd of COMMANDS) expect(r.stdout).toMatch(new RegExp(`^  ${cmd} +\\S`, "m"));
    expect(r.stdout).toMatch(/^ {2}-v, --version +Print the version and exit$/m);
    expect(r.stdout).toMatch(/^ {2}-h, --help +Show this help/m);
  });

  test.each(COMMAND_LINES)("%s --help shows that command's usage and exits 0", async (line) => {
    const cmd = line.split(" ");
    const r = await runInProcess([...cmd, "--help"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`USAGE sqloutbox ${cmd.join(" ")}`);
  });

  test("status --help documents its flags", async () => {
    const r = await runInProcess(["status", "--help"]);
    expect(r.stdout.replace(pkg.version, "<VERSION>")).toMatchInlineSnapshot(`
      "Per-namespace depth, oldest pending age, stuck heads and dead letters (read-only) (sqloutbox status v<VERSION>)

      USAGE sqloutbox status [OPTIONS]

      OPTIONS

        --config=<FILE>                        The outbox.toml whose apps' db_dirs and db_files are read (default ./outbox.toml)
        --db-dir=<DIR>                         A db_dir holding {table}.db outbox files (instead of --config)
        --db-file=<FILE>                       A db_file holding every table of an app, or an application's database (instead of --config)
        --json                                 Print JSON (stable shape, see docs/cli.md)
        --watch                                Refresh until interrupted (with --json: one JSON document per line)
        --interval=<SECONDS>                   Refresh interval for --watch (default 2)
        --check                                Exit 1 when something needs an operator: stuck, held, dead letters, too old, a target down (for cron, Nagios, probes)
        --fail-on=<LIST>                       With --check: which conditions fail it, comma-separated (default all: stuck,held,dead,age,down)
        --max-age=<DUR>                        With --check: the oldest pending row may be this old (default 15m)
        --tenant=<T>                           One tenant of a tenant template: its rows per table, its dead letters, held or not and why
        --log-level=<error|warn|info|debug>    Log verbosity (env LOG_LEVEL; default info)
        --log-format=<pretty|json>             Log format: json = one object per line, for journald (env LOG_FORMAT; default pretty)

      "
    `);
  });
});

describe("a real process", () => {
  test("--version prints the package version and exits 0", async () => {
    expect(await run(["--version"])).toEqual({ code: 0, stdout: `${pkg.version}\n`, stderr: "" });
  });

  test("--help through a pipe has no colour codes", async () => {
    const r = await run(["dead-letter", "replay", "--help"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("USAGE sqloutbox dead-letter replay");
    expect(r.stdout).not.toContain("\u001B[");
  });

  test("a usage error exits 2 with the hint on stderr only", async () => {
    const r = await run(["status", "--db_dirr", "x"], { cwd: tmp.path });
    expect(r).toEqual({
      code: 2,
      stdout: "",
      stderr:
        'error: unknown option --db_dirr for "sqloutbox status" (did you mean "--db-dir"?)\nRun "sqloutbox status --help" for usage.\n',
    });
  });
});

describe("usage errors exit 2 and say what is wrong", () => {
  test.each([
    [[], new RegExp(`"sqloutbox" needs a command: ${COMMANDS.join(", ")}\n`)],
    [["frobnicate"], /unknown command "frobnicate" for "sqloutbox"\n/],
    [["statsu"], /unknown command "statsu" for "sqloutbox" \(did you mean "status"\?\)/],
    [
      ["status", "--confg", "outbox.toml"],
      /unknown option --confg for "sqloutbox status" \(did you mean "--config"\?\)/,
    ],
    [["status", "--jsn"], /unknown option --jsn for "sqloutbox status" \(did you mean "--json"\?\)/],
    [["--log-levl", "debug", "status"], /unknown option --log-levl for "sqloutbox" \(did you mean "--log-level"\?\)/],
    [["dead-letter", "lst"], /unknown command "lst" for "sqloutbox dead-letter" \(did you mean "list"\?\)/],
    [["status", "--frobnicate-everything"], /unknown option --frobnicate-everything for "sqloutbox status"\n/],
    [["status", "--db_dirr", "x"], /unknown option --db_dirr for "sqloutbox status"/],
    [["status", "--db-dir"], /option --db-dir needs a value/],
    [["status", "--db-dir="], /option --db-dir needs a value/],
    [["status", "extra"], /unexpected argument "extra" for "sqloutbox status"/],
    [["dead-letter"], /"sqloutbox dead-letter" needs a command: list, show, replay, discard, purge/],
    [["dead-letter", "prune"], /unknown command "prune" for "sqloutbox dead-letter"/],
    [["dead-letter", "purge"], /missing required option --older-than/],
    [
      ["skip", "--db-dir", "."],
      /^error: missing required option --namespace \(or --tenant T for a tenant's whole backlog\)\n/,
    ],
    [["skip", "--db-dir", ".", "--namespace", "orders"], /^error: missing required option --seq\n/],
    [["skip", "--db-dir", ".", "--namespace", "orders", "--seq", "abc"], /--seq must be a positive integer, got "abc"/],
    [["skip", "--db-dir", ".", "--namespace", "orders", "--seq", "-1"], /--seq must be a positive integer, got "-1"/],
    [
      ["status", "--db-dir", ".", "--watch", "--interval", "-2"],
      /--interval must be a positive number of seconds, got "-2"/,
    ],
    [["skip", "--db-dir", ".", "--namespace", "../x", "--seq", "1"], /--namespace must be a table name/],
    [
      ["skip", "--db-dir", ".", "--namespace", "a b", "--seq", "1"],
      /--namespace must be a table name: invalid table name "a b"/,
    ],
    [
      ["dead-letter", "show", "--db-dir", ".", "--namespace", "a;b", "--seq", "1"],
      /--namespace must be a table name: invalid table name "a;b"/,
    ],
    [
      ["status", "--config", "a.toml", "--db-dir", "."],
      /give one of --config FILE, --db-dir DIR and --db-file FILE, not --config FILE and --db-dir DIR/,
    ],
    [["status", "--log-level", "loud", "--db-dir", "."], /invalid log level "loud".*\nRun "sqloutbox status --help"/],
    [["status", "--interval", "1", "--db-dir", "."], /--interval only applies with --watch/],
    [["init", "a", "b"], /unexpected argument "b" for "sqloutbox init"/],
  ])("sqloutbox %p", async (args, message) => {
    const r = await runInProcess(args as string[], { cwd: tmp.path });
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(message);
    expect(r.stderr).toContain('--help" for usage.');
  });

  test("an invalid LOG_LEVEL in the environment is a usage error too", async () => {
    const r = await runInProcess(["status", "--db-dir", "."], { cwd: tmp.path, env: { LOG_LEVEL: "verbose" } });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('invalid log level "verbose": expected one of error, warn, info, debug');
  });

  test("status without --config or --db-dir and no ./outbox.toml is a usage error", async () => {
    const r = await runInProcess(["status"], { cwd: tmp.path });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("no outbox.toml in");
  });
});

describe("logging options", () => {
  test("may come before the command", async () => {
    const r = await runInProcess([
      "--log-format",
      "json",
      "--log-level",
      "debug",
      "status",
      "--db-dir",
      tmp.file("nope"),
    ]);
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stderr.trim().split("\n").at(-1)!)).toMatchObject({ level: "error", code: "E_NOT_FOUND" });
  });
});

describe("failures exit 1", () => {
  test("a missing db_dir exits 1 naming it", async () => {
    const r = await runInProcess(["status", "--db-dir", tmp.file("nope")]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`db_dir ${tmp.file("nope")} does not exist`);
  });

  test("--db-dir naming a file says it is a file, and creates nothing", async () => {
    const file = tmp.file("outbox.toml.bak");
    fs.writeFileSync(file, "");
    const r = await runInProcess(["status", "--db-dir", file]);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      `[error] --db-dir ${file} is a file, not a directory (give the directory that holds the {table}.db files, or --db-file ${file})\n`,
    );
    fs.rmSync(file);
  });

  test.each(["status", "verify", "runservice"])(
    "%s --config naming a directory is one error line, exit 1",
    async (cmd) => {
      const dir = makeTempDir("cfgdir-", tmp.path).path;
      const r = await runInProcess([cmd, "--config", dir]);
      expect(r.code).toBe(1);
      // runservice's lines start with the time; the rest is the same one line.
      expect(r.stderr.replace(/^\S+Z /, "")).toBe(
        `[error] ${dir}: cannot read config file: EISDIR: illegal operation on a directory, read\n`,
      );
    },
  );

  test("errors are one JSON object per line with --log-format json", async () => {
    const r = await runInProcess(["verify", "--config", tmp.file("missing.toml"), "--log-format", "json"]);
    expect(r.code).toBe(1);
    const line = JSON.parse(r.stderr.trim());
    expect(line).toMatchObject({ level: "error", code: "E_NOT_FOUND" });
    expect(line.msg).toContain("missing.toml does not exist");
    expect(typeof line.time).toBe("string");
  });
});

describe("read-only commands and a db_dir that does not exist yet", () => {
  test.each(["status", "verify", "dead-letter list"])(
    "%s with a config whose db_dir does not exist creates nothing",
    async (line) => {
      const dir = makeTempDir("cfg-", tmp.path).path;
      fs.writeFileSync(
        path.join(dir, "outbox.toml"),
        `[app.a]\ndb_dir = "q"\n[app.a.db.x]\nwriter = "sqlite"\ntables = ["t"]\n[app.a.db.x.connection]\npath = "r.db"\n`,
      );
      const r = await runInProcess([...line.split(" "), "--config", "outbox.toml"], { cwd: dir });
      expect(r.code).toBe(0);
      expect(fs.readdirSync(dir)).toEqual(["outbox.toml"]);
    },
  );
});
