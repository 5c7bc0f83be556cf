// `bun run bench:cli`: start-up and `status` latency of the compiled binary.
// Prints one JSON line per case: {"bench":"cli","case":…,"p50_ms":…,"p95_ms":…,"runs":…}.
// Setup: 20 namespaces ({table}.db files) holding 100 000 pending rows in total. Target: status p50 ≤ 150 ms.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { buildBinary } from "../build.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { SMOKE, sized } from "./support/smoke.ts";

const REPO = path.resolve(import.meta.dir, "..");
const NAMESPACES = 20;
const TOTAL_ROWS = sized(100_000, 400);
const RUNS = Number(process.env.BENCH_RUNS ?? sized(21, 2));
const PENDING = `${NAMESPACES} ns, ${TOTAL_ROWS >= 1000 ? `${TOTAL_ROWS / 1000}k` : TOTAL_ROWS} pending`;

const dbDir = fs.mkdtempSync(path.join(os.tmpdir(), "sqloutbox-bench-cli-"));
try {
  // A smoke run builds its own binary: runs of the test suite side by side must not rebuild
  // dist/sqloutbox under each other's feet.
  const binary = await freshBinary(SMOKE ? path.join(dbDir, "bin", "sqloutbox") : path.join(REPO, "dist", "sqloutbox"));
  seed(dbDir);
  report("--version", await time([binary, "--version"]));
  report(`status --json (${PENDING})`, await time([binary, "status", "--json", "--db-dir", dbDir]));
  report(`status (${PENDING})`, await time([binary, "status", "--db-dir", dbDir]));
  const config = path.join(dbDir, "outbox.toml");
  const tables = Array.from({ length: NAMESPACES }, (_, n) => `"table_${String(n).padStart(2, "0")}"`).join(", ");
  fs.writeFileSync(
    config,
    `[app.bench]\ndb_dir = "."\n[app.bench.db.pg]\nwriter = "postgres"\ntables = [${tables}]\n[app.bench.db.pg.connection]\nurl = "postgres://u:p@localhost/db"\n`,
  );
  report(`status --json --config (${PENDING})`, await time([binary, "status", "--json", "--config", config]));
  report(`verify (${PENDING})`, await time([binary, "verify", "--db-dir", dbDir]));
} finally {
  fs.rmSync(dbDir, { recursive: true, force: true });
}

/** The binary at `out`, built when it is missing or any source is newer than it. */
async function freshBinary(out: string): Promise<string> {
  const built = fs.existsSync(out) ? fs.statSync(out).mtimeMs : 0;
  const sources = [path.join(REPO, "package.json"), path.join(REPO, "build.ts"), ...walk(path.join(REPO, "src"))];
  if (sources.some((f) => fs.statSync(f).mtimeMs > built)) await buildBinary(out);
  return out;
}

function walk(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? walk(p) : [p];
  });
}

function seed(dir: string): void {
  const perNamespace = TOTAL_ROWS / NAMESPACES;
  for (let n = 0; n < NAMESPACES; n++) {
    const table = `table_${String(n).padStart(2, "0")}`;
    const outbox = new Outbox(path.join(dir, `${table}.db`), table);
    const items = Array.from({ length: perNamespace }, (_, i) => ({
      tag: `INSERT INTO ${table} (id, name, amount) VALUES (?, ?, ?)`,
      payload: JSON.stringify([i, `name-${i}`, i * 1.5]),
    }));
    outbox.enqueueBatch(items, "bench", { grouped: false });
    outbox.close();
  }
}

async function time(cmd: string[]): Promise<number[]> {
  const samples: number[] = [];
  for (let i = 0; i < RUNS + 1; i++) {
    const start = performance.now();
    const proc = Bun.spawn(cmd, { stdout: "pipe", stderr: "pipe" });
    await new Response(proc.stdout).arrayBuffer();
    const code = await proc.exited;
    if (code !== 0) throw new Error(`${cmd.join(" ")} exited ${code}: ${await new Response(proc.stderr).text()}`);
    if (i > 0) samples.push(performance.now() - start); // the first run warms the page cache
  }
  return samples.sort((a, b) => a - b);
}

function report(name: string, sorted: number[]): void {
  const pick = (q: number) => Number(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!.toFixed(1));
  console.log(JSON.stringify({ bench: "cli", case: name, p50_ms: pick(0.5), p95_ms: pick(0.95), runs: sorted.length }));
}
