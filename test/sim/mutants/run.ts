// `bun run sim:mutants`: each mutant (mutants.ts) applied to a copy of src/, the simulator run over
// it from seed 1 until a seed fails; the run fails unless every mutant is caught within its budget.
// A mutant whose text is no longer in its file is stale: said loudly, and a failure.
//
//   bun run sim:mutants                   every mutant, two at a time
//   bun run sim:mutants fence-skipped     the mutants named
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { type Mutant, MUTANTS } from "./mutants.ts";

const REPO = path.join(import.meta.dir, "..", "..", "..");
/** Mutants run side by side: the machine's cores, at most. */
const PARALLEL = Math.max(1, Math.min(2, os.availableParallelism()));

interface Outcome {
  mutant: Mutant;
  caught: { seed: number; seeds: number; invariant: string; message: string } | null;
  problem: string | null;
  ms: number;
}

/** A copy of the repository's src/ and test/sim/ with the mutant applied; node_modules linked. */
function mutatedCopy(mutant: Mutant): string {
  const dir = fs.mkdtempSync(path.join(fs.existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir(), "sqloutbox-mutant-"));
  fs.cpSync(path.join(REPO, "src"), path.join(dir, "src"), { recursive: true });
  fs.cpSync(path.join(REPO, "test", "sim"), path.join(dir, "test", "sim"), { recursive: true });
  fs.copyFileSync(path.join(REPO, "package.json"), path.join(dir, "package.json"));
  fs.symlinkSync(path.join(REPO, "node_modules"), path.join(dir, "node_modules"));
  for (const edit of mutant.edits) {
    const file = path.join(dir, "src", edit.file);
    if (!fs.existsSync(file)) throw new Stale(`src/${edit.file} does not exist any more`);
    const text = fs.readFileSync(file, "utf8");
    const found = text.split(edit.find).length - 1;
    if (found !== 1)
      throw new Stale(
        `its text is found ${found} times in src/${edit.file} (exactly once expected): update the mutant to the code as it is now`,
      );
    fs.writeFileSync(file, text.replace(edit.find, edit.replace));
  }
  return dir;
}

class Stale extends Error {}

async function run(mutant: Mutant): Promise<Outcome> {
  const started = performance.now();
  let dir: string;
  try {
    dir = mutatedCopy(mutant);
  } catch (error) {
    if (!(error instanceof Stale)) throw error;
    return { mutant, caught: null, problem: `STALE: ${error.message}`, ms: 0 };
  }
  try {
    const args = ["--seeds", String(mutant.budget), "--first", "--jobs", "1", "--json"];
    if (mutant.profile) args.push("--profile", mutant.profile);
    const child = Bun.spawn([process.execPath, path.join(dir, "test", "sim", "main.ts"), ...args], {
      cwd: dir,
      stdout: "pipe",
      stderr: "pipe",
    });
    const [out, err] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text()]);
    await child.exited;
    const line = out.trim().split("\n").pop() ?? "";
    if (!line.startsWith("{"))
      return {
        mutant,
        caught: null,
        problem: `the simulator did not report (a mutant that breaks the run itself?): ${err.slice(-1500)}`,
        ms: performance.now() - started,
      };
    const summary = JSON.parse(line) as {
      seeds: number;
      failures: Array<{ seed: number; failure: { invariant: string; message: string } }>;
    };
    const first = summary.failures[0];
    return {
      mutant,
      caught: first
        ? {
            seed: first.seed,
            seeds: summary.seeds,
            invariant: first.failure.invariant,
            message: first.failure.message,
          }
        : null,
      problem: first ? null : `not caught in ${summary.seeds} seeds`,
      ms: performance.now() - started,
    };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const names = process.argv.slice(2);
const unknown = names.filter((n) => !MUTANTS.some((m) => m.name === n));
if (unknown.length > 0) {
  console.error(`unknown mutant ${unknown.join(", ")} (known: ${MUTANTS.map((m) => m.name).join(", ")})`);
  process.exit(2);
}
const chosen = names.length > 0 ? MUTANTS.filter((m) => names.includes(m.name)) : MUTANTS;
const started = performance.now();
const queue = [...chosen];
const outcomes: Outcome[] = [];
await Promise.all(
  Array.from({ length: PARALLEL }, async () => {
    for (let m = queue.shift(); m !== undefined; m = queue.shift()) {
      const outcome = await run(m);
      outcomes.push(outcome);
      const { caught } = outcome;
      console.log(
        caught
          ? `caught  ${m.name}: seed ${caught.seed} (${m.profile ?? "mix"}), after ${caught.seeds} seeds, ${(outcome.ms / 1000).toFixed(1)} s — ${caught.message.slice(0, 160)}`
          : `MISSED  ${m.name}: ${outcome.problem}`,
      );
    }
  }),
);
const missed = outcomes.filter((o) => o.caught === null);
console.log(
  `\nsim:mutants: ${outcomes.length - missed.length} of ${outcomes.length} caught in ${((performance.now() - started) / 1000).toFixed(1)} s${missed.length ? `; not caught: ${missed.map((o) => o.mutant.name).join(", ")}` : ""}`,
);
process.exit(missed.length > 0 ? 1 : 0);
