// A tenant template on PostgreSQL under SIGKILLs (SPEC §4c), with one tenant's database dropped and
// made anew mid-run. A producer process pushes the stream of test/support/tenant-mix.ts for five
// tenants: group g of tenant T is one `ev` row (T, g), or a transaction across both tables of
// T's database — the `ev` row and one or two `audit` rows (T, g, part). A drain process, template
// `postgres://…/<base>_{tenant}`, is SIGKILLed KILLS times at random moments (a new one started after
// each). At the DROP_AT-th kill, while a drain runs, tenant DROPPED's database is dropped (FORCE: the
// drain's connection to it is cut), then created again with its two tables (its ledger is left to
// the drain's auto_schema); only then is the producer told, by a file it looks for before each group.
//
// The oracle, per tenant database, on the rows in landing order (`pos`), both tables read in one
// snapshot (a killed drain's last COMMIT may still be landing); no database holds a row of another tenant:
// - Every tenant but DROPPED: `ev` holds exactly its groups 1…last, once each, in order; `audit`
//   holds exactly the audit rows of those groups, once each, in push order. After every kill
//   already, each of its groups on the remote is whole (its `ev` row with all of its `audit` rows,
//   or none of them).
// - DROPPED: let F be the first of its groups the producer pushed after it was told (every group
//   from F on was pushed after the database was back, with its tables). Rows pushed before may have
//   gone with the old database — the operator's doing — but nothing else may be missing, doubled or
//   reordered: `ev` holds exactly groups m…last for some m ≤ F (a contiguous suffix: delivery is in
//   order, so what the old database took is a prefix), and `audit` holds a suffix of its audit rows
//   in push order that contains every audit row of groups F…last. So every group from F on is whole.
// - In the end nothing is pending and nothing dead-lettered (max_attempts unset: a head the kills
//   charged is never given up), and some kills cut a batch in flight (a sent head left unconfirmed).
import { expect, test } from "bun:test";
import fs from "node:fs";
import { SQL } from "bun";
import { Outbox } from "../src/outbox/outbox.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { drainSide } from "./support/queue.ts";
import { PG_BASE_URL, requireServer } from "./support/server-db.ts";
import { describeSlow } from "./support/slow.ts";
import { TENANT_SCHEMA, tenantGroup } from "./support/tenant-mix.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();

const KILLS = Number(process.env.SQLOUTBOX_KILLS ?? 12);
const TENANTS = ["acme", "globex", "initech", "umbrella", "hooli"];
const DROPPED = "initech";
const DROP_AT = 4;
const TABLES = ["ev", "audit"] as const;

type Row = number[];

/** What tenant `tenant`'s groups 1…`last` put in each table, in push order: `ev` [g], `audit` [g, part]. */
function expectedRows(seed: number, tenant: string, last: number): { ev: Row[]; audit: Row[] } {
  const ev: Row[] = [];
  const audit: Row[] = [];
  for (let g = 1; g <= last; g++)
    for (const s of tenantGroup(seed, tenant, g)) {
      if (s.table === "ev") ev.push([g]);
      else audit.push([g, s.args[2]!]);
    }
  return { ev, audit };
}

