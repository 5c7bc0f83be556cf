// Where a pushMany's time goes, stage by stage (`bun run bench:pushmany-profile`). For each call
// size of CALL_SIZES, a child process pushes the bench:peers statement (`INSERT INTO orders (id,
// total, note) VALUES (?, ?, ?)`, three arguments, one table) as bench:peers does — FILE_ITEMS
// statements to a fresh file, file after file — for SECONDS under Bun's sampling CPU profiler (a
// sample every 100 µs). Each sample taken inside the timed calls is charged to the stage of the
// innermost frame that has one (a native call to its caller's), and each stage's share of those
// samples is applied to the calls' own time per item. One JSON line per stage:
// {"bench":"pushmany-profile","batch_size":500|10,"stage":…,"per_item_us":…,"share_pct":…}
//   statement check     the SQL text checked: sql/statement-cache.ts, statement.ts, the lexer, the memo
//   argument encoding   payload.ts (encodeArgs and the JSON.stringify it calls)
//   trace context       trace-context.ts, active-trace.ts, lane-key.ts, SQLMiddleware's #context
//   the door            the rest of the call and its items: middleware.ts, outbox.ts, queue-file.ts,
//                       queue-view.ts, open-queues.ts, table-name.ts
//   group bookkeeping   append.ts and queue-db.ts but COMMIT: BEGIN, the tail, next seq and ord, counters
//   row insert          the layout's row INSERT (layout-lean.ts / layout-legacy.ts `insert`) into SQLite
//   commit              QueueDb.commit: the COMMIT (the WAL written) and the group's record
//   other               the loop itself, and what no frame above claims
// then {"bench":"pushmany-profile","batch_size":…,"stage":"total","per_item_us":…,"samples":…}: the
// loop's own time per item (a mean: it holds the WAL checkpoints the commits ran, which a median of
// calls, as bench:peers gives, leaves out).
// The profiler slows what it samples a little; the shares, not the absolute figures, are the point
// (bench:peers has the figures).
import fs from "node:fs";
import path from "node:path";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { makeTempDir } from "../test/support/tmp.ts";
import { sized } from "./support/smoke.ts";

const SQL = "INSERT INTO orders (id, total, note) VALUES (?, ?, ?)";
const ARGS = [123456, 99.99, "a short note"];
/** Statements per call: the bulk case, and a small one where the per-call work shows. */
const CALL_SIZES = [500, 10];
/** Statements per file, as bench:peers writes to each of its files. */
const FILE_ITEMS = sized(20_000, 2_000);
const SECONDS = sized(8, 0.3);

const STAGES = [
  "statement check",
  "argument encoding",
  "trace context",
  "the door",
  "group bookkeeping",
  "row insert",
  "commit",
  "other",
] as const;
type Stage = (typeof STAGES)[number];

/** The stage of one frame, or null when it has none (a native call, the bench): its caller's then decides. */
function stageOf(url: string, name: string): Stage | null {
  const file = url.slice(url.lastIndexOf("/") + 1);
  switch (file) {
    case "layout-lean.ts":
    case "layout-legacy.ts":
      return name === "insert" ? "row insert" : "group bookkeeping";
    case "queue-db.ts":
      return name === "commit" ? "commit" : "group bookkeeping";
    case "append.ts":
      return "group bookkeeping";
    case "statement-cache.ts":
    case "statement.ts":
    case "lexer.ts":
    case "dialect.ts":
    case "emit.ts":
    case "bounded-memo.ts":
      return "statement check";
    case "payload.ts":
      return "argument encoding";
    case "":
      // JSON.stringify on this path is encodeArgs's, wherever the JIT inlined encodeArgs (into #payload).
      return name === "stringify" ? "argument encoding" : null;
    case "trace-context.ts":
    case "active-trace.ts":
    case "lane-key.ts":
      return "trace context";
    case "middleware.ts":
      return name === "#context" ? "trace context" : "the door";
    case "outbox.ts":
    case "queue-file.ts":
    case "queue-view.ts":
    case "open-queues.ts":
    case "table-name.ts":
      return "the door";
    default:
      return null;
  }
}

