// The README's Quick start, run exactly as written: its outbox.toml, its producer snippet and its
// in-process drain snippet, against a fresh database on the local PostgreSQL.
import { afterAll, beforeAll, expect, test } from "bun:test";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { cleanEnv, REPO, run } from "./support/cli.ts";
import { createPgDb, type ServerDb } from "./support/server-db.ts";
import { describeSlow, SLOW } from "./support/slow.ts";
import { waitFor } from "./support/wait.ts";

/** The fenced code blocks of the README section `heading`, in order, with their language. */
function codeBlocks(heading: string): Array<{ lang: string; code: string }> {
  const readme = fs.readFileSync(path.join(REPO, "README.md"), "utf8");
  const start = readme.indexOf(`\n## ${heading}\n`);
  const end = readme.indexOf("\n## ", start + 1);
  const section = readme.slice(start, end);
  return [...section.matchAll(/```(\w+)\n([\s\S]*?)```/g)].map((m) => ({ lang: m[1]!, code: m[2]! }));
}

let project: string;
let pg: ServerDb;

beforeAll(async () => {
  if (!SLOW) return;
  pg = await createPgDb("sqloutbox_qs");
  await pg.sql.unsafe("CREATE TABLE orders (id integer PRIMARY KEY, total double precision)");
  await pg.sql.unsafe("CREATE TABLE payments (id integer PRIMARY KEY, order_id integer, state text)");
  // A temp project where "sqloutbox" resolves to this repository, as after `bun add sqloutbox`.
  project = fs.mkdtempSync(path.join(os.tmpdir(), "sqloutbox-quickstart-"));
  fs.mkdirSync(path.join(project, "node_modules"));
  fs.symlinkSync(REPO, path.join(project, "node_modules", "sqloutbox"));
  fs.writeFileSync(path.join(project, "package.json"), JSON.stringify({ name: "app", type: "module", private: true }));
});
afterAll(async () => {
  if (!SLOW) return;
  fs.rmSync(project, { recursive: true, force: true });
  await pg.drop();
});

// The README's outbox.toml keeps the default table_max_wait (6 s) and its three rows stay below the
// flush threshold, so the drain waits that long before it sends them.
describeSlow("README Quick start", "run it as written, waiting out the default table_max_wait of 6 s", () => {
  test("its outbox.toml, producer and in-process drain deliver to PostgreSQL; SIGTERM ends the drain with exit 0", async () => {
    const blocks = codeBlocks("Quick start");
    expect(blocks.map((b) => b.lang)).toEqual(["toml", "ts", "sh", "ts"]);
    const [toml, producer, commands, drain] = blocks;
    fs.writeFileSync(path.join(project, "outbox.toml"), toml!.code);
    fs.writeFileSync(path.join(project, "produce.ts"), producer!.code);
    fs.writeFileSync(path.join(project, "drain.ts"), drain!.code);
    const env = { DATABASE_URL: pg.url };

    const produced = await run(["produce.ts"], { cmd: ["bun"], cwd: project, env });
    expect(produced.stderr).toBe("");
    expect(produced.code).toBe(0);

    // The snippet's commands are valid as written (status reads the queue the producer wrote).
    expect(commands!.code).toContain("sqloutbox status --config outbox.toml");
    const status = await run(["status", "--config", "outbox.toml", "--json"], { cwd: project, env });
    expect(status.code).toBe(0);
    expect(JSON.parse(status.stdout).totals.depth).toBe(3);

    const proc = Bun.spawn(["bun", "drain.ts"], { cwd: project, env: cleanEnv(env), stdout: "pipe", stderr: "pipe" });
    let rows: Array<{ id: number; state: string | null }> = [];
    try {
      await waitFor(async () => {
        rows = await pg.sql`SELECT p.id, p.state FROM payments p JOIN orders o ON o.id = p.order_id`;
        return rows.length === 1 && rows[0]!.state === "captured";
      }, "the captured payment on PostgreSQL", 20_000);
    } finally {
      proc.kill("SIGTERM");
    }
    expect(await proc.exited).toBe(0);
    expect(rows).toEqual([{ id: 7, state: "captured" }]);
    const stdout = await new Response(proc.stdout).text();
    expect(stdout).toContain("drain: started");
    expect(stdout + (await new Response(proc.stderr).text())).not.toContain("Error");
  }, 30_000);
});
