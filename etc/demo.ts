// `bun run demo`: the whole pipeline on one machine, no external database. A producer writes
// events into three tables while `sqloutbox runservice` (a child process, as in production)
// drains them into a local SQLite "remote"; a live progress display, then the final `status`
// and the remote row counts. Everything happens in a temp dir (kept with --keep).
import { Database } from "bun:sqlite";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { healthAll } from "../src/outbox/health.ts";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { print, renderTable } from "../src/cli/text-output.ts";

const TABLES = {
  orders: {
    ddl: "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL, total REAL NOT NULL)",
    count: 3000,
  },
  payments: {
    ddl: "CREATE TABLE payments (id INTEGER PRIMARY KEY, order_id INTEGER NOT NULL, amount REAL NOT NULL)",
    count: 3000,
  },
  events: { ddl: "CREATE TABLE events (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, detail TEXT)", count: 6000 },
} as const;
type Table = keyof typeof TABLES;
const NAMES = Object.keys(TABLES) as Table[];
const PRODUCE_MS = 4000; // spread the writes so the drain visibly keeps up while they arrive
const TIMEOUT_MS = 60_000;

const keep = process.argv.includes("--keep");
const tty = Boolean(process.stdout.isTTY);
const bin = path.join(import.meta.dir, "..", "src", "cli", "bin.ts");
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sqloutbox-demo-"));
const dbDir = path.join(dir, "queue");
const remoteFile = path.join(dir, "remote.db");
const configFile = path.join(dir, "outbox.toml");

print(`sqloutbox demo in ${dir}`);
print(`  producer → ${dbDir}/{${NAMES.join(",")}}.db → runservice → ${remoteFile} (writer "sqlite")\n`);

fs.writeFileSync(
  configFile,
  `# Written by \`bun run demo\`: one app, one sqlite target, flushing fast.
[app.demo]
db_dir = "queue"
flush_interval = 0.1
table_flush_threshold = 100
table_max_wait = 0.5

[app.demo.db.local]
writer = "sqlite"
tables = [${NAMES.map((t) => `"${t}"`).join(", ")}]

[app.demo.db.local.connection]
path = "remote.db"
`,
);
const remote = new Database(remoteFile);
remote.run("PRAGMA journal_mode = WAL");
for (const t of NAMES) remote.run(TABLES[t].ddl);
remote.close();

const drain = Bun.spawn([process.execPath, bin, "runservice", "--config", configFile], {
  env: { ...process.env, LOG_LEVEL: "warn", LOG_FORMAT: "pretty" },
  stdout: "inherit",
  stderr: "inherit",
});

const produced: Record<Table, number> = { orders: 0, payments: 0, events: 0 };
const started = Date.now();
let failed: string | null = null;
try {
  await Promise.race([
    produceAndWatch(),
    drain.exited.then((code) => {
      throw new Error(`runservice exited early with code ${code}`);
    }),
  ]);
} catch (err) {
  failed = err instanceof Error ? err.message : String(err);
}
closeSharedOutboxes();
drain.kill("SIGTERM");
const drainCode = await drain.exited;
if (!failed && drainCode !== 0) failed = `runservice exited with code ${drainCode} after SIGTERM`;

print("\n$ sqloutbox status --config outbox.toml");
const status = Bun.spawnSync([process.execPath, bin, "status", "--config", configFile], {
  stdout: "pipe",
  stderr: "inherit",
});
print(status.stdout.toString().trimEnd());

const counts = remoteCounts();
print("\nremote row counts (remote.db):");
print(
  renderTable(
    [{ header: "table" }, { header: "produced", right: true }, { header: "remote", right: true }, { header: "match" }],
    NAMES.map((t) => [t, String(produced[t]), String(counts[t]), counts[t] === produced[t] ? "yes" : "NO"]),
  ),
);
const allMatch = NAMES.every((t) => counts[t] === produced[t]);
print(
  `\n${allMatch && !failed ? "ok" : "FAILED"}: ${NAMES.reduce((n, t) => n + produced[t], 0)} events produced, ${NAMES.reduce((n, t) => n + counts[t], 0)} delivered in ${((Date.now() - started) / 1000).toFixed(1)} s${failed ? ` (${failed})` : ""}`,
);
if (keep) print(`files kept in ${dir}`);
else fs.rmSync(dir, { recursive: true, force: true });
process.exit(allMatch && !failed ? 0 : 1);

