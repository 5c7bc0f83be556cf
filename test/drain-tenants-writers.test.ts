// A tenant template on every kind of writer (SPEC §4c): MariaDB (a database per tenant, a pool each),
// libSQL (a client per tenant, Turso's `{tenant}-org` host) and a custom writer_class (constructed per
// tenant with its connection resolved). What landed is read from each tenant's own database.
import { Database } from "bun:sqlite";
import { expect, test } from "bun:test";
import fs from "node:fs";
import { defineConfig } from "../src/config/define.ts";
import { createWriters } from "../src/config/writers.ts";
import { OutboxSyncService } from "../src/drain/service.ts";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { FAST, memoryLogger } from "./support/drain-harness.ts";
import { startHranaServer } from "./support/hrana-server.ts";
import { createServerDb, MYSQL_BASE_URL } from "./support/server-db.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();
cleanups.push(() => closeSharedOutboxes());

const INSERT = "INSERT INTO ev (k, n) VALUES (?, ?)";

/** A drain over `db` (one target named r) and a producer of `tenants`' rows: 1..rows each, interleaved, in transactions of two. */
async function drainOf(
  dir: ReturnType<typeof tempDirCleanedBy>,
  db: Record<string, unknown>,
  tenants: string[],
  rows: number,
) {
  const config = defineConfig({ app: { app: { dbDir: dir.file("queue"), ...FAST, db: { r: db as never } } } });
  const svc = new OutboxSyncService(config, await createWriters(config), { logger: memoryLogger() });
  cleanups.push(() => svc.stop(2000));
  const producer = new SQLMiddleware({ dbDir: dir.file("queue") });
  for (let n = 1; n <= rows; n += 2)
    for (const t of tenants)
      producer.transaction(
        () => {
          producer.push("ev", INSERT, [t, n]);
          producer.push("ev", INSERT, [t, n + 1]);
        },
        { tenant: t },
      );
  await waitFor(async () => (await svc.runOnce(), svc.totalPending() === 0), "every tenant's rows", 30_000);
  return svc;
}

const expected = (tenant: string, rows: number) => Array.from({ length: rows }, (_, i) => [tenant, i + 1]);

test("MariaDB: each tenant's rows land once, in order, in its own database", async () => {
  const a = await createServerDb("mysql", "sqloutbox_tnt");
  const b = await createServerDb("mysql", "sqloutbox_tnt");
  cleanups.push(() => a.drop());
  cleanups.push(() => b.drop());
  const base = a.name.replace(/_[^_]*$/, "");
  const tenants = [a, b].map((d) => d.name.slice(base.length + 1));
  for (const d of [a, b])
    await d.sql.unsafe("CREATE TABLE ev (pos BIGINT AUTO_INCREMENT PRIMARY KEY, k TEXT NOT NULL, n INT NOT NULL)");
  const dir = tempDirCleanedBy(cleanups);
  const svc = await drainOf(
    dir,
    { writer: "mysql", connections: 2, connection: { url: `${MYSQL_BASE_URL}/${base}_{tenant}` }, tables: ["ev"] },
    tenants,
    10,
  );
  for (const [i, d] of [a, b].entries()) {
    const rows = (await d.sql.unsafe("SELECT k, n FROM ev ORDER BY pos").values()) as unknown[][];
    expect(rows.map(([k, n]) => [k, Number(n)])).toEqual(expected(tenants[i]!, 10));
  }
  expect(svc.targets()[0]!.view().tenants).toMatchObject({ opened: 2, held: [] });
});

test("libSQL: a client per tenant, each at its own host ({tenant}-org, as on Turso)", async () => {
  const dir = tempDirCleanedBy(cleanups);
  fs.mkdirSync(dir.file("remote"));
  const fileOf = (name: string) => dir.file(`remote/${name.replace(/-org$/, "")}.db`);
  const tenants = ["acme", "globex"];
  for (const t of tenants) {
    const db = new Database(fileOf(t), { create: true });
    db.run("CREATE TABLE ev (pos INTEGER PRIMARY KEY, k TEXT NOT NULL, n INTEGER NOT NULL)");
    db.close();
  }
  const server = startHranaServer({ file: dir.file("remote/unused.db"), token: "t0k3n-shared", fileOf });
  cleanups.push(() => server.stop());
  await drainOf(
    dir,
    {
      writer: "libsql",
      connection: { url: `http://{tenant}-org.localhost:${server.port}`, auth_token: "t0k3n-shared" },
      tables: ["ev"],
    },
    tenants,
    6,
  );
  for (const t of tenants) {
    const db = new Database(fileOf(t), { readonly: true });
    cleanups.push(() => db.close());
    expect(db.query("SELECT k, n FROM ev ORDER BY pos").values()).toEqual(expected(t, 6));
  }
  expect(fs.existsSync(dir.file("remote/unused.db"))).toBe(false); // nothing went to a host without a tenant
});

test("a custom writer_class is constructed per tenant with its connection resolved", async () => {
  const dir = tempDirCleanedBy(cleanups);
  fs.mkdirSync(dir.file("remote"));
  // A writer that says how it was constructed, then writes through the sqlite writer.
  fs.writeFileSync(
    dir.file("w.ts"),
    `import fs from "node:fs";
import { createWriter } from ${JSON.stringify(`${import.meta.dir}/../src/index.ts`)};
export class Logged {
  dialect = "sqlite";
  constructor(connection) {
    fs.appendFileSync(connection.log, JSON.stringify(connection) + "\\n");
    this.inner = createWriter("sqlite", { path: connection.path });
  }
  writeBatch(stmts, options) { return this.inner.writeBatch(stmts, options); }
  close() { return this.inner.close(); }
}
`,
  );
  const tenants = ["acme", "globex", "initech"];
  for (const t of tenants) {
    const db = new Database(dir.file(`remote/${t}.db`), { create: true });
    db.run("CREATE TABLE ev (pos INTEGER PRIMARY KEY, k TEXT NOT NULL, n INTEGER NOT NULL)");
    db.close();
  }
  await drainOf(
    dir,
    {
      writerClass: `${dir.file("w.ts")}:Logged`,
      dialect: "sqlite",
      connection: { path: dir.file("remote/{tenant}.db"), log: dir.file("made.jsonl") },
      tables: ["ev"],
    },
    tenants,
    4,
  );
  const made = fs
    .readFileSync(dir.file("made.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l).path);
  expect(made.sort()).toEqual(tenants.map((t) => dir.file(`remote/${t}.db`)));
  for (const t of tenants) {
    const db = new Database(dir.file(`remote/${t}.db`), { readonly: true });
    cleanups.push(() => db.close());
    expect(db.query("SELECT k, n FROM ev ORDER BY pos").values()).toEqual(expected(t, 4));
  }
});
