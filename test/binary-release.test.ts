// `bun run build --release`: every release binary is built once into a temp dir by the real
// command; the linux ones run --version and status against a real queue (musl through musl's
// loader, arm64 under qemu), the darwin one is checked as a file. Slow (cross-compiles, a first
// run downloads each target's Bun runtime from the npm registry), so it runs only with
// SQLOUTBOX_SLOW_TESTS=1, which .ci/run sets.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { RELEASE_TARGETS } from "../build.ts";
import pkg from "../package.json" with { type: "json" };
import { SQLMiddleware } from "../src/outbox/middleware.ts";
import { REPO, run } from "./support/cli.ts";
import { type Launcher, NATIVE, muslLauncher, qemuArm64Launcher } from "./support/foreign-binary.ts";
import { describeSlow, SLOW } from "./support/slow.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";

let tmp: TempDir;
let releaseDir: string;
let dbDir: string;

// Outside the describe, so a skipped run lists only the tests (a skipped describe's hooks show up as unnamed skips).
beforeAll(async () => {
  if (!SLOW) return;
  tmp = makeTempDir("sqloutbox-release-");
  releaseDir = tmp.file("release");
  const build = await run(["run", "build", "--release", releaseDir], { cmd: ["bun"], cwd: REPO });
  if (build.code !== 0) throw new Error(`bun run build --release failed (${build.code}):\n${build.stderr}`);
  dbDir = tmp.file("queue");
  const producer = new SQLMiddleware({ dbDir });
  producer.push("orders", "INSERT INTO orders (id) VALUES (?)", [1]);
  producer.push("orders", "INSERT INTO orders (id) VALUES (?)", [2]);
  producer.outbox("orders").close(); // the binaries read the file after this process let go of it
}, 240_000);
afterAll(() => tmp?.cleanup());

describeSlow("release binaries", "cross-compile them and run them under musl and qemu", () => {
  test("writes one binary per target and a SHA256SUMS that `sha256sum -c` accepts", async () => {
    const binaries = RELEASE_TARGETS.map((t) => `sqloutbox-${t.name}`);
    expect(fs.readdirSync(releaseDir).sort()).toEqual(["SHA256SUMS", ...binaries].sort());
    expect(binaries).toEqual([
      "sqloutbox-linux-x64",
      "sqloutbox-linux-x64-musl",
      "sqloutbox-linux-arm64",
      "sqloutbox-darwin-arm64",
    ]);
    const check = await run(["-c", "SHA256SUMS"], { cmd: ["sha256sum"], cwd: releaseDir });
    expect(check).toEqual({ code: 0, stdout: binaries.map((b) => `${b}: OK\n`).join(""), stderr: "" });
  });

  const runnable: Array<[string, () => Launcher]> = [
    ["linux-x64", () => NATIVE],
    ["linux-x64-musl", () => muslLauncher(tmp.file("musl-lib"))],
    ["linux-arm64", () => qemuArm64Launcher()],
  ];
  test.each(runnable)(
    "sqloutbox-%s prints the baked-in version and the status of a real queue",
    async (name, launcher) => {
      const { prefix, env } = launcher();
      const cmd = [...prefix, path.join(releaseDir, `sqloutbox-${name}`)];
      expect(await run(["--version"], { cmd, env, cwd: tmp.path })).toEqual({
        code: 0,
        stdout: `${pkg.version}\n`,
        stderr: "",
      });
      // --json: the stable contract, so a change to the table's layout does not break a test most runs skip.
      const status = await run(["status", "--db-dir", dbDir, "--json"], { cmd, env, cwd: tmp.path });
      expect(status.stderr).toBe("");
      expect(status.code).toBe(0);
      const report = JSON.parse(status.stdout);
      expect(report.namespaces.map((n: { namespace: string; depth: number }) => [n.namespace, n.depth])).toEqual([
        ["orders", 2],
      ]);
      expect(report.totals).toEqual({
        namespaces: 1,
        depth: 2,
        stuck: 0,
        held: 0,
        heldLanes: 0,
        deadLetters: 0,
        targetsDown: 0,
      });
    },
    60_000,
  );

  test("sqloutbox-darwin-arm64 is a signed Mach-O arm64 executable listed in SHA256SUMS with its hash", () => {
    const file = path.join(releaseDir, "sqloutbox-darwin-arm64");
    const bytes = fs.readFileSync(file);
    const header = Buffer.from(bytes.subarray(0, 64 * 1024));
    expect(header.readUInt32LE(0)).toBe(0xfeedfacf); // MH_MAGIC_64
    expect(header.readUInt32LE(4)).toBe(0x0100000c); // CPU_TYPE_ARM64
    expect(header.readUInt32LE(12)).toBe(2); // MH_EXECUTE
    // macOS on Apple silicon kills an unsigned executable, so the (ad-hoc) signature must be there.
    const commands: number[] = [];
    for (let i = 0, at = 32; i < header.readUInt32LE(16); i++, at += header.readUInt32LE(at + 4))
      commands.push(header.readUInt32LE(at));
    expect(commands).toContain(0x1d); // LC_CODE_SIGNATURE
    const sha256 = createHash("sha256").update(bytes).digest("hex");
    expect(fs.readFileSync(path.join(releaseDir, "SHA256SUMS"), "utf8")).toContain(
      `${sha256}  sqloutbox-darwin-arm64\n`,
    );
  });
});
