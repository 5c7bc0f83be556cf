// A held group in the application's own database, seen from the remote (`bun run bench:lanes-hold`).
// The application's database holds the outbox (db_file = that database); two tables `accounts` and
// `audit`, lanes = 16 each, PostgreSQL target. Producers in this process write a steady stream of
// transactions, each updating one to four of 50 accounts in both tables, every row keyed by its
// account; the drain runs in the background here. For HOLD_S seconds one account's next update is
// refused by the remote (a CHECK), then the CHECK goes and the drain is kicked for that key.
// One JSON line per run (connections = 1 and 4; transactions of 1–4 accounts, and of one account):
// {"bench":"lanes-hold","connections":…,"accounts_per_tx":"1-4"|"1","others_advanced":…,"others":49,
//  "updates_per_s_before":…,"updates_per_s_during":…,"updates_per_s_after":…,"exactly_once_in_order":true}
//   others_advanced: accounts other than the held one whose remote value moved during the hold;
//   updates_per_s_*: account updates landed on the remote per second, over the HOLD_S seconds before
//   the hold, during it, and after the kick (catching up). exactly_once_in_order: at the end every
//   account's remote value is its last update and its audit rows are every update once, in order.
// A transaction of several accounts links their lanes: one that includes a held lane waits with it
// and holds its other lanes behind it (per-lane order), so with 1–4 accounts a transaction the
// hold spreads over time; with one account per transaction only the held account's lane waits.
import { Database } from "bun:sqlite";
import fs from "node:fs";
import { defineConfig } from "../src/config/define.ts";
import { createWriters } from "../src/config/writers.ts";
import { OutboxSyncService } from "../src/drain/service.ts";
import { laneOf } from "../src/lane-key.ts";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { createPgDb } from "../test/support/server-db.ts";
import { benchLogger, sized } from "./support/smoke.ts";

const ACCOUNTS = 50;
const LANES = 16;
const HOLD_S = sized(5, 0.5);
const WARM_UP_MS = sized(1000, 200);
/** Transactions written per second: about 800 account updates a second with 1–4 accounts each. */
const TX_PER_S = 320;
const HELD = 7;
const round = (x: number) => Math.round(x * 10) / 10;
const keyOf = (id: number) => `account-${id}`;

/** A little PRNG, so every run writes the same transactions. */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => (s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32;
}

