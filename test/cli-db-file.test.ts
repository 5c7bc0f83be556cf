// Every command that reads queues takes --db-file (or a config whose app has a db_file), on a file
// of ours holding several tables and on an application's own database: status, verify and the
// dead-letter tools work the same, a group is shown, skipped and replayed whole, and nothing is
// created in the application's database.
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import fs from "node:fs";
import { SQLMiddleware } from "../src/outbox/middleware.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { runInProcess } from "./support/cli.ts";

const cleanups = cleanupsAfterEach();

/** A db_file with orders and order_items: one order alone, then a transaction across both whose head is skipped (dead-lettered as a group). */
function shopFile(file: string): { group: number[] } {
  const mw = new SQLMiddleware({ dbFile: file });
  mw.push("orders", "INSERT INTO orders (id) VALUES (?)", [1]);
  const group = mw.transaction(() => [
    mw.push("orders", "INSERT INTO orders (id) VALUES (?)", [2]),
    mw.push("order_items", "INSERT INTO order_items (id, order_id) VALUES (?, ?)", [20, 2]),
  ]);
  return { group };
}

describe("--db-file", () => {
  test("status and verify read every table of the file", async () => {
    const dir = tempDirCleanedBy(cleanups);
    const file = dir.file("shop/outbox.db");
    shopFile(file);
    const status = JSON.parse((await runInProcess(["status", "--db-file", file, "--json"])).stdout);
    expect(status.dbDirs).toEqual([
      { app: null, dbDir: dir.file("shop"), dbFile: file, exists: true, drain: expect.objectContaining({ pid: null }) },
    ]);
    expect(
      status.namespaces.map((n: { namespace: string; depth: number; file: string }) => [n.namespace, n.depth, n.file]),
    ).toEqual([
      ["order_items", 1, file],
      ["orders", 2, file],
    ]);
    const verify = await runInProcess(["verify", "--db-file", file]);
    expect(verify.code).toBe(0);
    expect(verify.stdout).toContain("ok: 1 file(s) verified, no problems");
  });

  test("skip moves a head's whole group, across tables; dead-letter show names the group; replay brings it back as one", async () => {
    const dir = tempDirCleanedBy(cleanups);
    const file = dir.file("outbox.db");
    const { group } = shopFile(file);
    const orders = new Outbox(file, "orders");
    orders.skipHead(orders.head()!.seq); // the lone order first, so the group heads orders
    orders.close();
    const skip = await runInProcess([
      "skip",
      "--db-file",
      file,
      "--namespace",
      "orders",
      "--seq",
      String(group[0]),
      "--json",
    ]);
    expect(skip.code).toBe(0);
    expect(JSON.parse(skip.stdout)).toMatchObject({ action: "skip", moved: group, alsoIn: ["order_items"] });
    const list = JSON.parse(
      (await runInProcess(["dead-letter", "list", "--db-file", file, "--json"])).stdout,
    ).deadLetters;
    expect(
      list.map((d: { namespace: string; seq: number; grp: number | null }) => [d.namespace, d.seq, d.grp]),
    ).toEqual([
      ["orders", 1, null],
      ["orders", group[0], group[0]],
      ["order_items", group[1], group[0]],
    ]);
    const show = await runInProcess([
      "dead-letter",
      "show",
      "--db-file",
      file,
      "--namespace",
      "order_items",
      "--seq",
      String(group[1]),
    ]);
    expect(show.stdout).toContain(
      `group:       ${group[0]} — 2 statements: orders seq ${group[0]}, seq ${group[1]}; replayed and discarded together`,
    );
    const replay = await runInProcess([
      "dead-letter",
      "replay",
      "--db-file",
      file,
      "--namespace",
      "order_items",
      "--seq",
      String(group[1]),
      "--json",
    ]);
    expect(replay.code).toBe(0);
    const replayed = JSON.parse(replay.stdout);
    expect(replayed.group.map((r: { namespace: string }) => r.namespace)).toEqual(["orders", "order_items"]);
    const rows = new Database(file, { readonly: true });
    cleanups.push(() => rows.close());
    const back = rows
      .query<{ namespace: string; grp: number }, []>("SELECT namespace, grp FROM outbox_queue ORDER BY seq")
      .all();
    expect(back.map((r) => r.namespace)).toEqual(["orders", "order_items"]);
    expect(new Set(back.map((r) => r.grp)).size).toBe(1);
    expect(rows.query("SELECT namespaces FROM outbox_group").all()).toEqual([
      { namespaces: '["order_items","orders"]' },
    ]);
  });

  test("an application's own database: status, verify and dead-letter list read it; nothing is created or changed", async () => {
    const dir = tempDirCleanedBy(cleanups);
    const file = dir.file("app.db");
    const app = new Database(file);
    app.run("PRAGMA journal_mode = WAL");
    app.run("CREATE TABLE accounts (id INTEGER PRIMARY KEY)");
    const outbox = new SQLMiddleware({ database: app });
    outbox.transaction(() => {
      app.run("INSERT INTO accounts VALUES (1)");
      outbox.push("accounts", "INSERT INTO accounts (id) VALUES (?)", [1]);
    });
    app.close();
    const bytes = fs.readFileSync(file);
    const status = JSON.parse((await runInProcess(["status", "--db-file", file, "--json"])).stdout);
    expect(status.namespaces.map((n: { namespace: string; depth: number }) => [n.namespace, n.depth])).toEqual([
      ["accounts", 1],
    ]);
    expect((await runInProcess(["verify", "--db-file", file])).code).toBe(0);
    expect((await runInProcess(["dead-letter", "list", "--db-file", file])).stdout).toContain("no dead letters");
    expect(fs.readFileSync(file)).toEqual(bytes);
  });

  test("a config whose app has a db_file: status reads that file and names it; exactly one of --config, --db-dir and --db-file", async () => {
    const dir = tempDirCleanedBy(cleanups);
    shopFile(dir.file("data/outbox.db"));
    fs.writeFileSync(
      dir.file("outbox.toml"),
      `[app.shop]\ndb_file = "data/outbox.db"\n[app.shop.db.main]\nwriter = "sqlite"\ntables = ["orders", "order_items"]\n[app.shop.db.main.connection]\npath = "remote.db"\n`,
    );
    const status = await runInProcess(["status", "--config", dir.file("outbox.toml")]);
    expect(status.code).toBe(0);
    expect(status.stdout).toContain(`no drain is running on ${dir.file("data/outbox.db")}`);
    expect(status.stdout).toMatch(/shop\s+order_items\s+1/);
    const both = await runInProcess(["status", "--db-dir", dir.path, "--db-file", dir.file("data/outbox.db")]);
    expect(both.code).toBe(2);
    expect(both.stderr).toContain(
      "give one of --config FILE, --db-dir DIR and --db-file FILE, not --db-dir DIR and --db-file FILE",
    );
    const missing = await runInProcess(["status", "--db-file", dir.file("nope.db")]);
    expect([missing.code, missing.stderr.trim()]).toEqual([1, `[error] db_file ${dir.file("nope.db")} does not exist`]);
  });
});
