// init scaffolds the programmatic path: the files type-check against this package, and the
// next steps it prints, run exactly as printed, deliver into its example target.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import pkg from "../package.json" with { type: "json" };
import { closeSharedOutboxes } from "../src/outbox/middleware.ts";
import { cleanEnv, REPO, run, runInProcess } from "./support/cli.ts";
import { hashTree } from "./support/dir-hash.ts";
import { openRemote } from "./support/remote.ts";
import { makeTempDir } from "./support/tmp.ts";
import { waitFor } from "./support/wait.ts";

const projectDir = makeTempDir("sqloutbox-init-");
const project = projectDir.path;
let scaffold: string;

beforeAll(() => {
  // A temp project where "sqloutbox" resolves to this repository, as after `bun add sqloutbox`.
  fs.mkdirSync(path.join(project, "node_modules"));
  fs.symlinkSync(REPO, path.join(project, "node_modules", "sqloutbox"));
  // The package's bin, as `bun add` links it: what the printed `bunx sqloutbox …` lines run.
  fs.mkdirSync(path.join(project, "node_modules", ".bin"));
  fs.symlinkSync(path.join(REPO, "src", "cli", "bin.ts"), path.join(project, "node_modules", ".bin", "sqloutbox"));
  addTypeCheckingTools(project);
  fs.writeFileSync(path.join(project, "package.json"), JSON.stringify({ name: "app", type: "module", private: true }));
  scaffold = path.join(project, "outbox");
});
/**
 * What the printed `bun add -d @types/bun typescript` leaves in `project`, taken from this
 * repository's node_modules (the tests do not download): the types, the compiler and its bin.
 */
function addTypeCheckingTools(project: string): void {
  const modules = path.join(project, "node_modules");
  fs.mkdirSync(path.join(modules, ".bin"), { recursive: true });
  fs.symlinkSync(path.join(REPO, "node_modules", "@types"), path.join(modules, "@types"));
  fs.symlinkSync(path.join(REPO, "node_modules", "typescript"), path.join(modules, "typescript"));
  fs.symlinkSync(path.join(REPO, "node_modules", "typescript", "bin", "tsc"), path.join(modules, ".bin", "tsc"));
}

afterAll(() => {
  closeSharedOutboxes();
  projectDir.cleanup();
});