/** The child: FILE_ITEMS statements in calls of `size` to a fresh file (after two untimed calls), file after file, for SECONDS; prints their time per item. */
function child(dir: string, size: number): void {
  const stmts = Array.from({ length: size }, () => [SQL, ARGS] as const);
  const calls = FILE_ITEMS / size;
  let ms = 0;
  let items = 0;
  for (let file = 0; ms < SECONDS * 1000; file++) {
    const mw = new SQLMiddleware({ dbDir: path.join(dir, `${file}`) });
    for (let i = 0; i < 2; i++) mw.pushMany("orders", stmts);
    ms += profiledCalls(mw, stmts, calls);
    items += calls * size;
    closeSharedOutboxes();
    fs.rmSync(path.join(dir, `${file}`), { recursive: true });
  }
  console.log(JSON.stringify({ per_item_us: (ms * 1000) / items }));
}

/** The calls the profile is read from (by this function's name): their time, in milliseconds. */
function profiledCalls(mw: SQLMiddleware, stmts: ReadonlyArray<readonly [string, unknown[]]>, calls: number): number {
  const start = performance.now();
  for (let i = 0; i < calls; i++) mw.pushMany("orders", stmts);
  return performance.now() - start;
}

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string };
  children?: number[];
}

/** Each stage's share of the samples taken inside profiledCalls, from a .cpuprofile. */
function shares(profile: { nodes: ProfileNode[]; samples: number[] }): { counts: Map<Stage, number>; total: number } {
  const parent = new Map<number, number>();
  const byId = new Map<number, ProfileNode>();
  for (const node of profile.nodes) {
    byId.set(node.id, node);
    for (const c of node.children ?? []) parent.set(c, node.id);
  }
  const verdict = new Map<number, Stage | null>(); // per leaf node: its stage, or null outside the loop
  const counts = new Map<Stage, number>(STAGES.map((s) => [s, 0]));
  let total = 0;
  for (const leaf of profile.samples) {
    if (!verdict.has(leaf)) {
      let stage: Stage | null = null;
      let inLoop = false;
      for (let id: number | undefined = leaf; id !== undefined; id = parent.get(id)) {
        const { url, functionName } = byId.get(id)!.callFrame;
        if (functionName === "profiledCalls") {
          inLoop = true;
          break;
        }
        stage ??= stageOf(url, functionName);
      }
      verdict.set(leaf, inLoop ? (stage ?? "other") : null);
    }
    const stage = verdict.get(leaf);
    if (stage == null) continue;
    counts.set(stage, counts.get(stage)! + 1);
    total++;
  }
  return { counts, total };
}

/** One profiled child for calls of `size`; its lines. */
function profile(tmp: string, size: number): void {
  const profiles = path.join(tmp, `profiles-${size}`);
  const run = Bun.spawnSync(
    [
      "bun",
      "--cpu-prof",
      "--cpu-prof-interval=100",
      `--cpu-prof-dir=${profiles}`,
      import.meta.path,
      "--child",
      path.join(tmp, `queue-${size}`),
      `${size}`,
    ],
    { stdout: "pipe", stderr: "inherit", env: process.env },
  );
  if (run.exitCode !== 0) throw new Error(`the profiled child exited with ${run.exitCode}`);
  const { per_item_us: perItem } = JSON.parse(run.stdout.toString().trim().split("\n").at(-1)!) as {
    per_item_us: number;
  };
  const file = fs.readdirSync(profiles).find((f) => f.endsWith(".cpuprofile"));
  if (file === undefined) throw new Error("the profiled child wrote no .cpuprofile");
  const { counts, total } = shares(JSON.parse(fs.readFileSync(path.join(profiles, file), "utf8")));
  if (total === 0) throw new Error("no sample was taken inside the loop");
  const round = (x: number, digits: number) => Math.round(x * 10 ** digits) / 10 ** digits;
  const line = { bench: "pushmany-profile", batch_size: size };
  for (const stage of STAGES) {
    const share = counts.get(stage)! / total;
    console.log(
      JSON.stringify({ ...line, stage, per_item_us: round(share * perItem, 3), share_pct: round(share * 100, 1) }),
    );
  }
  console.log(JSON.stringify({ ...line, stage: "total", per_item_us: round(perItem, 3), samples: total }));
}

if (process.argv[2] === "--child") {
  child(process.argv[3]!, Number(process.argv[4]));
} else {
  const tmp = makeTempDir("sqloutbox-bench-profile-");
  try {
    for (const size of CALL_SIZES) profile(tmp.path, size);
  } finally {
    tmp.cleanup();
  }
}