/** Writes every table's events over PRODUCE_MS while showing progress, then waits for the drain to catch up. */
async function produceAndWatch(): Promise<void> {
  const producer = new SQLMiddleware({ dbDir, source: "demo" });
  const total = NAMES.reduce((n, t) => n + TABLES[t].count, 0);
  let lastPlain = 0;
  let drawn = 0;
  const show = (final = false) => {
    const pendingBy = pendingByTable();
    const remote = remoteCounts();
    const pending = NAMES.reduce((n, t) => n + pendingBy[t], 0);
    const delivered = NAMES.reduce((n, t) => n + remote[t], 0);
    const producedNow = NAMES.reduce((n, t) => n + produced[t], 0);
    const line = (name: string, p: number, of: number, q: number, d: number) =>
      `${name.padEnd(9)} produced ${String(p).padStart(5)}/${String(of).padEnd(5)}  pending ${String(q).padStart(5)}  delivered ${String(d).padStart(5)}  ${bar(d / of)}`;
    if (tty) {
      // Redraw the per-table block in place: cursor up over the previous frame.
      const frame = [
        ...NAMES.map((t) => line(t, produced[t], TABLES[t].count, pendingBy[t], remote[t])),
        line("total", producedNow, total, pending, delivered),
      ];
      process.stdout.write(`${drawn > 0 ? `\u001B[${drawn}A` : ""}${frame.map((l) => `\r${l}\u001B[K`).join("\n")}\n`);
      drawn = frame.length;
    } else if (final || Date.now() - lastPlain >= 1000) {
      lastPlain = Date.now();
      print(line("total", producedNow, total, pending, delivered));
    }
    return { pending, delivered };
  };
  let nextShow = 0;
  while (NAMES.some((t) => produced[t] < TABLES[t].count)) {
    // Produce on schedule: by now, this fraction of every table should be written.
    const due = Math.min(1, (Date.now() - started) / PRODUCE_MS);
    for (const t of NAMES) {
      const target = Math.floor(TABLES[t].count * due);
      while (produced[t] < target) pushOne(producer, t, ++produced[t]);
    }
    if (Date.now() >= nextShow) {
      show();
      nextShow = Date.now() + 100;
    }
    await Bun.sleep(10);
  }
  while (Date.now() - started < TIMEOUT_MS) {
    const { pending, delivered } = show();
    if (pending === 0 && delivered === total) {
      show(true);
      return;
    }
    await Bun.sleep(100);
  }
  show(true);
  throw new Error(`not everything was delivered within ${TIMEOUT_MS / 1000} s`);
}

function pushOne(producer: SQLMiddleware, table: Table, id: number): void {
  if (table === "orders")
    producer.push("orders", "INSERT INTO orders (id, customer, total) VALUES (?, ?, ?)", [
      id,
      `customer-${id % 97}`,
      (id % 500) + 0.99,
    ]);
  else if (table === "payments")
    producer.push("payments", "INSERT INTO payments (id, order_id, amount) VALUES (?, ?, ?)", [
      id,
      id,
      (id % 500) + 0.99,
    ]);
  else
    producer.push("events", "INSERT INTO events (id, kind, detail) VALUES (?, ?, ?)", [
      id,
      id % 3 === 0 ? "login" : "click",
      JSON.stringify({ n: id }),
    ]);
}

function pendingByTable(): Record<Table, number> {
  const out: Record<Table, number> = { orders: 0, payments: 0, events: 0 };
  if (!fs.existsSync(dbDir)) return out;
  for (const h of healthAll(dbDir)) if (h.namespace in out) out[h.namespace as Table] = h.depth;
  return out;
}

function remoteCounts(): Record<Table, number> {
  const db = new Database(remoteFile, { readonly: true });
  try {
    db.run("PRAGMA busy_timeout = 5000");
    return Object.fromEntries(
      NAMES.map((t) => [t, db.query<{ n: number }, []>(`SELECT count(*) AS n FROM ${t}`).get()!.n]),
    ) as Record<Table, number>;
  } finally {
    db.close();
  }
}

function bar(fraction: number, width = 24): string {
  const filled = Math.round(Math.max(0, Math.min(1, fraction)) * width);
  return `[${"#".repeat(filled)}${".".repeat(width - filled)}] ${String(Math.floor(fraction * 100)).padStart(3)}%`;
}
