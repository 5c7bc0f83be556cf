// The package as a release ships it: `bun publish --dry-run` packs what it should, and the
// README's install line (pack this repo, `bun add` the tarball into a project) gives a working
// `bunx sqloutbox`. Dependencies come from Bun's cache or the registry.
import { afterAll, expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import pkg from "../package.json" with { type: "json" };
import { REPO, run } from "./support/cli.ts";
import { FROM_CONFIG_ENV, reportedQueueDir, writeDotenvProject } from "./support/dotenv-project.ts";
import { seed } from "./support/queue.ts";
import { describeSlow } from "./support/slow.ts";
import { makeTempDir } from "./support/tmp.ts";

const tmp = makeTempDir("sqloutbox-bunx-");
afterAll(() => tmp.cleanup());

describeSlow("bunx", "pack the package and install it into a project", () => {
  test("bunx sqloutbox works from the packed tarball installed into a project", async () => {
    const pack = await run(["pm", "pack", "--destination", tmp.path, "--quiet"], { cmd: ["bun"], cwd: REPO });
    expect(pack.code).toBe(0);
    const tarball = tmp.file(`sqloutbox-${pkg.version}.tgz`);
    expect(fs.existsSync(tarball)).toBe(true);

    const project = tmp.file("project");
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

    // A ${VAR} comes from the .env beside the config, not from the project's .env, which Bun
    // would load into the environment of any `bun` it starts without --no-env-file.
    const config = writeDotenvProject(project);
    const fromConfig = await run(["sqloutbox", "status", "--config", config, "--json"], {
      cmd: ["bunx"],
      cwd: project,
    });
    expect(reportedQueueDir(fromConfig.stdout)).toBe(FROM_CONFIG_ENV);
  }, 120_000);

  test("bun publish --dry-run is clean: the license, README, declarations, bin and sources, nothing else", async () => {
    // A dry run still wants a token; it never reaches the registry (an unreachable one proves it).
    const r = await run(["publish", "--dry-run"], {
      cmd: ["bun"],
      cwd: REPO,
      env: { NPM_CONFIG_TOKEN: "dry-run", NPM_CONFIG_REGISTRY: "http://127.0.0.1:9/" },
    });
    expect({ code: r.code, stderr: r.stderr.split("\n").filter((l) => /warn|error/i.test(l)) }).toEqual({
      code: 0,
      stderr: [],
    });
    expect(r.stdout).toContain(`+ sqloutbox@${pkg.version} (dry-run)`);
    const packed = [...r.stdout.matchAll(/^packed \S+ (\S+)$/gm)].map((m) => m[1]!);
    expect(packed).toEqual(
      expect.arrayContaining([
        "LICENSE",
        "README.md",
        "package.json",
        "dist/types/index.d.ts",
        pkg.bin.sqloutbox.replace("./", ""),
        "src/index.ts",
        "etc/outbox.example.toml",
      ]),
    );
    expect(
      packed.filter(
        (f) => !/^(LICENSE|README\.md|package\.json|tsconfig\.json|src\/|dist\/types\/|docs\/|etc\/)/.test(f),
      ),
    ).toEqual([]);
    expect(packed.filter((f) => f.startsWith("dist/") && !f.startsWith("dist/types/"))).toEqual([]); // no binary
  }, 120_000);
});
