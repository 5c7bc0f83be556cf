// Types for consumers: pack this repo (prepack writes the declarations), unpack the tarball into a
// temp project with a strict tsconfig and type-check code that uses the library. Offline: the
// package's dependencies and @types/bun are symlinked from this repo's node_modules. Packing and
// tsc take seconds, so it runs with SQLOUTBOX_SLOW_TESTS=1.
import { afterAll, beforeAll, expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import { REPO, run } from "./support/cli.ts";
import { describeSlow, SLOW } from "./support/slow.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";

const TSC = path.join(REPO, "node_modules", ".bin", "tsc");

// What a careful consumer turns on, and no allowImportingTsExtensions: type-checking the
// package's .ts sources under these flags fails (TS5097 on every import, exactOptionalPropertyTypes
// and index-signature errors inside the library); its declarations must not.
const STRICT = {
  target: "ESNext",
  module: "Preserve",
  moduleResolution: "bundler",
  moduleDetection: "force",
  lib: ["ESNext"],
  types: ["bun"],
  strict: true,
  exactOptionalPropertyTypes: true,
  noPropertyAccessFromIndexSignature: true,
  noUncheckedIndexedAccess: true,
  noImplicitOverride: true,
  verbatimModuleSyntax: true,
  skipLibCheck: false,
  noEmit: true,
};

const APP = `
import {
  SQLMiddleware, Outbox, defineConfig, OutboxSyncService, createWriters,
  OutboxError, ConfigError, QueueFullError, WriteError,
  type OutboxErrorCode, type OutboxWriter, type Statement, type WriteResult, type BindValue,
} from "sqloutbox";

const producer = new SQLMiddleware({ dbDir: "data/queue", maxPending: 10_000 });
export const seq: number = producer.push("orders", "INSERT INTO orders (id, total) VALUES (?, ?)", [1, 9.5]);

const queue = new Outbox("data/queue/orders.db", "orders");
export const next: number = queue.enqueue("orders", JSON.stringify(["INSERT INTO orders (id) VALUES (?)", [2]]));

class ConsoleWriter implements OutboxWriter {
  readonly dialect = "sqlite" as const;
  async writeBatch(stmts: Statement[]): Promise<WriteResult[]> {
    return stmts.map((s): WriteResult => {
      const args: BindValue[] = s.args;
      return s.sql.length > 0 ? { ok: true, rowsAffected: args.length } : { ok: false, error: "empty", errorClass: "E_EMPTY" };
    });
  }
}

const config = defineConfig({
  baseDir: "/srv/app",
  app: { shop: { dbDir: "data/queue", batchSize: 500, db: { main: { writer: "sqlite", tables: ["orders", { name: "payments", retainLogDays: 7 }], connection: { path: "remote.db" } } } } },
});

export async function drain(): Promise<number> {
  const writers = { ...(await createWriters(config)), "shop.console": new ConsoleWriter() };
  const service = new OutboxSyncService(config, writers, { pollIntervalMs: 5, onBatch: (e) => void e });
  await service.start();
  const report = await service.runOnce();
  await service.stop(1_000);
  return report.delivered;
}

export function explain(error: unknown): string {
  if (error instanceof QueueFullError) return \`\${error.namespace} holds \${error.maxPending} rows\`;
  if (error instanceof ConfigError) return error.where.keyPath ?? error.message;
  if (error instanceof WriteError) return \`\${error.target ?? "?"}: \${error.misconfigured}\`;
  if (error instanceof OutboxError) {
    const code: OutboxErrorCode = error.code;
    return code;
  }
  return String(error);
}
`;

// Uses the compiler must reject; the second is an error only under exactOptionalPropertyTypes.
const WRONG = `
import { SQLMiddleware } from "sqloutbox";
new SQLMiddleware({ dbDir: "data/queue" }).push(42, "INSERT INTO t (id) VALUES (1)");
new SQLMiddleware({ dbDir: "data/queue", maxPending: undefined });
`;

let tmp: TempDir | undefined;
let tarball: string;
let entries: string[];
let project: string;

/** Runs the repository's tsc on `files` in the consumer project; returns its output. */
async function typecheck(files: string[]): Promise<{ code: number; output: string }> {
  fs.writeFileSync(path.join(project, "tsconfig.json"), JSON.stringify({ compilerOptions: STRICT, files }, null, 2));
  const r = await run(["-p", project], { cmd: [TSC], cwd: project });
  return { code: r.code, output: r.stdout + r.stderr };
}

// Outside the describes, so a skipped run lists only the tests (a skipped describe's hooks show up as unnamed skips).
beforeAll(async () => {
  if (!SLOW) return;
  tmp = makeTempDir("sqloutbox-types-");
  // No --ignore-scripts: the declarations exist only because pack runs the prepack script.
  const pack = await run(["pm", "pack", "--destination", tmp.path, "--quiet"], { cmd: ["bun"], cwd: REPO });
  expect(pack.code).toBe(0);
  tarball = pack.stdout.trim();
  entries = (await run(["tzf", tarball], { cmd: ["tar"] })).stdout
    .split("\n")
    .filter(Boolean)
    .map((e) => e.replace(/^package\//, ""));

  project = tmp.file("consumer");
  const pkgDir = path.join(project, "node_modules", "sqloutbox");
  fs.mkdirSync(pkgDir, { recursive: true });
  expect((await run(["xzf", tarball, "-C", pkgDir, "--strip-components=1"], { cmd: ["tar"] })).code).toBe(0);
  // The unpacked package's own dependency list, so a new dependency is linked without editing this test.
  const manifest = JSON.parse(fs.readFileSync(path.join(pkgDir, "package.json"), "utf8")) as {
    dependencies: Record<string, string>;
  };
  for (const dep of [...Object.keys(manifest.dependencies), "@types/bun"]) {
    fs.mkdirSync(path.dirname(path.join(project, "node_modules", dep)), { recursive: true });
    fs.symlinkSync(path.join(REPO, "node_modules", dep), path.join(project, "node_modules", dep));
  }
  fs.writeFileSync(
    path.join(project, "package.json"),
    JSON.stringify({ name: "consumer", type: "module", private: true }),
  );
  fs.writeFileSync(path.join(project, "app.ts"), APP);
  fs.writeFileSync(path.join(project, "wrong.ts"), WRONG);
}, 60_000);
afterAll(() => {
  tmp?.cleanup();
});

describeSlow("the packed tarball", "pack the package (its prepack writes the declarations with tsc)", () => {
  test("ships the declarations and points types at them, Bun at the sources", () => {
    const manifest = JSON.parse(
      fs.readFileSync(path.join(project, "node_modules", "sqloutbox", "package.json"), "utf8"),
    );
    expect(manifest.exports["."]).toEqual({
      types: "./dist/types/index.d.ts",
      bun: "./src/index.ts",
      default: "./src/index.ts",
    });
    expect(manifest.types).toBe("./dist/types/index.d.ts");
    expect(entries).toContain("dist/types/index.d.ts");
    expect(entries).toContain("src/index.ts");
  });

  test("leaves out tests, benchmarks, the demo, node_modules and other build output", () => {
    const stray = entries.filter(
      (e) =>
        /^(test|bench|node_modules)\//.test(e) ||
        e.includes("/node_modules/") ||
        e === "etc/demo.ts" ||
        (e.startsWith("dist/") && !e.startsWith("dist/types/")),
    );
    expect(stray).toEqual([]);
  });

  test("no declaration imports a relative .ts path", () => {
    const dir = path.join(project, "node_modules", "sqloutbox", "dist", "types");
    const offending = entries
      .filter((e) => e.endsWith(".d.ts"))
      .filter((e) =>
        /(from\s*|import\s*\(\s*)["']\.{1,2}\/[^"']*\.ts["']/.test(
          fs.readFileSync(path.join(dir, e.slice("dist/types/".length)), "utf8"),
        ),
      );
    expect(offending).toEqual([]);
  });
});

describeSlow("a strict consumer project", "type-check a consumer of the packed package with tsc", () => {
  test("type-checks code using the producer, the queue, the config, the drain, writers and errors with zero errors", async () => {
    expect(await typecheck(["app.ts"])).toEqual({ code: 0, output: "" });
  }, 30_000);

  test("is told about a wrong use: a number for a table name, an explicit undefined for an optional option", async () => {
    const { code, output } = await typecheck(["wrong.ts"]);
    expect(code).not.toBe(0);
    expect(output.split("\n").filter((l) => l.startsWith("wrong.ts"))).toEqual([
      "wrong.ts(3,49): error TS2345: Argument of type 'number' is not assignable to parameter of type 'string'.",
      expect.stringMatching(/^wrong\.ts\(4,19\): error TS2379: .*exactOptionalPropertyTypes: true/),
    ]);
  }, 30_000);
});
