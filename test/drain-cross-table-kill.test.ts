// Transactions across tables (one db_file per host) under SIGKILLs of the drains, from a fleet of
// two hosts into the same remote tables, a foreign key between them: after every kill the remote
// holds no half transaction (each order's `item_count` equals its item count), and in the end it equals
// the serial application of every transaction each host committed — nothing lost, nothing twice.
// Also with each host's db_file the application's own database, and batches large enough that
// their confirmations go in parts (100 rows each there): a kill between two parts loses nothing.
// With lanes and a poison window: for a few kills one key's transaction (across both tables) fails
// at the remote; while it is held, the other lanes of both tables keep landing — also with
// connections = 4 through a link that drops its connections — and after the fix it lands once.
import { describe, expect, test } from "bun:test";
import fs from "node:fs";
import { laneOf } from "../src/lane-key.ts";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { type Engine, openRemote, type ServerRemote } from "./support/remote.ts";
import { startTcpProxy, throughProxy } from "./support/tcp-proxy.ts";
import { ORDER_SCHEMA, orderOracle } from "./support/order-mix.ts";
import { describeSlow } from "./support/slow.ts";
import { waitFor } from "./support/wait.ts";
import { drainSide } from "./support/queue.ts";

const cleanups = cleanupsAfterEach();

const KILLS = Number(process.env.SQLOUTBOX_KILLS ?? 12);
const HOSTS = 2;

