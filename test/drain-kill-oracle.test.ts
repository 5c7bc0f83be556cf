// Every statement kind the ledger makes exactly-once — multi-row INSERT, INSERT … SELECT, UPDATE
// and DELETE of many rows, upserts — sent verbatim while the drain is SIGKILLed again and again:
// the remote must end exactly where a serial, once-each application of the produced statements
// ends. The oracle is that application, replayed into a local SQLite file; for a fleet, one per host.
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import fs from "node:fs";
import { Outbox } from "../src/outbox/outbox.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { openRemote, type ServerRemote } from "./support/remote.ts";
import { startTcpProxy, throughProxy } from "./support/tcp-proxy.ts";
import { describeSlow } from "./support/slow.ts";
import { mixSchema, mixStatement } from "./support/statement-mix.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();

const KILLS = Number(process.env.SQLOUTBOX_KILLS ?? 12);

/** The state a serial, once-each application of the first `count` statements of a host's stream leaves. */
function oracle(file: string, seed: number, count: number, suffix: string): { kv: number[][]; log: number[][] } {
  const db = new Database(file, { create: true });
  try {
    for (const ddl of mixSchema("sqlite", suffix)) db.run(ddl);
    db.transaction(() => {
      for (let i = 0; i < count; i++) {
        const { sql, args } = mixStatement(seed, i, "sqlite", suffix);
        db.query(sql).run(...args);
      }
    })();
    return {
      kv: db
        .query(`SELECT k, v FROM kv${suffix} ORDER BY k`)
        .values()
        .map((r) => r.map(Number)),
      log: db
        .query(`SELECT id, n FROM log${suffix} ORDER BY id`)
        .values()
        .map((r) => r.map(Number)),
    };
  } finally {
    db.close();
  }
}

