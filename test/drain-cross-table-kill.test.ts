// Transactions across tables (one db_file per host) under SIGKILLs of the drains, from a fleet of
// two hosts into the same remote tables, a foreign key between them: after every kill the remote
// holds no half transaction (each order's `item_count` equals its item count), and in the end it equals
// the serial application of every transaction each host committed — nothing lost, nothing twice.
// Also with each host's db_file the application's own database, and batches large enough that
// their confirmations go in parts (100 rows each there): a kill between two parts loses nothing.
import { describe, expect, test } from "bun:test";
import fs from "node:fs";
import { Outbox } from "../src/outbox/outbox.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { type Engine, openRemote } from "./support/remote.ts";
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
      ["sqlite", 1, false],
      ["libsql-http", 1, false],
      ["postgres", 1, false],
      ["mysql", 1, false],
      // With lanes, each transaction spans the keys of its order and its new items (three keys,
      // two tables): per-key order and whole transactions across lanes, under the same kills.
      ["sqlite", 8, false],
      ["postgres", 8, false],
      ["mysql", 8, false],
      ["sqlite", 1, true],
      ["postgres", 1, true],
    ] as Array<[Engine, number, boolean]>)(
      "delivered to %s, lanes = %d, in the application's database: %p",
      (engine, lanes, embedded) => {
        test(`${KILLS} kills of two hosts' drains: never half a transaction on the remote, in the end every transaction once`, async () => {
          const dir = tempDirCleanedBy(cleanups);
          const remote = await openRemote(engine, { cleanups, foreignKeys: true });
          for (const ddl of ORDER_SCHEMA) await remote.exec(ddl);
          const seed = 1 + Math.floor(Math.random() * 1_000_000);
          const stopFile = dir.file("stop");
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
                      connection: remote.connection,
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
                JSON.stringify({ dbFile, seed, host, hosts: HOSTS, stopFile, keys: lanes > 1, embedded }),
              ],
              { stdout: "pipe", stderr: "pipe" },
            ),
          );
          cleanups.push(() => {
            for (const p of producers) p.kill("SIGKILL");
          });
          const halfApplied =
            "SELECT o.id FROM orders o WHERE o.item_count <> (SELECT count(*) FROM order_items i WHERE i.order_id = o.id)";
          let interrupted = 0;
          for (let kill = 0; kill < KILLS; kill++) {
            // Both hosts drain at once; one of them is killed mid-flight, in turn.
            const drains = hosts.map((h) => spawnDrain(h.dbFile));
            const victim = drains[kill % HOSTS]!;
            // Killed once it delivers (it says "started"), not while a loaded machine still starts it.
            await Promise.race([victim.stdout.getReader().read(), Bun.sleep(10_000)]);
            await Bun.sleep(20 + Math.random() * 200);
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
          const expected = orderOracle(dir.file("oracle.db"), seed, committed);
          expect({ seed, orders: await remote.ints("SELECT id, total, item_count FROM orders ORDER BY id") }).toEqual({
            seed,
            orders: expected.orders,
          });
          expect({ seed, items: await remote.ints("SELECT id, order_id, qty FROM order_items ORDER BY id") }).toEqual({
            seed,
            items: expected.items,
          });
          expect(await remote.ints(halfApplied)).toEqual([]);
        }, 120_000);
      },
    );
  },
);
