// `sqloutbox completion SHELL`: each script is sourced into its real shell and asked to complete a
// command, a flag and a flag's value, as a user pressing Tab would.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fs from "node:fs";
import { subCommandsOf } from "../src/cli/command-line.ts";
import { main } from "../src/cli/main.ts";
import { runInProcess } from "./support/cli.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";

let dir: TempDir;
const scripts: Record<string, string> = {};
beforeAll(async () => {
  dir = makeTempDir();
  // Something for file and directory completion to find.
  fs.writeFileSync(dir.file("outbox.toml"), "");
  fs.mkdirSync(dir.file("queue"));
  for (const shell of ["bash", "zsh", "fish"]) {
    const r = await runInProcess(["completion", shell]);
    expect(r).toMatchObject({ code: 0, stderr: "" });
    scripts[shell] = dir.file(`completion.${shell}`);
    fs.writeFileSync(scripts[shell]!, r.stdout);
  }
});
afterAll(() => dir.cleanup());

/** Runs `script` in `shell` (argv) in the temp dir; its stdout, trimmed. */
function inShell(shell: string[], script: string): string {
  const r = Bun.spawnSync([...shell, script], {
    cwd: dir.path,
    stdout: "pipe",
    stderr: "pipe",
    env: { PATH: process.env.PATH, HOME: dir.path },
  });
  expect(r.stderr.toString()).toBe("");
  expect(r.exitCode).toBe(0);
  return r.stdout.toString().trim();
}

describe("bash", () => {
  /** What Tab offers after `words` (the last one is the word being completed). */
  const complete = (...words: string[]) =>
    inShell(
      ["bash", "-c"],
      `source ${JSON.stringify(scripts.bash)}; COMP_WORDS=(${words.map((w) => JSON.stringify(w)).join(" ")}); COMP_CWORD=${words.length - 1}; _sqloutbox; echo "\${COMPREPLY[*]}"`,
    );

  test("completes a command, a subcommand and every registered command from nothing", async () => {
    expect(complete("sqloutbox", "sta")).toBe("status");
    expect(complete("sqloutbox", "dead-letter", "re")).toBe("replay");
    expect(complete("sqloutbox", "")).toBe((await subCommandsOf(main)).map(([name]) => name).join(" "));
  });

  test("completes a command's flags, even after a flag that takes a value", () => {
    expect(complete("sqloutbox", "status", "--js")).toBe("--json");
    expect(complete("sqloutbox", "--log-level", "debug", "status", "--ch")).toBe("--check");
    expect(complete("sqloutbox", "dead-letter", "list", "--unre")).toBe("--unreplayed");
    expect(complete("sqloutbox", "--v")).toBe("--version");
  });

  test("completes a flag's value: a file, a directory, one of its words", () => {
    expect(complete("sqloutbox", "status", "--config", "out")).toBe("outbox.toml");
    expect(complete("sqloutbox", "verify", "--db-dir", "q")).toBe("queue");
    expect(complete("sqloutbox", "status", "--log-format", "j")).toBe("json");
    expect(complete("sqloutbox", "completion", "f")).toBe("fish");
  });
});

const zsh = Bun.which("zsh");
describe.skipIf(!zsh)(zsh ? "zsh" : "zsh (skipped: zsh is not installed)", () => {
  test("the script loads into zsh and offers the same commands and flags", () => {
    // zsh runs the function through bashcompinit, with bash's 0-based arrays, and filters by prefix itself.
    const offered = (...words: string[]) =>
      inShell(
        ["zsh", "-f", "-c"],
        `source ${JSON.stringify(scripts.zsh)}; setopt ksharrays; COMP_WORDS=(${words.map((w) => JSON.stringify(w)).join(" ")}); COMP_CWORD=${words.length - 1}; _sqloutbox; print -r -- "\${COMPREPLY[@]}"`,
      ).split(" ");
    expect(offered("sqloutbox", "st")).toContain("status");
    expect(offered("sqloutbox", "status", "--js")).toContain("--json");
    expect(offered("sqloutbox", "dead-letter", "")).toEqual(["list", "show", "replay", "discard", "purge"]);
  });
});

const fish = Bun.which("fish");
describe.skipIf(!fish)(fish ? "fish" : "fish (skipped: fish is not installed)", () => {
  test("completes a command, a flag and a value, with their descriptions", () => {
    const complete = (line: string) =>
      inShell(
        ["fish", "--no-config", "-c"],
        `source ${JSON.stringify(scripts.fish)}; complete -C ${JSON.stringify(line)}`,
      );
    expect(complete("sqloutbox sta")).toBe(
      "status\tPer-namespace depth, oldest pending age, stuck heads and dead letters (read-only)",
    );
    expect(complete("sqloutbox status --js")).toBe("--json\tPrint JSON (stable shape, see docs/cli.md)");
    expect(complete("sqloutbox dead-letter re")).toStartWith("replay\t");
    expect(complete("sqloutbox status --config out")).toBe("outbox.toml");
  });
});

test("an unknown shell is a usage error naming the shells", async () => {
  const r = await runInProcess(["completion", "tcsh"]);
  expect(r.code).toBe(2);
  expect(r.stderr).toContain('completion: unknown shell "tcsh": expected one of bash, zsh, fish');
});
