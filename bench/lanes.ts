// What lanes cost and what they buy (`bun run bench:lanes`). A drain in this process (runOnce
// until done) over one queue file into a SQLite remote file (WAL) whose table has CHECK (n >= 0),
// through the ledger; 1 000 keys, every key's rows numbered 1, 2, … in push order. One JSON line each:
// {"bench":"lanes-poison","case":"clean"|"poison","lanes":64,"rows":…,"rows_per_s":…}   the rows of
//   every key outside one key's lane, delivered: "poison" pushes that key's first row with n = -1,
//   refused by the CHECK (backoff long enough to last the run), "clean" the same backlog without it.
//   rows_per_s: those rows over the time until the last of them landed (in "clean" the rows of the
//   poison's lane land too, interleaved: rows over the whole run).
// {"bench":"lanes-poison-ratio","poison_vs_clean":…,"poison_rows_landed_early":…,"order_ok":…}   the median of the rounds' paired ratios;
//   poison_rows_landed_early: rows of the poison key on the remote while its head was refused (must
//   be 0); order_ok: once the CHECK is gone and the drain kicked, every key — the poison's included —
//   landed exactly once, in order.
// {"bench":"lanes-drain","shape":"single"|"group","lanes":1|64,"rows":…,"rows_per_s":…}   the same
//   backlog drained with lanes = 64 and lanes = 1: single rows, or transactions of 10 rows over 2 keys.
// {"bench":"lanes-drain-ratio","shape":…,"lanes64_vs_lanes1":…}   the median of ROUNDS paired ratios (runs alternated);
//   the rows_per_s lines are each case's median.
import { Database } from "bun:sqlite";
import fs from "node:fs";
import { defineConfig } from "../src/config/define.ts";
import type { Logger } from "../src/logger.ts";
import { OutboxSyncService } from "../src/drain/service.ts";
import { laneOf } from "../src/lane-key.ts";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { createWriters } from "../src/config/writers.ts";
import { benchLogger, sized } from "./support/smoke.ts";

const KEYS = sized(1_000, 50);
const ROWS = sized(100_000, 400);
const ROUNDS = sized(7, 1);
const LANES = 64;
const INSERT = "INSERT INTO events (k, n, note) VALUES (?, ?, ?)";
const NOTE = "a short note about this row";
const round = (x: number) => Math.round(x * 100) / 100;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
/** The median of the ratios of runs made side by side (round r of each): drift on a noisy machine cancels within a pair. */
const pairedRatio = (xs: number[], ys: number[]) => median(xs.map((x, i) => x / ys[i]!));
const keyOf = (i: number) => `customer-${i % KEYS}`;
const POISON = keyOf(7);
const POISON_LANE = laneOf(POISON, LANES)!;

/** benchLogger, but the poison's own refusal is what the bench asks for: not a complaint. */
const quietAboutPoison: Logger = {
  ...benchLogger,
  warn: (message, ...rest) => {
    if (!message.includes("CHECK constraint failed")) benchLogger.warn(message, ...rest);
  },
};

interface Run {
  dir: string;
  remote: string;
  svc: OutboxSyncService;
}

/** A fresh queue and remote; `fill` pushes the backlog (untimed) before the drain starts. */
async function setup(lanes: number, fill: (mw: SQLMiddleware) => void): Promise<Run> {
  const dir = fs.mkdtempSync("/tmp/sqloutbox-bench-lanes-");
  const remote = `${dir}/remote.db`;
  const db = new Database(remote, { create: true });
  db.run("PRAGMA journal_mode = WAL");
  db.run(
    "CREATE TABLE events (pos INTEGER PRIMARY KEY, k TEXT NOT NULL, n INTEGER NOT NULL CHECK (n >= 0), note TEXT)",
  );
  db.close();
  const mw = new SQLMiddleware({ dbDir: `${dir}/queue` });
  fill(mw);
  closeSharedOutboxes();
  const config = defineConfig({
    app: {
      bench: {
        dbDir: `${dir}/queue`,
        backoffUnitSeconds: 600, // a refused head waits for the kick
        db: { remote: { writer: "sqlite", connection: { path: remote }, tables: [{ name: "events", lanes }] } },
      },
    },
  });
  const svc = new OutboxSyncService(config, await createWriters(config), { logger: quietAboutPoison });
  return { dir, remote, svc };
}

async function close(run: Run): Promise<void> {
  await run.svc.stop(2000);
  fs.rmSync(run.dir, { recursive: true, force: true });
}

const delivered = (svc: OutboxSyncService) => svc.views().reduce((n, v) => n + v.totals.delivered, 0);

/** Cycles the drain until `rows` rows are delivered; seconds taken. */
async function drainUntil(svc: OutboxSyncService, rows: number): Promise<number> {
  const start = performance.now();
  for (let idle = 0; delivered(svc) < rows; ) {
    const cycle = await svc.runOnce();
    if (cycle.delivered === 0 && ++idle > 50) throw new Error(`the drain stopped at ${delivered(svc)} of ${rows} rows`);
  }
  return (performance.now() - start) / 1000;
}

function remoteRows(path: string): Array<[string, number]> {
  const db = new Database(path, { readonly: true });
  try {
    return db
      .query<{ k: string; n: number }, []>("SELECT k, n FROM events ORDER BY pos")
      .all()
      .map((r) => [r.k, r.n]);
  } finally {
    db.close();
  }
}