describe("init", () => {
  test("writes the config module, the runner, an outbox.toml, a producer, a tsconfig and the example target into ./outbox and prints next steps", async () => {
    const r = await runInProcess(["init"], { cwd: project });
    expect(r.code).toBe(0);
    expect(r.stdout).toMatchInlineSnapshot(`
      "created outbox/outbox.config.ts  typed config (defineConfig)
      created outbox/run.ts            the drain runner (SIGTERM/SIGINT/SIGHUP stop cleanly)
      created outbox/outbox.toml       the same config for \`sqloutbox runservice\`
      created outbox/produce.ts        an example producer: an order and its payment
      created outbox/tsconfig.json     type-checking for the scaffold (needs @types/bun and typescript)
      created outbox/data/remote.db    the example target: SQLite, with tables orders and payments

      Next steps:
        1. Try it as generated (the target is a local SQLite file; nothing else to set up):
             bun outbox/produce.ts                                  # queues an order and its payment in outbox/data/queue
             bun outbox/run.ts                                      # the drain: delivers them into outbox/data/remote.db; Ctrl-C stops it
             bunx sqloutbox runservice --config outbox/outbox.toml  # or the same drain, from outbox.toml
             bunx sqloutbox status --config outbox/outbox.toml      # what is pending, delivered, held
             bunx tsc -p outbox/tsconfig.json                       # type-checks the scaffold against the package
        2. Make it yours: your tables, writer and connection in outbox/outbox.config.ts (and outbox/outbox.toml);
           the tables must exist on the target. Producers: new SQLMiddleware({ dbDir }).push(table, sql, args).
      "
    `);
    expect(fs.readdirSync(scaffold).sort()).toEqual([
      "data",
      "outbox.config.ts",
      "outbox.toml",
      "produce.ts",
      "run.ts",
      "tsconfig.json",
    ]);
    expect(fs.readdirSync(path.join(scaffold, "data"))).toEqual(["remote.db"]);
  });

  test("where the package is not installed yet, the first step adds it: the tarball line names the file `bun pm pack` leaves in this checkout", async () => {
    const bare = makeTempDir("sqloutbox-init-bare-");
    try {
      const r = await runInProcess(["init"], { cwd: bare.path });
      expect(r.code).toBe(0);
      expect(r.stdout).toContain(`Next steps:
  1. Add the package to this project. It is not on npm yet: pack it from this checkout, then add the tarball:
       (cd ${REPO} && bun pm pack)
       bun add ${path.join(REPO, `sqloutbox-${pkg.version}.tgz`)}
  2. Add what type-checking the scaffold needs to this project: bun add -d @types/bun typescript
  3. Try it as generated`);
      // "sqloutbox" on npm is not this package: init never tells anyone to add it by that name.
      expect(r.stdout).not.toContain("bun add sqloutbox");
    } finally {
      bare.cleanup();
    }
  });

  test("where the type-checking tools are missing, a step adds them: without them the scaffold does not type-check, after them the printed bunx tsc line passes", async () => {
    const other = makeTempDir("sqloutbox-init-types-");
    try {
      // The package installed, nothing else: a new project after `bun add sqloutbox`.
      fs.mkdirSync(path.join(other.path, "node_modules"));
      fs.symlinkSync(REPO, path.join(other.path, "node_modules", "sqloutbox"));
      fs.writeFileSync(path.join(other.path, "package.json"), JSON.stringify({ name: "app", private: true }));
      const r = await runInProcess(["init"], { cwd: other.path });
      expect(r.code).toBe(0);
      expect(r.stdout).toContain(`Next steps:
  1. Add what type-checking the scaffold needs to this project: bun add -d @types/bun typescript
  2. Try it as generated`);
      const tsconfig = path.join("outbox", "tsconfig.json");
      const without = await run(["-p", tsconfig], {
        cmd: [path.join(REPO, "node_modules", ".bin", "tsc")],
        cwd: other.path,
      });
      expect(without.code).not.toBe(0);
      expect(without.stdout).toContain("TS2688: Cannot find type definition file for 'bun'");

      addTypeCheckingTools(other.path);
      const line = r.stdout.match(/^ +(bunx tsc \S.*?) +# /m)![1]!;
      expect(line).toBe(`bunx tsc -p ${tsconfig}`);
      const argv = line.split(" ");
      const checked = await run(argv.slice(1), { cmd: [argv[0]!], cwd: other.path });
      expect(checked).toEqual({ code: 0, stdout: "", stderr: "" });
    } finally {
      other.cleanup();
    }
  });

  test("refuses to overwrite: exit 1 naming the file, nothing changed", async () => {
    // Only run.ts exists (the user's own): nothing else may be written either.
    for (const name of ["outbox.config.ts", "outbox.toml", "produce.ts", "tsconfig.json", "data"])
      fs.rmSync(path.join(scaffold, name), { recursive: true });
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
    expect(r.stderr).toBe(
      `[error] cannot write the scaffold into ${path.join(blocker, "outbox")}: ENOTDIR: not a directory, mkdir '${path.join(blocker, "outbox")}'\n`,
    );
    fs.rmSync(blocker);
  });

  test("the scaffold type-checks against the package", async () => {
    const r = await run(["-p", path.join(scaffold, "tsconfig.json")], {
      cmd: [path.join(REPO, "node_modules", ".bin", "tsc")],
      cwd: project,
    });
    expect(r.stdout + r.stderr).toBe("");
    expect(r.code).toBe(0);
  });

  test("the outbox.toml alternative is valid for the CLI", async () => {
    const r = await runInProcess(["status", "--config", path.join(scaffold, "outbox.toml")], { cwd: project });
    expect(r.code).toBe(0);
  });

  test("its next steps, run exactly as printed, deliver into the example target; the drains stop with exit 0 on SIGTERM", async () => {
    fs.rmSync(scaffold, { recursive: true });
    const init = await runInProcess(["init"], { cwd: project });
    expect(init.code).toBe(0);
    // Every command line of the steps, in order: `  bun outbox/produce.ts   # what it does`.
    const commands = [...init.stdout.matchAll(/^ +(bunx? \S.*?) +# /gm)].map((m) => m[1]!);
    expect(commands.map((c) => c.split(" ").slice(0, 3).join(" "))).toEqual([
      "bun outbox/produce.ts",
      "bun outbox/run.ts",
      "bunx sqloutbox runservice",
      "bunx sqloutbox status",
      "bunx tsc -p",
    ]);
    const remote = await openRemote("sqlite", { path: path.join(scaffold, "data", "remote.db") });
    const landed = async () => [await remote.count("orders"), await remote.count("payments")];
    for (const line of commands) {
      const argv = line.split(" ");
      const isDrain = line.endsWith("run.ts") || argv.includes("runservice");
      if (!isDrain) {
        const r = await run(argv.slice(1), { cmd: [argv[0]!], cwd: project });
        expect({ line, code: r.code, stderr: r.stderr }).toEqual({ line, code: 0, stderr: "" });
        if (argv.includes("status"))
          expect(r.stdout).toContain("2 namespace(s), 0 pending, 0 stuck, 0 held, 0 dead letter(s)");
        continue;
      }
      // A drain: runs until SIGTERM. The first one delivers what produce.ts queued; the second finds nothing left.
      const drain = Bun.spawn(argv, { cwd: project, env: cleanEnv(), stdout: "pipe", stderr: "pipe" });
      try {
        await waitFor(async () => (await landed()).join() === "1,1", `${line} to deliver the order and its payment`);
        await waitFor(
          async () =>
            (await run(["status", "--config", "outbox/outbox.toml", "--json"], { cwd: project })).stdout.match(
              /"pid": \d+/,
            ) !== null,
          `${line} to hold the lock`,
        );
      } finally {
        drain.kill("SIGTERM");
      }
      const output = (await new Response(drain.stdout).text()) + (await new Response(drain.stderr).text());
      expect({
        line,
        code: await drain.exited,
        errors: output.split("\n").filter((l) => /error|warn/i.test(l)),
      }).toEqual({ line, code: 0, errors: [] });
    }
    expect(await remote.rows("SELECT o.total, p.state FROM orders o JOIN payments p ON p.order_id = o.id")).toEqual([
      [99.9, "captured"],
    ]);
    await remote.done();
  }, 30_000);
});
