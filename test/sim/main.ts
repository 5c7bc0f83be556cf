// `bun run sim`: the drain in a simulated world, seed after seed (see docs/reliability.md).
//
//   bun run sim                       2 000 seeds, the profiles mixed, both cores
//   bun run sim --seed 1234           one seed, its trace hash (the same on every run)
//   bun run sim --seeds 20000 --profile fleet --steps 60 --jobs 2
//   bun run sim --seed 1234 --trace   every line of its trace as it happens
//
// A failure prints its seed, the invariant, the message, the last lines of its trace and the
// command that replays it; the exit code is 1.
import { INVARIANTS } from "./checkers.ts";
import { profileOf } from "./profiles.ts";
import { type RunResult, runSeed } from "./world.ts";

interface Args {
  seed: number | null;
  seeds: number;
  from: number;
  steps: number | null;
  profile: string | null;
  trace: boolean;
  strict: boolean;
  jobs: number;
  /** This process runs the seeds `i` with i % of === part (a worker of a run with --jobs). */
  part: { index: number; of: number } | null;
  json: boolean;
  /** Stop at the first failure. */
  first: boolean;
}

function parseArgs(argv: string[]): Args {
  const args: Args = {
    seed: null,
    seeds: 2000,
    from: 1,
    steps: null,
    profile: null,
    trace: false,
    strict: false,
    jobs: 2,
    part: null,
    json: false,
    first: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!;
    const value = () => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${flag} needs a value`);
      return v;
    };
    const int = () => {
      const v = Number(value());
      if (!Number.isSafeInteger(v) || v < 0) throw new Error(`${flag} needs a non-negative integer`);
      return v;
    };
    if (flag === "--seed") args.seed = int();
    else if (flag === "--seeds") args.seeds = int();
    else if (flag === "--from") args.from = int();
    else if (flag === "--steps") args.steps = int();
    else if (flag === "--profile") args.profile = value();
    else if (flag === "--trace") args.trace = true;
    else if (flag === "--strict") args.strict = true;
    else if (flag === "--jobs") args.jobs = Math.max(1, int());
    else if (flag === "--part") {
      const [index, of] = value().split("/").map(Number);
      args.part = { index: index!, of: of! };
    } else if (flag === "--json") args.json = true;
    else if (flag === "--first") args.first = true;
    else throw new Error(`unknown flag ${flag} (see the top of test/sim/main.ts)`);
  }
  if (args.profile !== null) profileOf(0, args.profile); // unknown: say so now
  return args;
}

/** What a run of many seeds adds up to. */
interface Summary {
  seeds: number;
  failures: RunResult[];
  steps: number;
  events: number;
  virtualMs: number;
  faults: Record<string, number>;
  crashes: number;
  checks: Record<string, number>;
  letters: Record<string, number>;
  known: Record<string, number>;
  ms: number;
}

function emptySummary(): Summary {
  return {
    seeds: 0,
    failures: [],
    steps: 0,
    events: 0,
    virtualMs: 0,
    faults: {},
    crashes: 0,
    checks: Object.fromEntries(INVARIANTS.map((i) => [i, 0])),
    letters: {},
    known: {},
    ms: 0,
  };
}

function add(into: Record<string, number>, from: Record<string, number>): void {
  for (const [k, v] of Object.entries(from)) into[k] = (into[k] ?? 0) + v;
}

function addRun(summary: Summary, run: RunResult): void {
  summary.seeds += 1;
  summary.steps += run.steps;
  summary.events += run.events;
  summary.virtualMs += run.virtualMs;
  summary.crashes += run.crashes;
  add(summary.faults, run.faults);
  add(summary.checks, run.checks);
  add(summary.letters, run.letters);
  add(summary.known, run.known);
  if (run.failure) summary.failures.push(run);
}

function merge(into: Summary, from: Summary): void {
  into.seeds += from.seeds;
  into.steps += from.steps;
  into.events += from.events;
  into.virtualMs += from.virtualMs;
  into.crashes += from.crashes;
  add(into.faults, from.faults);
  add(into.checks, from.checks);
  add(into.letters, from.letters);
  add(into.known, from.known);
  into.failures.push(...from.failures);
}

/** The command that runs `run` again, exactly. */
function replayCommand(run: RunResult, args: Args): string {
  return `bun run sim --seed ${run.seed} --profile ${run.profile}${args.steps !== null ? ` --steps ${args.steps}` : ""}${args.strict ? " --strict" : ""}`;
}

function printFailure(run: RunResult, args: Args): void {
  const f = run.failure!;
  console.log(`\nFAIL seed ${run.seed} (profile ${run.profile}): ${f.message}`);
  console.log(`  invariant: ${f.invariant}; trace hash ${run.hash}; replay: ${replayCommand(run, args)}`);
  console.log("  last lines of its trace:");
  for (const line of f.trace) console.log(`    ${line}`);
}

async function runSeeds(args: Args): Promise<Summary> {
  const summary = emptySummary();
  const started = performance.now();
  const seeds = args.seed !== null ? [args.seed] : Array.from({ length: args.seeds }, (_, i) => args.from + i);
  for (const seed of seeds) {
    if (args.part !== null && seed % args.part.of !== args.part.index) continue;
    const run = await runSeed({
      seed,
      profile: profileOf(seed, args.profile),
      ...(args.steps === null ? {} : { steps: args.steps }),
      echo: args.trace,
      strict: args.strict,
    });
    addRun(summary, run);
    if (args.seed !== null && !args.json)
      console.log(
        `seed ${seed} (profile ${run.profile}): ${run.failure ? "FAIL" : "ok"}, trace hash ${run.hash}, ${run.events} events, ${run.virtualMs} virtual ms`,
      );
    if (run.failure && !args.json) printFailure(run, args);
    if (run.failure && args.first) break;
  }
  summary.ms = performance.now() - started;
  return summary;
}

/** Runs the seeds over `jobs` worker processes and adds up what they report. */
async function runJobs(args: Args, argv: string[]): Promise<Summary> {
  const started = performance.now();
  const workers = Array.from({ length: args.jobs }, (_, j) =>
    Bun.spawn([process.execPath, import.meta.path, ...argv, "--part", `${j}/${args.jobs}`, "--json", "--jobs", "1"], {
      stdout: "pipe",
      stderr: "inherit",
    }),
  );
  const summary = emptySummary();
  for (const worker of workers) {
    const text = await new Response(worker.stdout).text();
    const code = await worker.exited;
    const line = text.trim().split("\n").pop() ?? "";
    if (code !== 0 && !line.startsWith("{")) throw new Error(`a worker exited ${code}: ${text.slice(-2000)}`);
    merge(summary, JSON.parse(line) as Summary);
  }
  summary.ms = performance.now() - started;
  for (const run of summary.failures) printFailure(run, args);
  return summary;
}

function report(summary: Summary, args: Args): void {
  const seconds = summary.ms / 1000;
  const fmt = (r: Record<string, number>) =>
    Object.entries(r)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([k, v]) => `${k} ${v}`)
      .join(", ") || "none";
  console.log(
    `\nsim: ${summary.seeds} seeds (${args.profile ?? "profiles mixed"}) in ${seconds.toFixed(1)} s: ${(summary.seeds / seconds).toFixed(1)} seeds/s, ${summary.failures.length} failed`,
  );
  console.log(
    `  steps ${summary.steps}, events ${summary.events}, virtual time ${(summary.virtualMs / 1000).toFixed(0)} s, crashes ${summary.crashes}`,
  );
  console.log(`  faults: ${fmt(summary.faults)}`);
  console.log(`  checks: ${fmt(summary.checks)}`);
  console.log(`  dead letters at the end: ${fmt(summary.letters)}`);
  if (Object.keys(summary.known).length > 0) console.log(`  known issues met (not failed): ${fmt(summary.known)}`);
  if (summary.failures.length > 0) console.log(`  failing seeds: ${summary.failures.map((r) => r.seed).join(" ")}`);
}

const argv = process.argv.slice(2);
const args = parseArgs(argv);
const parallel = args.part === null && args.seed === null && args.jobs > 1 && args.seeds > 1 && !args.first;
const summary = parallel ? await runJobs(args, argv) : await runSeeds(args);
if (args.json) console.log(JSON.stringify(summary));
else report(summary, args);
process.exit(summary.failures.length > 0 ? 1 : 0);
