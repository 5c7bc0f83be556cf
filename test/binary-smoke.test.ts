// The compiled single binary: built once into a temp dir, then --version, status, verify, init
// (templates embedded), a short runservice draining into a sqlite target, and a custom writer
// that imports packages from its project's node_modules.
import { afterAll, beforeAll, expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import { buildBinary } from "../build.ts";
import pkg from "../package.json" with { type: "json" };
import { cleanupsAfterEach } from "./support/cleanups.ts";
import { cleanEnv, REPO, run } from "./support/cli.ts";
import { hashTree } from "./support/dir-hash.ts";
import { FROM_CONFIG_ENV, reportedQueueDir, writeDotenvProject } from "./support/dotenv-project.ts";
import { startOtlpReceiver } from "./support/otlp-receiver.ts";
import { openQueue, seed } from "./support/queue.ts";
import { openRemote } from "./support/remote.ts";
import { describeSlow, SLOW } from "./support/slow.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();
let tmp: TempDir;
let binary: string;
const sh = (args: string[], cwd?: string, env?: Record<string, string | undefined>) =>
  run(args, { cmd: [binary], cwd: cwd ?? tmp.path, env });

// Outside the describe, so a skipped run lists only the tests (a skipped describe's hooks show up as unnamed skips).
beforeAll(async () => {
  if (!SLOW) return;
  tmp = makeTempDir("sqloutbox-bin-");
  binary = path.join(tmp.path, "bin", "sqloutbox");
  await buildBinary(binary);
}, 120_000);
afterAll(() => {
  tmp?.cleanup();
});

describeSlow("the compiled binary", "build the single binary and run it", () => {
  test("--version prints the baked-in version", async () => {
    expect(await sh(["--version"])).toEqual({ code: 0, stdout: `${pkg.version}\n`, stderr: "" });
  });

  test("status and verify read a db_dir without changing it", async () => {
    const dbDir = tmp.file("inspect");
    seed(dbDir, "orders", 3);
    const before = hashTree(dbDir);
    const status = await sh(["status", "--db-dir", dbDir, "--json"]);
    expect(status.code).toBe(0);
    expect(JSON.parse(status.stdout).totals).toEqual({
      namespaces: 1,
      depth: 3,
      stuck: 0,
      held: 0,
      heldLanes: 0,
      deadLetters: 0,
      targetsDown: 0,
    });
    const verify = await sh(["verify", "--db-dir", dbDir]);
    expect(verify.code).toBe(0);
    expect(verify.stdout).toContain("ok: 1 file(s) verified, no problems");
    expect(hashTree(dbDir)).toEqual(before);
  });

  test("init writes the embedded templates and the example target", async () => {
    const r = await sh(["init", "scaffold"]);
    expect(r.code).toBe(0);
    expect(fs.readFileSync(path.join(tmp.path, "scaffold", "outbox.config.ts"), "utf8")).toContain(
      'import { defineConfig } from "sqloutbox"',
    );
    expect(fs.readFileSync(path.join(tmp.path, "scaffold", "produce.ts"), "utf8")).toContain(
      'import { SQLMiddleware } from "sqloutbox"',
    );
    // The example target, with the tables the scaffold delivers into.
    const remote = await openRemote("sqlite", { path: path.join(tmp.path, "scaffold", "data", "remote.db"), cleanups });
    expect([await remote.count("orders"), await remote.count("payments")]).toEqual([0, 0]);
  });

  test("ignores a .env and a bunfig.toml in the working directory", async () => {
    const cwd = tmp.file("hostile");
    fs.mkdirSync(cwd);
    fs.writeFileSync(path.join(cwd, ".env"), "LOG_FORMAT=json\n");
    fs.writeFileSync(
      path.join(cwd, "preload.ts"),
      `require("node:fs").writeFileSync(${JSON.stringify(path.join(cwd, "PRELOADED"))}, "x");\n`,
    );
    fs.writeFileSync(path.join(cwd, "bunfig.toml"), 'preload = ["./preload.ts"]\n');
    const r = await sh(["status", "--db-dir", "missing"], cwd);
    expect(r.code).toBe(1);
    expect(r.stderr).not.toContain('{"time"'); // the .env's LOG_FORMAT=json was not loaded
    expect(fs.existsSync(path.join(cwd, "PRELOADED"))).toBe(false);
    // A ${VAR} comes from the .env beside the config, never the working directory's (as with bunx: cli-dotenv.test.ts).
    const config = writeDotenvProject(cwd);
    const status = await sh(["status", "--config", config, "--json"], cwd);
    expect(reportedQueueDir(status.stdout)).toBe(FROM_CONFIG_ENV);
  });

  test("runservice drains into a sqlite target and exits 0 on SIGTERM", async () => {
    const dir = tmp.file("drain");
    seed(path.join(dir, "queue"), "orders", 30);
    const remote = await openRemote("sqlite", { path: path.join(dir, "remote.db"), cleanups });
    await remote.exec("CREATE TABLE orders (id INTEGER PRIMARY KEY)");
    fs.writeFileSync(
      path.join(dir, "outbox.toml"),
      `[app.a]\ndb_dir = "queue"\nflush_interval = 0.05\ntable_flush_threshold = 1\n[app.a.db.r]\nwriter = "sqlite"\ntables = ["orders"]\n[app.a.db.r.connection]\npath = "remote.db"\n`,
    );
    const proc = Bun.spawn([binary, "runservice"], { cwd: dir, env: cleanEnv(), stdout: "pipe", stderr: "pipe" });
    try {
      await waitFor(async () => (await remote.count("orders")) >= 30, "the 30 orders in remote.db");
    } finally {
      proc.kill("SIGTERM");
    }
    expect(await proc.exited).toBe(0);
    expect(await remote.count("orders")).toBe(30);
  }, 30_000);

  test("runservice exports delivery spans in the producer's trace over OTLP/HTTP (JSON from [tracing], protobuf from OTEL_*)", async () => {
    const rx = startOtlpReceiver();
    try {
      const dir = tmp.file("tracing");
      const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
      fs.mkdirSync(path.join(dir, "queue"), { recursive: true });
      const queue = openQueue(path.join(dir, "queue"), "orders");
      for (let i = 1; i <= 3; i++)
        queue.enqueue("INSERT INTO orders (id) VALUES (?)", JSON.stringify([i]), "test", {
          traceparent,
          tracestate: null,
        });
      queue.close();
      const remote = await openRemote("sqlite", { path: path.join(dir, "remote.db"), cleanups });
      await remote.exec("CREATE TABLE orders (id INTEGER PRIMARY KEY)");
      const toml = `[tracing]\nendpoint = "${rx.url}"\nprotocol = "http/json"\nservice_name = "shop-drain"\n[app.a]\ndb_dir = "queue"\nflush_interval = 0.05\ntable_flush_threshold = 1\n[app.a.db.r]\nwriter = "sqlite"\ntables = ["orders"]\n[app.a.db.r.connection]\npath = "remote.db"\n`;
      fs.writeFileSync(path.join(dir, "outbox.toml"), toml);
      const proc = Bun.spawn([binary, "runservice"], { cwd: dir, env: cleanEnv(), stdout: "pipe", stderr: "pipe" });
      try {
        await waitFor(async () => (await remote.count("orders")) >= 3, "the 3 orders in remote.db");
      } finally {
        proc.kill("SIGTERM");
      }
      expect(await proc.exited).toBe(0);
      // Stopping flushes: the spans are there once it exited.
      const deliveries = rx.spans.filter((s) => s.name === "deliver orders");
      expect(deliveries.map((s) => [s.traceId, s.parentSpanId])).toEqual(
        Array(3).fill(["4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"]),
      );
      expect(rx.spans.find((s) => s.name === "BATCH a.r")!.resource["service.name"]).toBe("shop-drain");

      // The standard variables alone, in the protocol they default to (protobuf: counted, not decoded here).
      fs.writeFileSync(path.join(dir, "outbox.toml"), toml.replace(/^\[tracing\][^[]*/, ""));
      const more = openQueue(path.join(dir, "queue"), "orders");
      more.enqueue("INSERT INTO orders (id) VALUES (?)", JSON.stringify([4]), "test", {
        traceparent,
        tracestate: null,
      });
      more.close();
      const before = rx.requests.length;
      const env = {
        ...cleanEnv(),
        OTEL_EXPORTER_OTLP_ENDPOINT: rx.url,
        OTEL_EXPORTER_OTLP_HEADERS: "x-api-key=s3cret",
      };
      const second = Bun.spawn([binary, "runservice"], { cwd: dir, env, stdout: "pipe", stderr: "pipe" });
      try {
        await waitFor(async () => (await remote.count("orders")) >= 4, "the 4th order in remote.db");
      } finally {
        second.kill("SIGTERM");
      }
      expect(await second.exited).toBe(0);
      const sent = rx.requests.slice(before);
      expect(sent.length).toBeGreaterThan(0);
      expect(sent.every((r) => r.contentType === "application/x-protobuf" && r.headers["x-api-key"] === "s3cret")).toBe(
        true,
      );
    } finally {
      await rx.stop();
    }
  }, 60_000);

  test("a writer_class module imports packages from its project's node_modules, and its WriteError({ misconfigured }) is recognised", async () => {
    // A project as after `bun add sqloutbox`: the writer imports the package (another copy than the
    // one compiled into the binary) and smol-toml, both resolved through their package.json exports.
    const dir = tmp.file("custom-writer");
    fs.mkdirSync(path.join(dir, "writers"), { recursive: true });
    fs.mkdirSync(path.join(dir, "node_modules"));
    fs.symlinkSync(REPO, path.join(dir, "node_modules", "sqloutbox"));
    fs.symlinkSync(path.join(REPO, "node_modules", "smol-toml"), path.join(dir, "node_modules", "smol-toml"));
    fs.writeFileSync(
      path.join(dir, "writers", "jsonl.ts"),
      `import fs from "node:fs";
import { WriteError, type Statement, type WriteResult } from "sqloutbox";
import { stringify } from "smol-toml";

export class JsonlWriter {
  readonly dialect = "sqlite";
  constructor(private readonly connection: { path: string; refuse?: boolean }) {}
  async writeBatch(stmts: Statement[]): Promise<WriteResult[]> {
    if (this.connection.refuse) throw new WriteError("the token was refused", undefined, { misconfigured: true });
    for (const s of stmts) fs.appendFileSync(this.connection.path, JSON.stringify({ seq: s.seq, toml: stringify({ sql: s.sql }) }) + "\\n");
    return stmts.map(() => ({ ok: true, rowsAffected: 1 }));
  }
}
`,
    );
    const app = (name: string, connection: string) =>
      `[app.${name}]\ndb_dir = "${name}"\nflush_interval = 0.05\ntable_flush_threshold = 1\n[app.${name}.db.out]\nwriter_class = "./writers/jsonl.ts:JsonlWriter"\ntables = ["orders"]\nledger = false\n[app.${name}.db.out.connection]\n${connection}\n`;
    fs.writeFileSync(
      path.join(dir, "outbox.toml"),
      app("good", 'path = "good.jsonl"') + app("refused", 'path = "refused.jsonl"\nrefuse = true'),
    );
    seed(path.join(dir, "good"), "orders", 5);
    seed(path.join(dir, "refused"), "orders", 1);

    const proc = Bun.spawn([binary, "runservice"], { cwd: dir, env: cleanEnv(), stdout: "pipe", stderr: "pipe" });
    let targets: Array<{ target: string; state: string; failures: number }> = [];
    try {
      await waitFor(async () => {
        if (proc.exitCode !== null) return true; // it gave up: what it said is asserted below
        const status = await sh(["status", "--json"], dir);
        targets = status.code === 1 || status.code === 0 ? (JSON.parse(status.stdout).targets ?? []) : [];
        return (
          fs.existsSync(path.join(dir, "good.jsonl")) &&
          fs.readFileSync(path.join(dir, "good.jsonl"), "utf8").split("\n").length === 6 &&
          targets.some((t) => t.target === "refused.out" && t.failures > 0)
        );
      }, "the good target's 5 rows in good.jsonl and the refused target's state");
    } finally {
      proc.kill("SIGTERM");
    }
    const stderr = await new Response(proc.stderr).text();
    expect({ code: await proc.exited, stderr }).toMatchObject({
      code: 0,
      stderr: expect.stringContaining("drain: target refused.out is misconfigured"),
    });
    expect(stderr).not.toContain("Cannot find package");
    expect(targets.map((t) => [t.target, t.state]).sort()).toEqual([
      ["good.out", "ok"],
      ["refused.out", "misconfigured"],
    ]);
    expect(fs.readFileSync(path.join(dir, "good.jsonl"), "utf8")).toContain('"toml":"sql = ');
  }, 30_000);
});
