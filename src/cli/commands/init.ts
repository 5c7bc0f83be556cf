import { defineCommand } from "citty";
import fs from "node:fs";
import path from "node:path";
import { OutboxError, StorageError } from "../../errors.ts";
import { logArgs } from "../args.ts";
import { print } from "../text-output.ts";
// Text imports are embedded by `bun build --compile`, so the binary scaffolds without the sources.
import configTemplate from "../templates/outbox.config.ts.txt" with { type: "text" };
import runnerTemplate from "../templates/run.ts.txt" with { type: "text" };
import tomlTemplate from "../templates/outbox.toml.txt" with { type: "text" };
import tsconfigTemplate from "../templates/tsconfig.json.txt" with { type: "text" };

/** The scaffold: file name, content, and what it is for (printed). */
export const SCAFFOLD: ReadonlyArray<{ name: string; text: string; purpose: string }> = [
  { name: "outbox.config.ts", text: configTemplate, purpose: "typed config (defineConfig)" },
  { name: "run.ts", text: runnerTemplate, purpose: "the drain runner (SIGTERM/SIGINT/SIGHUP stop cleanly)" },
  { name: "outbox.toml", text: tomlTemplate, purpose: "the same config for `sqloutbox runservice`" },
  { name: "tsconfig.json", text: tsconfigTemplate, purpose: "type-checking for the scaffold (bunx tsc -p)" },
];

/** `sqloutbox init [DIR]`: scaffold the programmatic path; never overwrites a file. */
export const init = defineCommand({
  meta: { name: "init", description: "Scaffold a typed config, a drain runner and an outbox.toml into DIR (default ./outbox)" },
  args: {
    dir: { type: "positional", required: false, description: "Directory to create the files in (default ./outbox)" },
    ...logArgs,
  },
  run({ args }) {
    const dir = path.resolve(args.dir ?? "outbox");
    const shown = path.relative(process.cwd(), dir) || ".";
    if (fs.existsSync(dir) && !fs.statSync(dir).isDirectory()) throw new OutboxError("E_OUTBOX", `${dir} exists and is not a directory`);
    // Check everything first: either the whole scaffold is written or nothing is.
    for (const f of SCAFFOLD) {
      const file = path.join(dir, f.name);
      if (fs.existsSync(file)) throw new OutboxError("E_OUTBOX", `refusing to overwrite ${file}: remove it or choose another DIR`);
    }
    writeScaffold(dir);
    const width = Math.max(...SCAFFOLD.map((f) => path.join(shown, f.name).length));
    for (const f of SCAFFOLD) print(`created ${path.join(shown, f.name).padEnd(width)}  ${f.purpose}`);
    print(
      [
        "",
        "Next steps:",
        "  1. bun add sqloutbox                    (and bun add -d @types/bun typescript to type-check)",
        `  2. edit ${path.join(shown, "outbox.config.ts")}: your tables (they must exist on the target), its writer and connection`,
        `  3. produce events: new SQLMiddleware({ dbDir: "${path.join(shown, "data/queue")}" }).push("orders", "INSERT INTO orders (id) VALUES (?)", [1])`,
        `  4. run the drain:  bun ${path.join(shown, "run.ts")}`,
        `     or with TOML:   sqloutbox runservice --config ${path.join(shown, "outbox.toml")}`,
        `  5. watch it:       sqloutbox status --config ${path.join(shown, "outbox.toml")}`,
      ].join("\n"),
    );
  },
});

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
  } catch (err) {
    for (const file of written) fs.rmSync(file, { force: true });
    throw new StorageError(`cannot write the scaffold into ${dir}: ${(err as Error).message}`, dir, undefined, { cause: err });
  }
}
