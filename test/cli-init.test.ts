// init scaffolds the programmatic path: the files type-check against this package and the
// runner drains into a sqlite target and stops cleanly on SIGTERM.
import { Database } from "bun:sqlite";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { SQLMiddleware, closeSharedOutboxes } from "../src/outbox/middleware.ts";
import { cleanEnv, REPO, run, runInProcess } from "./support/cli.ts";
import { hashTree } from "./support/dir-hash.ts";
import { countRows } from "./support/remote.ts";
import { waitFor } from "./support/wait.ts";

let project: string;
let scaffold: string;

beforeAll(() => {
  // A temp project where "sqloutbox" resolves to this repository, as after `bun add sqloutbox`.
  project = fs.mkdtempSync(path.join(os.tmpdir(), "sqloutbox-init-"));
  fs.mkdirSync(path.join(project, "node_modules"));
  fs.symlinkSync(REPO, path.join(project, "node_modules", "sqloutbox"));
  fs.symlinkSync(path.join(REPO, "node_modules", "@types"), path.join(project, "node_modules", "@types"));
  fs.writeFileSync(path.join(project, "package.json"), JSON.stringify({ name: "app", type: "module", private: true }));
  scaffold = path.join(project, "outbox");
});
afterAll(() => {
  closeSharedOutboxes();
  fs.rmSync(project, { recursive: true, force: true });
});

describe("init", () => {
  test("writes the config module, the runner, an outbox.toml and a tsconfig into ./outbox and prints next steps", async () => {
    const r = await runInProcess(["init"], { cwd: project });
    expect(r.code).toBe(0);
    expect(r.stdout).toMatchInlineSnapshot(`
      "created outbox/outbox.config.ts  typed config (defineConfig)
      created outbox/run.ts            the drain runner (SIGTERM/SIGINT/SIGHUP stop cleanly)
      created outbox/outbox.toml       the same config for \`sqloutbox runservice\`
      created outbox/tsconfig.json     type-checking for the scaffold (bunx tsc -p)

      Next steps:
        1. bun add sqloutbox                    (and bun add -d @types/bun typescript to type-check)
        2. edit outbox/outbox.config.ts: your tables (they must exist on the target), its writer and connection
        3. produce events: new SQLMiddleware({ dbDir: "outbox/data/queue" }).push("orders", "INSERT INTO orders (id) VALUES (?)", [1])
        4. run the drain:  bun outbox/run.ts
           or with TOML:   sqloutbox runservice --config outbox/outbox.toml
        5. watch it:       sqloutbox status --config outbox/outbox.toml
      "
    `);
    expect(fs.readdirSync(scaffold).sort()).toEqual(["outbox.config.ts", "outbox.toml", "run.ts", "tsconfig.json"]);
  });

  test("refuses to overwrite: exit 1 naming the file, nothing changed", async () => {
    // Only run.ts exists (the user's own): nothing else may be written either.
    for (const name of ["outbox.config.ts", "outbox.toml", "tsconfig.json"]) fs.rmSync(path.join(scaffold, name));
    fs.writeFileSync(path.join(scaffold, "run.ts"), "// mine\n");
    const before = hashTree(project);
    const r = await runInProcess(["init"], { cwd: project });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("refusing to overwrite ");
    expect(r.stderr).toContain(`${path.sep}outbox${path.sep}run.ts`);
    expect(hashTree(project)).toEqual(before);
    // Restore the scaffold for the next tests.
    fs.rmSync(scaffold, { recursive: true });
    expect((await runInProcess(["init", "outbox"], { cwd: project })).code).toBe(0);
  });

  test("a DIR that cannot be created is one error line naming it (no stack trace), exit 1, nothing written", async () => {
    const blocker = path.join(project, "not-a-dir");
    fs.writeFileSync(blocker, "");
    const r = await runInProcess(["init", path.join(blocker, "outbox")], { cwd: project });
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr).toBe(`[error] cannot write the scaffold into ${path.join(blocker, "outbox")}: ENOTDIR: not a directory, mkdir '${path.join(blocker, "outbox")}'\n`);
    fs.rmSync(blocker);
  });

  test("the scaffold type-checks against the package", async () => {
    const r = await run(["-p", path.join(scaffold, "tsconfig.json")], { cmd: [path.join(REPO, "node_modules", ".bin", "tsc")], cwd: project });
    expect(r.stdout + r.stderr).toBe("");
    expect(r.code).toBe(0);
  });

  test("the outbox.toml alternative is valid for the CLI", async () => {
    const r = await runInProcess(["status", "--config", path.join(scaffold, "outbox.toml")], { cwd: project });
    expect(r.code).toBe(0);
  });

  test("the runner drains into the sqlite target and exits 0 on SIGTERM", async () => {
    const data = path.join(scaffold, "data");
    fs.mkdirSync(data, { recursive: true });
    const remote = new Database(path.join(data, "remote.db"));
    remote.run("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)");
    remote.run("CREATE TABLE payments (id INTEGER PRIMARY KEY)");
    remote.close();
    const producer = new SQLMiddleware({ dbDir: path.join(data, "queue") });
    for (let i = 1; i <= 20; i++) producer.push("orders", "INSERT INTO orders (id, total) VALUES (?, ?)", [i, i * 2.5]);
    // 15 = the scaffold's table_flush_threshold: flushed on the next scan, not after table_max_wait.
    for (let i = 1; i <= 15; i++) producer.push("payments", "INSERT INTO payments (id) VALUES (?)", [i]);

    const runner = Bun.spawn(["bun", "run.ts"], { cwd: scaffold, env: cleanEnv(), stdout: "pipe", stderr: "pipe" });
    const delivered = () => countRows(path.join(data, "remote.db"), "orders") + countRows(path.join(data, "remote.db"), "payments");
    try {
      await waitFor(() => delivered() >= 35, "the runner to deliver all 35 rows");
    } finally {
      runner.kill("SIGTERM");
    }
    const code = await runner.exited;
    const output = (await new Response(runner.stdout).text()) + (await new Response(runner.stderr).text());
    expect({ code, output: output.includes("outbox drain running") }).toEqual({ code: 0, output: true });
    expect(countRows(path.join(data, "remote.db"), "orders")).toBe(20);
    expect(countRows(path.join(data, "remote.db"), "payments")).toBe(15);
  }, 30_000);
});
