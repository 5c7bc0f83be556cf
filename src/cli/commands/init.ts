import { Database } from "bun:sqlite";
import { defineCommand } from "citty";
import fs from "node:fs";
import path from "node:path";
import { OutboxError, StorageError } from "../../errors.ts";
import { VERSION } from "../../version.ts";
import { logArgs } from "../args.ts";
import { print } from "../text-output.ts";
// Text imports are embedded by `bun build --compile`, so the binary scaffolds without the sources.
import configTemplate from "../templates/outbox.config.ts.txt" with { type: "text" };
import producerTemplate from "../templates/produce.ts.txt" with { type: "text" };
import runnerTemplate from "../templates/run.ts.txt" with { type: "text" };
import tomlTemplate from "../templates/outbox.toml.txt" with { type: "text" };
import tsconfigTemplate from "../templates/tsconfig.json.txt" with { type: "text" };

/** The scaffold: file name, content, and what it is for (printed). */
export const SCAFFOLD: ReadonlyArray<{ name: string; text: string; purpose: string }> = [
  { name: "outbox.config.ts", text: configTemplate, purpose: "typed config (defineConfig)" },
  { name: "run.ts", text: runnerTemplate, purpose: "the drain runner (SIGTERM/SIGINT/SIGHUP stop cleanly)" },
  { name: "outbox.toml", text: tomlTemplate, purpose: "the same config for `sqloutbox runservice`" },
  { name: "produce.ts", text: producerTemplate, purpose: "an example producer: an order and its payment" },
  {
    name: "tsconfig.json",
    text: tsconfigTemplate,
    purpose: "type-checking for the scaffold (needs @types/bun and typescript)",
  },
];

/**
 * The example target the scaffold's config names: a SQLite file with the tables produce.ts writes, so it
 * delivers as generated.
 */
const TARGET = {
  name: "data/remote.db",
  purpose: "the example target: SQLite, with tables orders and payments",
  ddl: [
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL NOT NULL)",
    "CREATE TABLE payments (id INTEGER PRIMARY KEY, order_id INTEGER NOT NULL, state TEXT)",
  ],
};

/** `sqloutbox init [DIR]`: scaffold the programmatic path; never overwrites a file. */
export const init = defineCommand({
  meta: {
    name: "init",
    description:
      "Scaffold a typed config, a drain runner, an outbox.toml, an example producer and target into DIR (default ./outbox)",
  },
  args: {
    dir: { type: "positional", required: false, description: "Directory to create the files in (default ./outbox)" },
    ...logArgs,
  },
  run({ args }) {
    const dir = path.resolve(args.dir ?? "outbox");
    const shown = path.relative(process.cwd(), dir) || ".";
    if (fs.existsSync(dir) && !fs.statSync(dir).isDirectory())
      throw new OutboxError("E_OUTBOX", `${dir} exists and is not a directory`);
    // Check everything first: either the whole scaffold is written or nothing is.
    for (const name of [...SCAFFOLD.map((f) => f.name), TARGET.name]) {
      const file = path.join(dir, name);
      if (fs.existsSync(file))
        throw new OutboxError("E_OUTBOX", `refusing to overwrite ${file}: remove it or choose another DIR`);
    }
    writeScaffold(dir);
    const created = [...SCAFFOLD, TARGET].map((f) => ({ file: path.join(shown, f.name), purpose: f.purpose }));
    const width = Math.max(...created.map((c) => c.file.length));
    for (const c of created) print(`created ${c.file.padEnd(width)}  ${c.purpose}`);
    print(["", "Next steps:", ...nextSteps(shown, resolves("sqloutbox", dir), missingDevTools(dir))].join("\n"));
  },
});

/**
 * What to run, in order: every command line is meant to be run as printed (test/cli-init.test.ts
 * runs them). The install steps only where "sqloutbox" or the type-checking tools (`missingDev`)
 * do not resolve from DIR yet.
 */
