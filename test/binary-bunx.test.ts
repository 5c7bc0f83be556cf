// The package's `bin` through bunx: pack this repo, install the tarball into a temp project,
// run `bunx sqloutbox`. Dependencies come from Bun's cache or the registry.
import { afterAll, expect, test } from "bun:test";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import pkg from "../package.json" with { type: "json" };
import { REPO, run } from "./support/cli.ts";
import { seed } from "./support/queue.ts";
import { describeSlow } from "./support/slow.ts";

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "sqloutbox-bunx-"));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

describeSlow("bunx", "pack the package and install it into a project", () => {
  test("bunx sqloutbox works from the packed tarball installed into a project", async () => {
    const pack = await run(["pm", "pack", "--destination", tmp, "--quiet"], { cmd: ["bun"], cwd: REPO });
    expect(pack.code).toBe(0);
    const tarball = path.join(tmp, `sqloutbox-${pkg.version}.tgz`);
    expect(fs.existsSync(tarball)).toBe(true);

    const project = path.join(tmp, "project");
    fs.mkdirSync(project);
    fs.writeFileSync(path.join(project, "package.json"), JSON.stringify({ name: "consumer", private: true }));
    const add = await run(["add", tarball], { cmd: ["bun"], cwd: project });
    expect(add.stderr).not.toContain("error:");
    expect(add.code).toBe(0);

    const version = await run(["sqloutbox", "--version"], { cmd: ["bunx"], cwd: project });
    expect(version).toEqual({ code: 0, stdout: `${pkg.version}\n`, stderr: "" });

    const dbDir = path.join(project, "data");
    seed(dbDir, "orders", 2);
    const status = await run(["sqloutbox", "status", "--db-dir", dbDir, "--json"], { cmd: ["bunx"], cwd: project });
    expect(status.code).toBe(0);
    expect(JSON.parse(status.stdout).totals.depth).toBe(2);
  }, 120_000);
});
