// The README's Quick start, run to the letter: its DDL, its outbox.toml, its producer, and both
// ways it drains — the `sqloutbox` commands of its shell block, and its in-process snippet —
// each in a project of its own against a fresh database on the local PostgreSQL.
import { afterAll, expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import { BIN, cleanEnv, REPO, run } from "./support/cli.ts";
import { openRemote, type ServerRemote } from "./support/remote.ts";
import { describeSlow } from "./support/slow.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";
import { waitFor } from "./support/wait.ts";

/** The fenced code blocks of the README section `heading`, in order, with their language. */
function codeBlocks(heading: string): Array<{ lang: string; code: string }> {
  const readme = fs.readFileSync(path.join(REPO, "README.md"), "utf8");
  const start = readme.indexOf(`\n## ${heading}\n`);
  const end = readme.indexOf("\n## ", start + 1);
  const section = readme.slice(start, end);
  return [...section.matchAll(/```(\w+)\n([\s\S]*?)```/g)].map((m) => ({ lang: m[1]!, code: m[2]! }));
}

const remotes: ServerRemote[] = [];
const projects: TempDir[] = [];
afterAll(async () => {
  for (const dir of projects) dir.cleanup();
  for (const remote of remotes) await remote.done();
});

/**
 * Steps 1 to 3 as written: a fresh database with the README's DDL, a project (where "sqloutbox"
 * resolves to this repository, as after installing it) with its outbox.toml, and its producer run.
 */
async function startProject(
  blocks: Array<{ lang: string; code: string }>,
): Promise<{ project: string; remote: ServerRemote; env: Record<string, string> }> {
  const [ddl, toml, producer] = blocks;
  const remote = await openRemote("postgres");
  remotes.push(remote);
  await remote.exec(ddl!.code);
  const dir = makeTempDir("sqloutbox-quickstart-");
  projects.push(dir);
  const project = dir.path;
  fs.mkdirSync(path.join(project, "node_modules"));
  fs.symlinkSync(REPO, path.join(project, "node_modules", "sqloutbox"));
  fs.writeFileSync(path.join(project, "package.json"), JSON.stringify({ name: "app", type: "module", private: true }));
  fs.writeFileSync(path.join(project, "outbox.toml"), toml!.code);
  fs.writeFileSync(path.join(project, "produce.ts"), producer!.code);
  const env = { DATABASE_URL: remote.url };
  const produced = await run(["produce.ts"], { cmd: ["bun"], cwd: project, env });
  expect({ code: produced.code, stderr: produced.stderr }).toEqual({ code: 0, stderr: "" });
  return { project, remote, env };
}

/** Waits until the payment the producer queued landed on `remote`, captured. */
async function captured(remote: ServerRemote): Promise<void> {
  await waitFor(
    async () => {
      const rows = await remote.rows("SELECT p.id, p.state FROM payments p JOIN orders o ON o.id = p.order_id");
      return rows.length === 1 && rows[0]![0] === 7 && rows[0]![1] === "captured";
    },
    "the captured payment on PostgreSQL",
    20_000,
  );
}

// The README's outbox.toml keeps the default table_max_wait (6 s) and its three rows stay below the
// flush threshold, so each drain waits that long before it sends them; the two run side by side.
describeSlow("README Quick start", "run it as written, waiting out the default table_max_wait of 6 s", () => {
  test("its DDL, outbox.toml and producer, drained by its shell commands and by its in-process snippet, deliver to PostgreSQL", async () => {
    const blocks = codeBlocks("Quick start");
    expect(blocks.map((b) => b.lang)).toEqual(["sql", "toml", "ts", "sh", "ts"]);
    const [, , , commands, snippet] = blocks;
    // Each shell line is the `sqloutbox` executable with its arguments; this repository's CLI plays it.
    const lines = commands!.code
      .trim()
      .split("\n")
      .map((l) => l.split(" "));
    expect(lines.map((l) => l.slice(0, 2).join(" "))).toEqual(["sqloutbox runservice", "sqloutbox status"]);

    const byCommands = async () => {
      const { project, remote, env } = await startProject(blocks);
      const drain = Bun.spawn(["bun", BIN, ...lines[0]!.slice(1)], {
        cwd: project,
        env: cleanEnv(env),
        stdout: "pipe",
        stderr: "pipe",
      });
      try {
        await captured(remote);
        const status = await run(lines[1]!.slice(1), { cwd: project, env });
        expect(status.code).toBe(0);
        expect(status.stdout).toMatch(/^app shop: drain running \(pid \d+\) on /);
        expect(status.stdout).toContain("2 namespace(s), 0 pending, 0 stuck, 0 held, 0 dead letter(s)");
      } finally {
        drain.kill("SIGTERM");
      }
      const log = await new Response(drain.stderr).text();
      expect({ code: await drain.exited, problems: log.split("\n").filter((l) => /\[(warn|error)\]/.test(l)) }).toEqual(
        { code: 0, problems: [] },
      );
    };

    const inProcess = async () => {
      const { project, remote, env } = await startProject(blocks);
      fs.writeFileSync(path.join(project, "drain.ts"), snippet!.code);
      const drain = Bun.spawn(["bun", "drain.ts"], {
        cwd: project,
        env: cleanEnv(env),
        stdout: "pipe",
        stderr: "pipe",
      });
      try {
        await captured(remote);
      } finally {
        drain.kill("SIGTERM");
      }
      expect(await drain.exited).toBe(0);
      const output = (await new Response(drain.stdout).text()) + (await new Response(drain.stderr).text());
      expect(output).toContain("drain: started");
      expect(output).not.toContain("Error");
    };

    await Promise.all([byCommands(), inProcess()]);
  }, 40_000);
});