/** Every key's n in landing order is 1, 2, 3, … (the poison's -1 first, once fixed): per-key order, nothing twice. */
function inOrder(rows: Array<[string, number]>, expected: number, poisoned: boolean): boolean {
  const next = new Map<string, number>();
  for (const [k, n] of rows) {
    const want = next.get(k) ?? (poisoned && k === POISON ? -1 : 1);
    if (n !== want) return false;
    next.set(k, want === -1 ? 1 : want + 1);
  }
  return rows.length === expected;
}

/** The poison case: rows of the keys outside the poison's lane, and their rate. */
async function poison(withPoison: boolean): Promise<{ rowsPerS: number; early: number; ordered: boolean }> {
  const run = await setup(LANES, (mw) => {
    if (withPoison) mw.push("events", INSERT, [POISON, -1, NOTE], { key: POISON });
    const seen = new Map<string, number>();
    for (let i = 0; i < ROWS; i++) {
      const k = keyOf(i);
      const n = (seen.get(k) ?? 0) + 1;
      seen.set(k, n);
      mw.push("events", INSERT, [k, n, NOTE], { key: k });
    }
  });
  try {
    let outside = 0;
    for (let i = 0; i < ROWS; i++) if (laneOf(keyOf(i), LANES) !== POISON_LANE) outside++;
    const seconds = await drainUntil(run.svc, withPoison ? outside : ROWS);
    const rowsPerS = (withPoison ? outside : ROWS) / seconds;
    if (!withPoison) return { rowsPerS, early: 0, ordered: inOrder(remoteRows(run.remote), ROWS, false) };
    for (let i = 0; i < 3; i++) await run.svc.runOnce(); // the held lane stays held
    const early = remoteRows(run.remote).filter(([k]) => k === POISON).length;
    // The operator's fix: the CHECK goes (SQLite: the table rebuilt without it), then a kick.
    const db = new Database(run.remote);
    db.run("BEGIN IMMEDIATE");
    db.run("CREATE TABLE fixed (pos INTEGER PRIMARY KEY, k TEXT NOT NULL, n INTEGER NOT NULL, note TEXT)");
    db.run("INSERT INTO fixed SELECT * FROM events");
    db.run("DROP TABLE events");
    db.run("ALTER TABLE fixed RENAME TO events");
    db.run("COMMIT");
    db.close();
    const queue = new Outbox(`${run.dir}/queue/events.db`, "events");
    queue.retryHead(); // `sqloutbox kick`: the head's backoff ends in its file, and the drain is told
    queue.close();
    run.svc.retryNow();
    await drainUntil(run.svc, ROWS + 1);
    return { rowsPerS, early, ordered: inOrder(remoteRows(run.remote), ROWS + 1, true) };
  } finally {
    await close(run);
  }
}

/** The lanes = 64 vs 1 case: the same backlog, single rows or transactions of 10 rows over 2 keys. */
async function drainRate(lanes: number, shape: "single" | "group"): Promise<number> {
  const run = await setup(lanes, (mw) => {
    if (shape === "single") {
      for (let i = 0; i < ROWS; i++) mw.push("events", INSERT, [keyOf(i), i + 1, NOTE], { key: keyOf(i) });
      return;
    }
    for (let g = 0; g < ROWS / 10; g++)
      mw.transaction(() => {
        for (let j = 0; j < 10; j++) {
          const k = keyOf(2 * g + (j % 2)); // two keys per transaction
          mw.push("events", INSERT, [k, g * 10 + j + 1, NOTE], { key: k });
        }
      });
  });
  try {
    return ROWS / (await drainUntil(run.svc, ROWS));
  } finally {
    await close(run);
  }
}

const poisonRuns: Record<"clean" | "poison", number[]> = { clean: [], poison: [] };
let early = 0;
let ordered = true;
for (let r = 0; r < ROUNDS; r++) {
  for (const c of ["clean", "poison"] as const) {
    const got = await poison(c === "poison");
    poisonRuns[c].push(got.rowsPerS);
    early += got.early;
    ordered &&= got.ordered;
  }
}
for (const c of ["clean", "poison"] as const)
  console.log(
    JSON.stringify({
      bench: "lanes-poison",
      case: c,
      lanes: LANES,
      rows: ROWS,
      rows_per_s: Math.round(median(poisonRuns[c])),
    }),
  );
console.log(
  JSON.stringify({
    bench: "lanes-poison-ratio",
    poison_vs_clean: round(pairedRatio(poisonRuns.poison, poisonRuns.clean)),
    poison_rows_landed_early: early,
    order_ok: ordered,
  }),
);

for (const shape of ["single", "group"] as const) {
  const rates: Record<number, number[]> = { 1: [], [LANES]: [] };
  // Which goes first alternates, so neither always runs on the other's leftovers (its files' writeback, a collection due).
  for (let r = 0; r < ROUNDS; r++)
    for (const lanes of r % 2 === 0 ? [LANES, 1] : [1, LANES]) rates[lanes]!.push(await drainRate(lanes, shape));
  for (const lanes of [1, LANES])
    console.log(
      JSON.stringify({ bench: "lanes-drain", shape, lanes, rows: ROWS, rows_per_s: Math.round(median(rates[lanes]!)) }),
    );
  console.log(
    JSON.stringify({
      bench: "lanes-drain-ratio",
      shape,
      lanes64_vs_lanes1: round(pairedRatio(rates[LANES]!, rates[1]!)),
    }),
  );
}
if (early > 0 || !ordered) process.exitCode = 1; // a broken order is a failed bench, not a figure
