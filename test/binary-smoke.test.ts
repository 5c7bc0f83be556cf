// The compiled single binary: built once into a temp dir, then --version, status, verify, init
// (templates embedded) and a short runservice draining into a sqlite target.
import { Database } from "bun:sqlite";
import { afterAll, beforeAll, expect, test } from "bun:test";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { buildBinary } from "../build.ts";
import pkg from "../package.json" with { type: "json" };
import { cleanEnv, run } from "./support/cli.ts";
import { hashTree } from "./support/dir-hash.ts";
import { seed } from "./support/queue.ts";
import { countRows } from "./support/remote.ts";
import { describeSlow, SLOW } from "./support/slow.ts";
import { waitFor } from "./support/wait.ts";

let tmp: string;
let binary: string;
const sh = (args: string[], cwd?: string, env?: Record<string, string | undefined>) => run(args, { cmd: [binary], cwd: cwd ?? tmp, env });

// Outside the describe, so a skipped run lists only the tests (a skipped describe's hooks show up as unnamed skips).
beforeAll(async () => {
  if (!SLOW) return;
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), "sqloutbox-bin-"));
  binary = path.join(tmp, "bin", "sqloutbox");
  await buildBinary(binary);
}, 120_000);
afterAll(() => {
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

describeSlow("the compiled binary", "build the single binary and run it", () => {
  test("--version prints the baked-in version", async () => {
    expect(await sh(["--version"])).toEqual({ code: 0, stdout: `${pkg.version}\n`, stderr: "" });
  });

  test("status and verify read a db_dir without changing it", async () => {
    const dbDir = path.join(tmp, "inspect");
    seed(dbDir, "orders", 3);
    const before = hashTree(dbDir);
    const status = await sh(["status", "--db-dir", dbDir, "--json"]);
    expect(status.code).toBe(0);
    expect(JSON.parse(status.stdout).totals).toEqual({ namespaces: 1, depth: 3, stuck: 0, held: 0, deadLetters: 0, targetsDown: 0 });
    const verify = await sh(["verify", "--db-dir", dbDir]);
    expect(verify.code).toBe(0);
    expect(verify.stdout).toContain("ok: 1 file(s) verified, no problems");
    expect(hashTree(dbDir)).toEqual(before);
  });

  test("init writes the embedded templates", async () => {
    const r = await sh(["init", "scaffold"]);
    expect(r.code).toBe(0);
    expect(fs.readFileSync(path.join(tmp, "scaffold", "outbox.config.ts"), "utf8")).toContain('import { defineConfig } from "sqloutbox"');
  });

  test("ignores a .env and a bunfig.toml in the working directory", async () => {
    const cwd = path.join(tmp, "hostile");
    fs.mkdirSync(cwd);
    fs.writeFileSync(path.join(cwd, ".env"), "LOG_FORMAT=json\n");
    fs.writeFileSync(path.join(cwd, "preload.ts"), `require("node:fs").writeFileSync(${JSON.stringify(path.join(cwd, "PRELOADED"))}, "x");\n`);
    fs.writeFileSync(path.join(cwd, "bunfig.toml"), 'preload = ["./preload.ts"]\n');
    const r = await sh(["status", "--db-dir", "missing"], cwd);
    expect(r.code).toBe(1);
    expect(r.stderr).not.toContain('{"time"'); // the .env's LOG_FORMAT=json was not loaded
    expect(fs.existsSync(path.join(cwd, "PRELOADED"))).toBe(false);
  });

  test("runservice drains into a sqlite target and exits 0 on SIGTERM", async () => {
    const dir = path.join(tmp, "drain");
    seed(path.join(dir, "queue"), "orders", 30);
    const remote = new Database(path.join(dir, "remote.db"));
    remote.run("CREATE TABLE orders (id INTEGER PRIMARY KEY)");
    remote.close();
    fs.writeFileSync(
      path.join(dir, "outbox.toml"),
      `[app.a]\ndb_dir = "queue"\nflush_interval = 0.05\ntable_flush_threshold = 1\n[app.a.db.r]\nwriter = "sqlite"\ntables = ["orders"]\n[app.a.db.r.connection]\npath = "remote.db"\n`,
    );
    const proc = Bun.spawn([binary, "runservice"], { cwd: dir, env: cleanEnv(), stdout: "pipe", stderr: "pipe" });
    try {
      await waitFor(() => countRows(path.join(dir, "remote.db"), "orders") >= 30, "the 30 orders in remote.db");
    } finally {
      proc.kill("SIGTERM");
    }
    expect(await proc.exited).toBe(0);
    expect(countRows(path.join(dir, "remote.db"), "orders")).toBe(30);
  }, 30_000);
});
