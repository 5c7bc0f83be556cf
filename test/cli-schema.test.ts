import { describe, expect, test } from "bun:test";
import fs from "node:fs";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { normalize, runInProcess } from "./support/cli.ts";
import { openRemote } from "./support/remote.ts";

const cleanups = cleanupsAfterEach();

/** A temp dir with an outbox.toml routing `orders` (injected: the compatibility mode) and `raw` (not) to one target. */
function project(writer: string, connection: string) {
  const dir = tempDirCleanedBy(cleanups);
  fs.writeFileSync(
    dir.file("outbox.toml"),
    `[app.shop]\ndb_dir = "queue"\n\n[app.shop.db.main]\nwriter = "${writer}"\n` +
      `tables = [{ name = "orders", inject_outbox_seq = true }, "raw"]\n\n[app.shop.db.main.connection]\n${connection}\n`,
  );
  return dir;
}

describe("schema", () => {
  test("prints the ledger's DDL and that of every injected table in the target's dialect, and touches nothing", async () => {
    const dir = project("sqlite", `path = "remote.db"`);
    const r = await runInProcess(["schema", "--config", dir.file("outbox.toml")]);
    expect(r.code).toBe(0);
    expect(normalize(r.stdout, dir.path)).toMatchInlineSnapshot(`
"-- target shop.main (sqlite)
CREATE TABLE IF NOT EXISTS "sqloutbox_ledger" (origin TEXT NOT NULL, namespace TEXT NOT NULL, through INTEGER NOT NULL, label TEXT NOT NULL DEFAULT '', updated_at TEXT NOT NULL, PRIMARY KEY (origin, namespace));
ALTER TABLE "orders" ADD COLUMN outbox_seq INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX IF NOT EXISTS "idx_orders_outbox_seq" ON "orders" (outbox_seq) WHERE outbox_seq != 0;
"
`);
    expect(fs.existsSync(dir.file("remote.db"))).toBe(false);
    expect(fs.existsSync(dir.file("queue"))).toBe(false);
  });

  test("--apply creates the ledger, the column and the index on a sqlite target, a second --apply says 'already' for each, --drop --apply removes outbox_seq only", async () => {
    const dir = project("sqlite", `path = "remote.db"`);
    const remote = await openRemote("sqlite", { path: dir.file("remote.db"), cleanups });
    await remote.exec("CREATE TABLE orders (id INTEGER PRIMARY KEY)");
    const columns = async () => ({
      cols: (await remote.rows("SELECT name FROM pragma_table_info('orders')")).flat(),
      idx: (await remote.rows("SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'orders'")).flat(),
    });
    const config = dir.file("outbox.toml");
    const first = await runInProcess(["schema", "--config", config, "--apply", "--json"]);
    expect(first.code).toBe(0);
    expect(JSON.parse(first.stdout).targets[0].outcomes).toEqual(["applied", "applied", "applied"]);
    expect(await columns()).toEqual({ cols: ["id", "outbox_seq"], idx: ["idx_orders_outbox_seq"] });
    const second = await runInProcess(["schema", "--config", config, "--apply", "--json"]);
    expect(second.code).toBe(0);
    expect(JSON.parse(second.stdout).targets[0].outcomes).toEqual(["already", "already", "already"]);
    const drop = await runInProcess(["schema", "--config", config, "--drop", "--apply"]);
    expect(drop.code).toBe(0);
    expect(drop.stdout).toContain("-- applied");
    expect(await columns()).toEqual({ cols: ["id"], idx: [] });
    expect(await remote.count("sqloutbox_ledger")).toBe(0); // the ledger is never dropped
  });

  test("--apply on PostgreSQL and MariaDB creates the ledger, the column and the unique index, twice without error, and --drop removes outbox_seq", async () => {
    for (const engine of ["postgres", "mysql"] as const) {
      const remote = await openRemote(engine, { cleanups });
      await remote.exec("CREATE TABLE orders (id BIGINT PRIMARY KEY)");
      const dir = project(engine, `url = "${remote.url}"`);
      const config = dir.file("outbox.toml");
      for (const round of [1, 2]) {
        const r = await runInProcess(["schema", "--config", config, "--apply", "--json"]);
        expect({ engine, round, code: r.code, stderr: r.stderr }).toEqual({ engine, round, code: 0, stderr: "" });
        expect(JSON.parse(r.stdout).targets[0].outcomes).toEqual(
          round === 1 ? ["applied", "applied", "applied"] : ["already", "already", "already"],
        );
      }
      const cols = async () =>
        (
          await remote.rows(
            engine === "postgres"
              ? "SELECT column_name FROM information_schema.columns WHERE table_name = 'orders' ORDER BY column_name"
              : "SELECT column_name FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = 'orders' ORDER BY column_name",
          )
        ).flat();
      expect(await cols()).toEqual(["id", "outbox_seq"]);
      // The unique index really absorbs: a second row with the same outbox_seq is refused.
      await remote.exec("INSERT INTO orders (id, outbox_seq) VALUES (1, 7)");
      await expect(remote.exec("INSERT INTO orders (id, outbox_seq) VALUES (2, 7)")).rejects.toThrow();
      const drop = await runInProcess(["schema", "--config", config, "--drop", "--apply"]);
      expect(drop.code).toBe(0);
      expect(await cols()).toEqual(["id"]);
    }
  }, 30_000);

  test("a statement the remote refuses is reported beside it and exits 1", async () => {
    const dir = project("sqlite", `path = "remote.db"`); // no orders table in remote.db
    const r = await runInProcess(["schema", "--config", dir.file("outbox.toml"), "--apply"]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("-- error: SQLITE_ERROR: no such table: orders");
    expect(r.stdout).toMatch(/sqloutbox_ledger.*-- applied/);
    expect(r.stderr).toContain("2 DDL statement(s) failed");
  });

  test("a missing config file is one error line, exit 1", async () => {
    const dir = tempDirCleanedBy(cleanups);
    const r = await runInProcess(["schema", "--config", dir.file("nope.toml")]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("nope.toml does not exist");
  });
});