describeSlow(
  "a tenant template on PostgreSQL under SIGKILL, one tenant's database dropped and recreated",
  "kill a tenant template's drain 12 times while a producer pushes for five tenants",
  () => {
    test(`${KILLS} kills, a tenant's database dropped and made anew: every other tenant's rows once, in order, groups whole; the dropped tenant's from the recreate on`, async () => {
      await requireServer("postgres");
      const dir = tempDirCleanedBy(cleanups);
      const base = `sqloutbox_tk_${crypto.randomUUID().replaceAll("-", "").slice(0, 10)}`;
      const dbName = (tenant: string) => `${base}_${tenant}`;
      const admin = new SQL(`${PG_BASE_URL}/postgres`, { max: 1 });
      const clients = new Map<string, SQL>();
      /** A client of `tenant`'s database, made once (and again after its database was dropped). */
      const client = (tenant: string) => {
        let sql = clients.get(tenant);
        if (sql === undefined) clients.set(tenant, (sql = new SQL(`${PG_BASE_URL}/${dbName(tenant)}`, { max: 1 })));
        return sql;
      };
      cleanups.push(async () => {
        for (const sql of clients.values()) await sql.close();
        for (const t of TENANTS) await admin.unsafe(`DROP DATABASE IF EXISTS ${dbName(t)} WITH (FORCE)`);
        await admin.close();
      });
      const createTenant = async (tenant: string) => {
        await admin.unsafe(`CREATE DATABASE ${dbName(tenant)}`);
        for (const ddl of TENANT_SCHEMA) await client(tenant).unsafe(ddl);
      };
      for (const t of TENANTS) await createTenant(t);
      /**
       * What landed in `tenant`'s database, in landing order, without the tenant column (checked
       * apart). One statement, so one snapshot: a killed drain's last COMMIT may still be landing.
       */
      const landed = async (tenant: string) => {
        const rows = (await client(tenant)
          .unsafe(
            "SELECT 'ev', pos, tenant, g, 0 FROM ev UNION ALL SELECT 'audit', pos, tenant, g, part FROM audit ORDER BY 1, 2",
          )
          .values()) as unknown[][];
        const of = (table: string) => rows.filter((r) => r[0] === table);
        return {
          strangers: rows.filter((r) => r[2] !== tenant).length, // rows of another tenant
          ev: of("ev").map((r) => [Number(r[3])]),
          audit: of("audit").map((r) => [Number(r[3]), Number(r[4])]),
        };
      };
      /** Groups of `tenant` on the remote that are not whole: audit rows without their ev row, or too few or too many. */
      const brokenGroups = async (tenant: string, seed: number) => {
        const { ev, audit } = await landed(tenant);
        const parts = new Map<number, number>();
        for (const [g] of audit) parts.set(g!, (parts.get(g!) ?? 0) + 1);
        const broken = ev
          .map(([g]) => g!)
          .filter((g) => (parts.get(g) ?? 0) !== tenantGroup(seed, tenant, g).length - 1);
        const orphans = [...parts.keys()].filter((g) => !ev.some(([e]) => e === g));
        return [...broken, ...orphans];
      };

      const seed = 1 + Math.floor(Math.random() * 1_000_000);
      const dbFile = dir.file("outbox/outbox.db");
      const stopFile = dir.file("stop");
      const recreatedFile = dir.file("recreated");
      const spawnDrain = () => {
        const proc = Bun.spawn(
          [
            "bun",
            `${import.meta.dir}/support/children/drain-child.ts`,
            JSON.stringify({
              dbFile,
              targets: {
                r: { writer: "postgres", connection: { url: `${PG_BASE_URL}/${base}_{tenant}` }, tables: TABLES },
              },
              // Every kill mid-batch charges the head once: "forever" keeps the test about exactly-once.
              // Small batches: many in flight to be cut; a held tenant is tried again within a second.
              tuning: {
                flushInterval: 0.005,
                tableFlushThreshold: 1,
                tableMaxWait: 0,
                batchSize: 12,
                maxAttempts: null,
                backoffUnitSeconds: 0.01,
                outageBackoffCapMinutes: 0.005,
              },
            }),
          ],
          { stdout: "pipe", stderr: "pipe" },
        );
        // Read as it comes (a drain that logs much must not block on a full pipe), kept for a failure's message.
        const log = new Response(proc.stderr).text();
        return { proc, log };
      };
      const producer = Bun.spawn(
        [
          "bun",
          `${import.meta.dir}/support/children/tenant-producer.ts`,
          JSON.stringify({ dbFile, seed, tenants: TENANTS, stopFile, recreatedFile, recreated: DROPPED }),
        ],
        { stdout: "pipe", stderr: "pipe" },
      );
      cleanups.push(() => producer.kill("SIGKILL"));
      // The producer makes the file: the drain's first start waits for it.
      await waitFor(() => fs.existsSync(dbFile), "the producer's first push");

      let interrupted = 0;
      for (let kill = 0; kill < KILLS; kill++) {
        const drain = spawnDrain();
        cleanups.push(() => drain.proc.kill("SIGKILL"));
        // Killed once it delivers (it says "started"), not while a loaded machine still starts it.
        await Promise.race([drain.proc.stdout.getReader().read(), Bun.sleep(10_000)]);
        await Bun.sleep(20 + Math.random() * 250);
        if (kill === DROP_AT) {
          // The operator drops the tenant's database under the running drain, then makes it anew.
          await admin.unsafe(`DROP DATABASE ${dbName(DROPPED)} WITH (FORCE)`);
          await clients.get(DROPPED)!.close();
          clients.delete(DROPPED);
          await Bun.sleep(50 + Math.random() * 150); // the drain meets it missing
          await createTenant(DROPPED);
          fs.writeFileSync(recreatedFile, "");
          await Bun.sleep(20 + Math.random() * 250);
        }
        drain.proc.kill("SIGKILL");
        await drain.proc.exited;
        // A kill right after a remote commit or during one: every other tenant's groups on the remote are whole.
        for (const t of TENANTS.filter((t) => t !== DROPPED))
          expect({ kill, t, broken: await brokenGroups(t, seed) }).toEqual({ kill, t, broken: [] });
        for (const table of TABLES) {
          const q = new Outbox(dbFile, table);
          const head = q.head();
          if (head !== null && head.seq <= drainSide(q).sentMark()) interrupted += 1; // a sent batch left unconfirmed
          q.close();
        }
      }
      fs.writeFileSync(stopFile, "");
      expect({ exit: await producer.exited, stderr: await new Response(producer.stderr).text() }).toEqual({
        exit: 0,
        stderr: "",
      });
      const pushed = JSON.parse(await new Response(producer.stdout).text()) as {
        last: Record<string, number>;
        firstAfter: number | null;
      };
      const first = pushed.firstAfter!;
      expect(first).not.toBeNull();
      expect(pushed.last[DROPPED]).toBeGreaterThanOrEqual(first); // groups of the dropped tenant were pushed after the recreate
      expect(Math.min(...Object.values(pushed.last))).toBeGreaterThan(20);

      const final = spawnDrain();
      cleanups.push(() => final.proc.kill("SIGKILL"));
      const queues = TABLES.map((t) => new Outbox(dbFile, t));
      cleanups.push(() => {
        for (const q of queues) q.close();
      });
      await waitFor(
        () => queues.every((q) => q.pendingCount() === 0),
        () => `the final drain (${queues.map((q) => `${q.namespace}: ${q.pendingCount()} pending`).join(", ")})`,
        60_000,
      ).catch(async (error) => {
        final.proc.kill("SIGTERM");
        throw new Error(`${(error as Error).message}\n${(await final.log).slice(-3000)}`);
      });
      final.proc.kill("SIGTERM");
      expect(await final.proc.exited).toBe(0);
      expect(queues.map((q) => q.deadCount())).toEqual([0, 0]);
      expect(interrupted).toBeGreaterThan(0); // the kills did cut batches in flight

      for (const t of TENANTS) {
        const got = await landed(t);
        const want = expectedRows(seed, t, pushed.last[t]!);
        expect({ t, strangers: got.strangers }).toEqual({ t, strangers: 0 });
        if (t !== DROPPED) {
          expect({ t, seed, ev: got.ev }).toEqual({ t, seed, ev: want.ev });
          expect({ t, seed, audit: got.audit }).toEqual({ t, seed, audit: want.audit });
          continue;
        }
        // The dropped tenant: a contiguous suffix of each table, reaching back at least to group F.
        const from = got.ev[0]?.[0] ?? pushed.last[t]! + 1;
        expect({ t, seed, first, fromAtMostFirst: from <= first }).toEqual({ t, seed, first, fromAtMostFirst: true });
        expect({ t, seed, ev: got.ev }).toEqual({ t, seed, ev: want.ev.slice(from - 1) });
        const auditFrom = want.audit.length - got.audit.length;
        expect({ t, seed, audit: got.audit }).toEqual({ t, seed, audit: want.audit.slice(Math.max(0, auditFrom)) });
        const firstAudit = want.audit.findIndex(([g]) => g! >= first);
        if (firstAudit >= 0) expect(auditFrom).toBeLessThanOrEqual(firstAudit);
      }
    }, 150_000);
  },
);