function nextSteps(shown: string, isInstalled: boolean, missingDev: readonly string[]): string[] {
  const at = (name: string) => path.join(shown, name);
  const commands = [
    [`bun ${at("produce.ts")}`, `queues an order and its payment in ${at("data/queue")}`],
    [`bun ${at("run.ts")}`, `the drain: delivers them into ${at(TARGET.name)}; Ctrl-C stops it`],
    [`bunx sqloutbox runservice --config ${at("outbox.toml")}`, "or the same drain, from outbox.toml"],
    [`bunx sqloutbox status --config ${at("outbox.toml")}`, "what is pending, delivered, held"],
    [`bunx tsc -p ${at("tsconfig.json")}`, "type-checks the scaffold against the package"],
  ];
  const width = Math.max(...commands.map(([line]) => line!.length));
  const steps = [
    [
      "Try it as generated (the target is a local SQLite file; nothing else to set up):",
      ...commands.map(([line, note]) => `     ${line!.padEnd(width)}  # ${note}`),
    ],
    [
      `Make it yours: your tables, writer and connection in ${at("outbox.config.ts")} (and ${at("outbox.toml")});`,
      "   the tables must exist on the target. Producers: new SQLMiddleware({ dbDir }).push(table, sql, args).",
    ],
  ];
  // The scaffold's tsconfig names the "bun" types, and `bunx tsc` without typescript in the
  // project runs npm's unrelated "tsc" package: both belong to the project, as dev dependencies.
  if (missingDev.length > 0)
    steps.unshift([`Add what type-checking the scaffold needs to this project: bun add -d ${missingDev.join(" ")}`]);
  // The package is not on npm (the name there is not this package): it is packed from a checkout.
  if (!isInstalled) {
    const checkout = checkoutRoot();
    const tarball = `sqloutbox-${VERSION}.tgz`;
    steps.unshift(
      checkout === null
        ? [
            "Add the package to this project. It is not on npm yet: run `bun pm pack` in a checkout of the",
            `   sqloutbox repository, then here: bun add /path/to/that/checkout/${tarball}`,
          ]
        : [
            "Add the package to this project. It is not on npm yet: pack it from this checkout, then add the tarball:",
            `     (cd ${checkout} && bun pm pack)`,
            `     bun add ${path.join(checkout, tarball)}`,
          ],
    );
  }
  return steps.flatMap(([first, ...rest], i) => [`  ${i + 1}. ${first}`, ...rest.map((l) => `  ${l}`)]);
}

/** Whether `specifier` resolves from `dir` as the scaffold's imports will (the project already has it). */
function resolves(specifier: string, dir: string): boolean {
  try {
    Bun.resolveSync(specifier, dir);
    return true;
  } catch {
    return false;
  }
}

/**
 * The dev dependencies `bunx tsc -p DIR/tsconfig.json` needs that the project lacks: looked up in
 * the node_modules folders from DIR up, as tsc does (Bun.resolveSync would answer from Bun's
 * global cache in a folder without node_modules, where tsc finds nothing).
 */
function missingDevTools(dir: string): string[] {
  const installed = (name: string) => {
    for (let at = dir; ; at = path.dirname(at)) {
      if (fs.existsSync(path.join(at, "node_modules", name, "package.json"))) return true;
      if (path.dirname(at) === at) return false;
    }
  };
  return ["@types/bun", "typescript"].filter((name) => !installed(name));
}

/**
 * The sqloutbox checkout this command runs from, where `bun pm pack` leaves the tarball; null when
 * it runs from the compiled binary or from an installed package (node_modules is no checkout).
 */
function checkoutRoot(): string | null {
  const root = path.resolve(import.meta.dir, "../../..");
  if (root.split(path.sep).includes("node_modules")) return null;
  try {
    const pkg = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8")) as { name?: unknown };
    return pkg.name === "sqloutbox" ? root : null;
  } catch {
    return null;
  }
}

/** Writes every scaffold file into `dir`, or none: a failure removes what was written and says where. */
function writeScaffold(dir: string): void {
  const written: string[] = [];
  try {
    fs.mkdirSync(dir, { recursive: true });
    for (const f of SCAFFOLD) {
      const file = path.join(dir, f.name);
      fs.writeFileSync(file, f.text, { flag: "wx" });
      written.push(file);
    }
    const target = path.join(dir, TARGET.name);
    fs.mkdirSync(path.dirname(target), { recursive: true });
    written.push(target);
    const db = new Database(target, { create: true, strict: true });
    try {
      for (const ddl of TARGET.ddl) db.run(ddl);
    } finally {
      db.close();
    }
  } catch (err) {
    for (const file of written) fs.rmSync(file, { force: true });
    throw new StorageError(`cannot write the scaffold into ${dir}: ${(err as Error).message}`, dir, undefined, {
      cause: err,
    });
  }
}
