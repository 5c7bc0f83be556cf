// Every wait of the drain comes from its injected Scheduler (src/scheduler.ts): its clock, sleeps,
// timers, timeouts and the turns it lets the event loop take. A real timer left in src/drain would
// run on the process's time under the simulator (test/sim/), outside its seed: a replayed seed would
// no longer replay. The drain lock (lock.ts) keeps the wall clock: its file is read by other
// processes, and its 100 ms grace is real time on their side too.
import { describe, expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";

const ROOT = path.join(import.meta.dir, "..");

/** What takes time from the process instead of the scheduler. */
const REAL_TIME = [
  /\bsetTimeout\s*\(/,
  /\bsetInterval\s*\(/,
  /\bsetImmediate\s*\(/,
  /\bclearTimeout\s*\(/,
  /\bclearInterval\s*\(/,
  /\bBun\.sleep\s*\(/,
  /\bperformance\.now\s*\(/,
  /\bDate\.now\b/,
  /\bMath\.random\b/,
  /\bnew Date\(\s*\)/,
];

/** Source files under `dir`, recursively. */
function sources(dir: string): string[] {
  return fs
    .readdirSync(dir, { withFileTypes: true })
    .flatMap((e) =>
      e.isDirectory() ? sources(path.join(dir, e.name)) : e.name.endsWith(".ts") ? [path.join(dir, e.name)] : [],
    );
}

/** The code of a file without its comments (strings are left alone: none of ours holds a comment marker before a timer). */
function code(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:"'`])\/\/.*$/gm, "$1");
}

/** `file:line: text` of each use of real time in `files`. */
function realTimeIn(files: string[]): string[] {
  const found: string[] = [];
  for (const file of files) {
    const lines = code(fs.readFileSync(file, "utf8")).split("\n");
    lines.forEach((line, i) => {
      if (REAL_TIME.some((re) => re.test(line))) found.push(`${path.relative(ROOT, file)}:${i + 1}: ${line.trim()}`);
    });
  }
  return found;
}

describe("the drain's time", () => {
  test("src/drain takes no real timer, clock or randomness outside lock.ts: all of it comes from its scheduler", () => {
    const drain = sources(path.join(ROOT, "src/drain")).filter((f) => path.basename(f) !== "lock.ts");
    expect(drain.length).toBeGreaterThan(20);
    // withTimeout is how the drain bounds a write; it takes the scheduler too.
    expect(realTimeIn([...drain, path.join(ROOT, "src/timeout.ts")])).toEqual([]);
  });

  test("the check finds a real timer where one is", () => {
    const dir = fs.mkdtempSync(path.join(process.env.TMPDIR ?? "/tmp", "sqloutbox-sched-"));
    try {
      const file = path.join(dir, "late.ts");
      fs.writeFileSync(
        file,
        "// setTimeout( in a comment is fine\nconst a = Date.now();\n/* Bun.sleep(1) */\nawait Bun.sleep(5);\n",
      );
      expect(realTimeIn([file]).map((l) => l.replace(/^.*late\.ts:/, ""))).toEqual([
        "2: const a = Date.now();",
        "4: await Bun.sleep(5);",
      ]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