describeSlow(
  "every statement kind under SIGKILL",
  "kill a drain 12 times per engine while a producer process writes",
  () => {
    describe.each([
      ["sqlite", 1, 1],
      ["libsql-http", 1, 1],
      ["postgres", 1, 1],
      ["mysql", 1, 1],
      // A fleet of two hosts, each with batches in flight behind each other: each kill aimed at a
      // moment when the remote has several of the drains' transactions open. Each host's stream
      // goes to tables of its own (its own oracle), through the same ledger; the second host's
      // queue has lanes.
      ["postgres", 4, 2],
      ["mysql", 4, 2],
    ] as const)(
      "statement kinds under repeated SIGKILLs, delivered to %s, connections = %d, hosts = %d",
      (engine, connections, hostCount) => {
        test(`${KILLS} kills while ${hostCount === 1 ? "a producer writes" : "each host's producer writes"} every statement kind: the remote equals the serial application of what was produced`, async () => {
          const dir = tempDirCleanedBy(cleanups);
          const remote = await openRemote(engine, { cleanups });
          const hosts = Array.from({ length: hostCount }, (_, h) => ({
            h,
            dbDir: dir.file(`host${h}/outbox`),
            seed: 1 + Math.floor(Math.random() * 1_000_000),
            suffix: hostCount === 1 ? "" : `_${h}`,
          }));
          for (const { suffix } of hosts) for (const ddl of mixSchema(remote.dialect, suffix)) await remote.exec(ddl);
          // Batches in flight on PostgreSQL: through a 20 ms link, so a pair stays open long enough to
          // be killed open. (MariaDB goes direct: over the link its backlog of single statements,
          // two round trips a batch, outlasts the test.)
          let connection = remote.connection;
          if (connections > 1 && engine === "postgres") {
            const server = remote as ServerRemote;
            const proxy = startTcpProxy(server.port, server.host, { rttMs: 20 });
            cleanups.push(() => proxy.close());
            connection = { url: throughProxy(server.url, proxy.port) };
          }
          const stopFile = dir.file("stop");
          const spawnDrain = ({ h, dbDir }: (typeof hosts)[number]) =>
            Bun.spawn(
              [
                "bun",
                `${import.meta.dir}/support/children/drain-child.ts`,
                JSON.stringify({
                  dbDir,
                  // In a fleet the second host's table has lanes: its rows carry no key, so each is a
                  // barrier over every lane (the serial oracle holds), through the lanes' fences.
                  targets: {
                    r: {
                      writer: remote.writer,
                      connection,
                      tables: [h === 1 ? { name: "kv", lanes: 4 } : "kv"],
                      connections,
                    },
                  },
                  // Every kill mid-batch charges the head once: "forever" keeps the test about exactly-once.
                  tuning: {
                    flushInterval: 0.005,
                    tableFlushThreshold: 1,
                    tableMaxWait: 0,
                    batchSize: 40,
                    maxAttempts: null,
                    backoffUnitSeconds: 0.01,
                    outageBackoffCapMinutes: 0.005,
                    originLabel: `host-${h}`,
                  },
                }),
              ],
              { stdout: "pipe", stderr: "pipe" },
            );
          const producers = hosts.map(({ dbDir, seed, suffix }) =>
            Bun.spawn(
              [
                "bun",
                `${import.meta.dir}/support/children/drain-mix-producer.ts`,
                JSON.stringify({ dbDir, seed, dialect: remote.dialect, stopFile, suffix }),
              ],
              { stdout: "pipe", stderr: "inherit" },
            ),
          );
          cleanups.push(() => {
            for (const p of producers) p.kill("SIGKILL");
          });
          /** The drains' transactions the remote has open now (the test's own connection has none). */
          const openTransactions = async () =>
            (
              await remote.ints(
                remote.dialect === "postgres"
                  ? "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND xact_start IS NOT NULL AND pid <> pg_backend_pid()"
                  : "SELECT count(*) FROM information_schema.innodb_trx",
              )
            )[0]![0]!;
          // Each kill takes one host's drain; the fleet's other drain keeps delivering meanwhile.
          const drains = hosts.map(spawnDrain);
          cleanups.push(() => {
            for (const d of drains) d.kill("SIGKILL");
          });
          let aimed = 0;
          for (let kill = 0; kill < KILLS; kill++) {
            const host = hosts[kill % hostCount]!;
            await Bun.sleep(60 + Math.random() * 250);
            if (connections > 1)
              for (const until = Date.now() + 1500; Date.now() < until; ) {
                if ((await openTransactions()) >= 2) {
                  aimed += 1;
                  break;
                }
              }
            drains[host.h]!.kill("SIGKILL");
            await drains[host.h]!.exited;
            if (kill < KILLS - hostCount) drains[host.h] = spawnDrain(host); // the last kill of each host leaves it down
          }
          // Some kills caught several of the drains' transactions open: asserted on PostgreSQL, over
          // its slow link; on MariaDB, direct, a pair is open for a few milliseconds and the aim
          // catches one only now and then.
          if (connections > 1 && engine === "postgres") expect(aimed).toBeGreaterThan(0);
          fs.writeFileSync(stopFile, "");
          const produced: number[] = [];
          for (const p of producers) {
            expect(await p.exited).toBe(0);
            produced.push(Number((await new Response(p.stdout).text()).split(" ")[1]));
          }
          expect(Math.min(...produced)).toBeGreaterThan(50);

          for (const host of hosts) {
            const final = spawnDrain(host);
            cleanups.push(() => final.kill("SIGKILL"));
            // Its SIGTERM handler is in place once it says so: the killed drains may have left nothing to do.
            expect(new TextDecoder().decode((await final.stdout.getReader().read()).value)).toContain("started");
            const q = new Outbox(`${host.dbDir}/kv.db`, "kv");
            cleanups.push(() => q.close());
            await waitFor(() => q.pendingCount() === 0, `host ${host.h}'s final drain`, 30_000);
            final.kill("SIGTERM");
            expect(await final.exited).toBe(0);
            expect(q.deadCount()).toBe(0); // nothing was refused: every statement was sent verbatim and applied
          }
          for (const { h, seed, suffix } of hosts) {
            const expected = oracle(dir.file(`oracle${h}.db`), seed, produced[h]!, suffix);
            const kv = await remote.ints(`SELECT k, v FROM kv${suffix} ORDER BY k`);
            const log = await remote.ints(`SELECT id, n FROM log${suffix} ORDER BY id`);
            expect({ h, seed, kv }).toEqual({ h, seed, kv: expected.kv });
            expect({ h, seed, log }).toEqual({ h, seed, log: expected.log });
          }
        }, 90_000);
      },
    );
  },
);