async function run(connections: number, maxPerTx: number) {
  const dir = fs.mkdtempSync("/tmp/sqloutbox-bench-lanes-hold-");
  const pg = await createPgDb("sqloutbox_bench");
  try {
    await pg.sql.unsafe("CREATE TABLE accounts (id integer PRIMARY KEY, n bigint NOT NULL)");
    await pg.sql.unsafe("CREATE TABLE audit (pos bigserial PRIMARY KEY, id integer NOT NULL, n bigint NOT NULL)");
    await pg.sql.unsafe(`INSERT INTO accounts SELECT g, 0 FROM generate_series(0, ${ACCOUNTS - 1}) g`);
    // The application's own database: its own table, and the outbox beside it.
    const appFile = `${dir}/app.db`;
    const app = new Database(appFile, { create: true });
    app.run("PRAGMA journal_mode = WAL");
    app.run("PRAGMA busy_timeout = 5000");
    app.run("CREATE TABLE balances (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)");
    for (let id = 0; id < ACCOUNTS; id++) app.run("INSERT INTO balances VALUES (?, 0)", [id]);
    const mw = new SQLMiddleware({ database: app });
    const config = defineConfig({
      app: {
        bench: {
          dbFile: appFile,
          flushInterval: 0.01,
          tableFlushThreshold: 1,
          tableMaxWait: 0,
          backoffUnitSeconds: 60, // the held group waits for the operator's kick
          db: {
            remote: {
              writer: "postgres",
              connection: { url: pg.url },
              connections,
              tables: [
                { name: "accounts", lanes: LANES },
                { name: "audit", lanes: LANES },
              ],
            },
          },
        },
      },
    });
    const values = new Array<number>(ACCOUNTS).fill(0);
    const next = rng(connections * 10 + maxPerTx);
    let updates = 0;
    const write = () => {
      const count = 1 + Math.floor(next() * maxPerTx);
      const ids = new Set<number>();
      while (ids.size < count) ids.add(Math.floor(next() * ACCOUNTS));
      mw.transaction(() => {
        for (const id of ids) {
          const n = ++values[id]!;
          app.run("UPDATE balances SET n = ? WHERE id = ?", [n, id]);
          mw.push("accounts", "UPDATE accounts SET n = ? WHERE id = ?", [n, id], { key: keyOf(id) });
          mw.push("audit", "INSERT INTO audit (id, n) VALUES (?, ?)", [id, n], { key: keyOf(id) });
          updates++;
        }
      });
    };
    const quiet = {
      ...benchLogger,
      warn: (m: string, ...r: unknown[]) => m.includes("held_") || benchLogger.warn(m, ...r),
    };
    write(); // the outbox's tables in the application's database, before the drain opens it
    const svc = new OutboxSyncService(config, await createWriters(config), { logger: quiet });
    await svc.start();
    const producer = setInterval(() => {
      for (let i = 0; i < TX_PER_S / 100; i++) write();
    }, 10);
    const remoteValues = async (): Promise<number[]> =>
      (await pg.sql.unsafe("SELECT id, n FROM accounts ORDER BY id").values()).map((r: unknown[]) => Number(r[1]));
    const landedUpdates = async () => Number((await pg.sql.unsafe("SELECT count(*) FROM audit").values())[0][0]);
    const rate = async (seconds: number) => {
      const before = await landedUpdates();
      await Bun.sleep(seconds * 1000);
      return (await landedUpdates()) - before;
    };
    await Bun.sleep(WARM_UP_MS);
    const before = await rate(HOLD_S);
    // The hold: the held account's next update is refused until the CHECK goes.
    await pg.sql.unsafe(
      `ALTER TABLE accounts ADD CONSTRAINT held_${HELD} CHECK (id <> ${HELD} OR n <= ${(await remoteValues())[HELD]})`,
    );
    const startValues = await remoteValues();
    const during = await rate(HOLD_S);
    const endValues = await remoteValues();
    const othersAdvanced = endValues.filter((v, id) => id !== HELD && v > startValues[id]!).length;
    await pg.sql.unsafe(`ALTER TABLE accounts DROP CONSTRAINT held_${HELD}`);
    const queue = new Outbox(appFile, "accounts");
    queue.retryHead(keyOf(HELD));
    queue.close();
    svc.retryNow();
    const after = await rate(HOLD_S);
    clearInterval(producer);
    const deadline = Date.now() + 60_000;
    while (svc.totalPending() > 0 && Date.now() < deadline) await Bun.sleep(50);
    const pending = svc.totalPending();
    await svc.stop(5000);
    const final = await remoteValues();
    const audit = (await pg.sql.unsafe("SELECT id, n FROM audit ORDER BY pos").values()) as unknown[][];
    const seen = new Array<number>(ACCOUNTS).fill(0);
    let ordered = audit.length === updates;
    const problems: string[] = ordered ? [] : [`${audit.length} audit rows for ${updates} updates`];
    for (const [id, n] of audit) {
      const want = ++seen[Number(id)]!;
      if (Number(n) !== want) {
        ordered = false;
        if (problems.length < 5) problems.push(`account ${id}: n ${n} where ${want} was next`);
      }
    }
    for (const [id, v] of final.entries())
      if (v !== values[id] && problems.length < 10)
        problems.push(`account ${id}: ${v} on the remote, ${values[id]} last`);
    if (problems.length > 0) console.error(`lanes-hold: ${problems.join("; ")}; ${pending} rows still pending`);
    const exact = problems.length === 0;
    console.log(
      JSON.stringify({
        bench: "lanes-hold",
        connections,
        accounts_per_tx: maxPerTx === 1 ? "1" : `1-${maxPerTx}`,
        held_lane_accounts:
          values.filter((_, id) => laneOf(keyOf(id), LANES) === laneOf(keyOf(HELD), LANES)).length - 1,
        others_advanced: othersAdvanced,
        others: ACCOUNTS - 1,
        updates_per_s_before: round(before / HOLD_S),
        updates_per_s_during: round(during / HOLD_S),
        updates_per_s_after: round(after / HOLD_S),
        exactly_once_in_order: exact,
      }),
    );
    app.close();
  } finally {
    closeSharedOutboxes();
    await pg.drop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const only = process.argv.slice(2).map(Number);
for (const connections of [1, 4])
  for (const maxPerTx of [4, 1])
    if (only.length === 0 || (only[0] === connections && only[1] === maxPerTx)) await run(connections, maxPerTx);