describeSlow(
  "transactions across tables under SIGKILL, from a fleet",
  "kill two hosts' drains 12 times per engine while their producers commit transactions across tables",
  () => {
    describe.each([
      ["sqlite", 1, false, false, 1],
      ["libsql-http", 1, false, false, 1],
      ["postgres", 1, false, false, 1],
      ["mysql", 1, false, false, 1],
      // With lanes, each transaction spans the keys of its order and its new items (three keys,
      // two tables): per-key order and whole transactions across lanes, under the same kills.
      ["sqlite", 8, false, false, 1],
      ["postgres", 8, false, false, 1],
      ["mysql", 8, false, false, 1],
      ["sqlite", 1, true, false, 1],
      ["postgres", 1, true, false, 1],
      // A poison window in one lane; on PostgreSQL also 4 connections through a link that drops them.
      ["sqlite", 8, false, true, 1],
      ["postgres", 8, false, true, 4],
    ] as Array<[Engine, number, boolean, boolean, number]>)(
      "delivered to %s, lanes = %d, in the application's database: %p, a poison window: %p, connections = %d",
      (engine, lanes, embedded, poisoned, connections) => {
        test(`${KILLS} kills of two hosts' drains: never half a transaction on the remote, in the end every transaction once`, async () => {
          const dir = tempDirCleanedBy(cleanups);
          const remote = await openRemote(engine, { cleanups, foreignKeys: true });
          for (const ddl of ORDER_SCHEMA) await remote.exec(ddl);
          const seed = 1 + Math.floor(Math.random() * 1_000_000);
          const stopFile = dir.file("stop");
          let connection = remote.connection;
          const proxy =
            connections > 1 ? startTcpProxy((remote as ServerRemote).port, (remote as ServerRemote).host) : null;
          if (proxy !== null) {
            cleanups.push(() => proxy.close());
            connection = { url: throughProxy((remote as ServerRemote).url, proxy.port) };
          }
          // The poison: its own key, in a lane the producers' keys keep out of (so what waits is its
          // group alone). Until the test removes the stray rows, the remote refuses its item (id -1).
          // (Only with a poison window: a table of fewer lanes has no lane 5 to find a key for.)
          const POISON_LANE = 5;
          let poisonKey = "poison";
          while (poisoned && laneOf(poisonKey, lanes) !== POISON_LANE) poisonKey += "!";
          const poison = poisoned ? { from: 2, to: 5, seq: 0 } : null;
          const hosts = Array.from({ length: HOSTS }, (_, host) => ({
            host,
            dbFile: dir.file(`host-${host}/outbox.db`),
          }));
          const spawnDrain = (dbFile: string) =>
            Bun.spawn(
              [
                "bun",
                `${import.meta.dir}/support/children/drain-child.ts`,
                JSON.stringify({
                  dbFile,
                  targets: {
                    r: {
                      writer: remote.writer,
                      connection,
                      connections,
                      tables: [
                        { name: "orders", lanes },
                        { name: "order_items", lanes },
                      ],
                    },
                  },
                  // Every kill mid-batch charges the head once: "forever" keeps the test about exactly-once.
                  // In the application's database: rows gather for 50 ms, so slices of hundreds of rows are confirmed in parts.
                  tuning: {
                    flushInterval: 0.005,
                    tableFlushThreshold: embedded ? 2_000 : 1,
                    tableMaxWait: embedded ? 0.05 : 0,
                    batchSize: embedded ? 1_000 : 12,
                    maxAttempts: null,
                    backoffUnitSeconds: 0.01,
                    outageBackoffCapMinutes: 0.005,
                  },
                }),
              ],
              { stdout: "pipe", stderr: "pipe" },
            );
          const producers = hosts.map(({ host, dbFile }) =>
            Bun.spawn(
              [
                "bun",
                `${import.meta.dir}/support/children/order-mix-producer.ts`,
                JSON.stringify({
                  dbFile,
                  seed,
                  host,
                  hosts: HOSTS,
                  stopFile,
                  keys: lanes > 1,
                  embedded,
                  ...(poisoned && { avoidLane: [lanes, POISON_LANE] }),
                }),
              ],
              { stdout: "pipe", stderr: "pipe" },
            ),
          );
          cleanups.push(() => {
            for (const p of producers) p.kill("SIGKILL");
          });
          const halfApplied =
            "SELECT o.id FROM orders o WHERE o.item_count <> (SELECT count(*) FROM order_items i WHERE i.order_id = o.id)";
          /** Host 0's ledger rows (its origin's), by name. */
          const ledgerOfHost0 = async () => {
            const q = new Outbox(hosts[0]!.dbFile, "orders");
            const origin = q.origin;
            q.close();
            const [ph] = remote.dialect === "postgres" ? ["$1"] : ["?"];
            const rows = await remote.rows(`SELECT namespace, through FROM sqloutbox_ledger WHERE origin = ${ph}`, [
              origin,
            ]);
            return new Map(rows.map(([n, t]) => [String(n), Number(t)]));
          };
          /** Host 0's ledger rows of the lanes other than the poison's in both tables. */
          const OTHER_LANES = ["orders", "order_items"].flatMap((t) =>
            Array.from({ length: lanes }, (_, l) => `${t}#${l}`).filter((r) => !r.endsWith(`#${POISON_LANE}`)),
          );
          /** Those that applied rows committed after the poison's transaction. */
          const movedPastPoison = async () => {
            const now = await ledgerOfHost0();
            return OTHER_LANES.filter((r) => (now.get(r) ?? 0) > poison!.seq);
          };
          let interrupted = 0;
          for (let kill = 0; kill < KILLS; kill++) {
            if (poison !== null && kill === poison.from) {
              // The window opens: the stray rows that refuse the poison's item, then its transaction.
              await remote.exec("INSERT INTO orders (id, total, item_count) VALUES (-2, 0, 1)");
              await remote.exec("INSERT INTO order_items (id, order_id, qty) VALUES (-1, -2, 0)");
              const mw = new SQLMiddleware({ dbFile: hosts[0]!.dbFile, source: "poison" });
              mw.transaction(() => {
                poison.seq = mw.push(
                  "orders",
                  "INSERT INTO orders (id, total, item_count) VALUES (?, ?, ?)",
                  [-1, 10, 1],
                  { key: poisonKey },
                );
                mw.push("order_items", "INSERT INTO order_items (id, order_id, qty) VALUES (?, ?, ?)", [-1, -1, 1], {
                  key: poisonKey,
                });
              });
              closeSharedOutboxes();
            }
            if (poison !== null && kill === poison.to) {
              // While it was held, the other lanes of both tables kept landing rows committed after it
              // (at least half of them did), its own lane did not pass it, nothing of it landed.
              const now = await ledgerOfHost0();
              const moved = await movedPastPoison();
              expect(moved.length, `lanes that moved during the hold: ${moved.join(", ")}`).toBeGreaterThanOrEqual(
                Math.ceil(OTHER_LANES.length / 2),
              );
              for (const t of ["orders", "order_items"])
                expect(now.get(`${t}#${POISON_LANE}`) ?? 0).toBeLessThan(poison.seq);
              expect(await remote.ints("SELECT count(*) FROM orders WHERE id = -1")).toEqual([[0]]);
              // The fix: the stray rows go; its backoff runs out and it lands with the kills going on.
              await remote.exec("DELETE FROM order_items WHERE id = -1");
              await remote.exec("DELETE FROM orders WHERE id = -2");
            }
            // Both hosts drain at once; one of them is killed mid-flight, in turn.
            const drains = hosts.map((h) => spawnDrain(h.dbFile));
            const victim = drains[kill % HOSTS]!;
            // Killed once it delivers (it says "started"), not while a loaded machine still starts it.
            await Promise.race([victim.stdout.getReader().read(), Bun.sleep(10_000)]);
            await Bun.sleep(20 + Math.random() * 200);
            // The window's last drain runs until the other lanes passed the poison (or the check fails).
            if (poison !== null && kill === poison.to - 1)
              await waitFor(
                async () => (await movedPastPoison()).length >= OTHER_LANES.length / 2,
                "the other lanes",
                20_000,
              ).catch(() => {});
            if (proxy !== null && kill % 2 === 1) {
              // The link drops every connection mid-flight, then comes back.
              proxy.cut();
              await Bun.sleep(30);
              proxy.restore();
              await Bun.sleep(20 + Math.random() * 100);
            }
            victim.kill("SIGKILL");
            await victim.exited;
            for (const d of drains) d.kill("SIGKILL");
            await Promise.all(drains.map((d) => d.exited));
            // A kill right after a remote commit or during one: the remote still holds whole transactions only.
            expect({ kill, half: await remote.ints(halfApplied) }).toEqual({ kill, half: [] });
            // Both drains died by SIGKILL: in either file, a table whose head was sent is a batch cut in flight.
            for (const { dbFile } of hosts) {
              if (!fs.existsSync(dbFile)) continue;
              for (const table of ["orders", "order_items"]) {
                const q = new Outbox(dbFile, table);
                const head = q.head();
                if (head !== null && head.seq <= drainSide(q).sentMark()) interrupted += 1; // a sent batch left unconfirmed
                q.close();
              }
            }
          }
          fs.writeFileSync(stopFile, "");
          const committed: number[] = [];
          for (const p of producers) {
            // A producer that failed says why: its exit code and what it printed.
            expect({ exit: await p.exited, stderr: await new Response(p.stderr).text() }).toEqual({
              exit: 0,
              stderr: "",
            });
            committed.push(Number((await new Response(p.stdout).text()).split(" ")[1]));
          }
          expect(Math.min(...committed)).toBeGreaterThan(20);

          const finals = hosts.map((h) => spawnDrain(h.dbFile));
          cleanups.push(() => {
            for (const f of finals) f.kill("SIGKILL");
          });
          const queues = hosts.flatMap((h) => ["orders", "order_items"].map((t) => new Outbox(h.dbFile, t)));
          cleanups.push(() => {
            for (const q of queues) q.close();
          });
          await waitFor(() => queues.every((q) => q.pendingCount() === 0), "the final drains", 60_000);
          for (const f of finals) f.kill("SIGTERM");
          for (const f of finals) expect(await f.exited).toBe(0);

          expect(interrupted).toBeGreaterThan(0); // the kills did cut batches in flight
          expect(queues.every((q) => q.deadCount() === 0)).toBe(true);
          if (poison !== null) {
            // The poison's transaction landed once, whole, after the fix.
            expect(await remote.ints("SELECT id, total, item_count FROM orders WHERE id < 0")).toEqual([[-1, 10, 1]]);
            expect(await remote.ints("SELECT id, order_id, qty FROM order_items WHERE id < 0")).toEqual([[-1, -1, 1]]);
          }
          const expected = orderOracle(dir.file("oracle.db"), seed, committed);
          expect({
            seed,
            orders: await remote.ints("SELECT id, total, item_count FROM orders WHERE id >= 0 ORDER BY id"),
          }).toEqual({ seed, orders: expected.orders });
          expect({
            seed,
            items: await remote.ints("SELECT id, order_id, qty FROM order_items WHERE id >= 0 ORDER BY id"),
          }).toEqual({ seed, items: expected.items });
          expect(await remote.ints(halfApplied)).toEqual([]);
        }, 120_000);
      },
    );
  },
);
