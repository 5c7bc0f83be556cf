// skip and dead-letter replay: no prompts, they print what they did, and they are safe while a
// drain runs on the same db_dir.
import { Database } from "bun:sqlite";
import { beforeEach, describe, expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import { Outbox } from "../src/outbox/outbox.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { REPO, runInProcess } from "./support/cli.ts";
import { hashTree } from "./support/dir-hash.ts";
import { openQueue, seed } from "./support/queue.ts";
import { openRemote } from "./support/remote.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();
let tmp: string;
let dbDir: string;

beforeEach(() => {
  tmp = tempDirCleanedBy(cleanups, "sqloutbox-cli-repair-").path;
  dbDir = path.join(tmp, "queue");
  seed(dbDir, "orders", 3);
});

describe("skip", () => {
  test("moves the head to the dead-letter log, prints it, and the namespace advances", async () => {
    const r = await runInProcess(["skip", "--db-dir", dbDir, "--namespace", "orders", "--seq", "1"]);
    expect(r.code).toBe(0);
    expect(r.stdout.replaceAll(tmp, "<DIR>")).toMatchInlineSnapshot(`
      "skipped orders seq 1: moved to the dead-letter log (reason "skipped"), <DIR>/queue/orders.db
      undo with: sqloutbox dead-letter replay --db-dir <DIR>/queue --namespace orders --seq 1
      "
    `);
    // The undo line works when pasted as printed.
    const undo = r.stdout.split("\n").find((l) => l.startsWith("undo with: sqloutbox "))!;
    const replay = await runInProcess(undo.slice("undo with: sqloutbox ".length).split(" "));
    expect(replay.code).toBe(0);
    expect(replay.stdout).toContain("replayed dead letter orders seq 1 as seq 4");
    const orders = openQueue(dbDir, "orders");
    try {
      expect(orders.head()?.seq).toBe(2);
      expect(orders.getDead(1)).toMatchObject({ seq: 1, reason: "skipped" });
    } finally {
      orders.close();
    }
  });

  test("refuses a seq that is not the head, exit 1, nothing moved", async () => {
    const r = await runInProcess(["skip", "--db-dir", dbDir, "--namespace", "orders", "--seq", "2"]);
    expect(r.code).toBe(1);
    expect(r.stderr.length).toBeGreaterThan(0);
    const orders = openQueue(dbDir, "orders");
    try {
      expect(orders.head()?.seq).toBe(1);
      expect(orders.deadCount()).toBe(0);
    } finally {
      orders.close();
    }
  });

  test("--json reports the action", async () => {
    const r = await runInProcess(["skip", "--db-dir", dbDir, "--namespace", "orders", "--seq", "1", "--json"]);
    expect(JSON.parse(r.stdout)).toEqual({
      action: "skip",
      namespace: "orders",
      seq: 1,
      file: path.join(dbDir, "orders.db"),
      moved: [1],
      alsoIn: [],
    });
  });
});

describe("repair commands on a file that is not an outbox", () => {
  test.each(["skip", "dead-letter replay"])(
    "%s leaves a foreign SQLite database byte-identical and exits 1 naming it",
    async (line) => {
      const cmd = line.split(" ");
      const foreign = path.join(dbDir, "users.db");
      const db = new Database(foreign);
      db.run("CREATE TABLE users (id INTEGER PRIMARY KEY)");
      db.close();
      const before = hashTree(dbDir);
      const r = await runInProcess([...cmd, "--db-dir", dbDir, "--namespace", "users", "--seq", "1"]);
      expect(r.code).toBe(1);
      expect(r.stderr).toBe(
        `[error] not an outbox file: ${foreign} holds other tables (users) and no outbox_queue; sqloutbox never adds its tables to another database (an application keeps its events in its own database only by opening the outbox with new SQLMiddleware({ database }))\n`,
      );
      expect(hashTree(dbDir)).toEqual(before);
    },
  );

  test("a namespace that is not in its file is refused without migrating the file", async () => {
    const shared = path.join(dbDir, "shared.db");
    const q = new Outbox(shared, "other");
    q.enqueue("INSERT INTO t (id) VALUES (?)", "[1]");
    q.close();
    const before = hashTree(dbDir);
    const r = await runInProcess(["skip", "--db-dir", dbDir, "--namespace", "shared", "--seq", "1"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(`[error] namespace "shared" is not in ${shared} (it holds: other)\n`);
    expect(hashTree(dbDir)).toEqual(before);
  });
});

describe("dead-letter replay", () => {
  test("re-enqueues a dead letter at the tail once, printing the new seq", async () => {
    expect((await runInProcess(["skip", "--db-dir", dbDir, "--namespace", "orders", "--seq", "1"])).code).toBe(0);
    const r = await runInProcess([
      "dead-letter",
      "replay",
      "--db-dir",
      dbDir,
      "--namespace",
      "orders",
      "--seq",
      "1",
      "--json",
    ]);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({
      action: "replay",
      namespace: "orders",
      seq: 1,
      newSeq: 4,
      file: path.join(dbDir, "orders.db"),
    });
    const list = JSON.parse((await runInProcess(["dead-letter", "list", "--db-dir", dbDir, "--json"])).stdout);
    expect(list.deadLetters[0]).toMatchObject({ seq: 1, replayedAsSeq: 4 });
    const again = await runInProcess([
      "dead-letter",
      "replay",
      "--db-dir",
      dbDir,
      "--namespace",
      "orders",
      "--seq",
      "1",
    ]);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("already replayed as seq 4");
  });

  test("replaying a seq that is not dead exits 1", async () => {
    const r = await runInProcess(["dead-letter", "replay", "--db-dir", dbDir, "--namespace", "orders", "--seq", "2"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('no dead letter with seq 2 in namespace "orders"');
  });
});

describe("while the drain runs", () => {
  test("skip unblocks a failing head and replay delivers it after the remote is fixed; the drain keeps going", async () => {
    const remote = await openRemote("sqlite", { path: path.join(tmp, "remote.db"), cleanups });
    await remote.exec("CREATE TABLE orders (id INTEGER PRIMARY KEY, note TEXT CHECK (note IS NULL OR note <> 'gift'))");
    // Row 4 breaks a CHECK constraint (the row's fault), so it fails and holds the head.
    const orders = openQueue(dbDir, "orders");
    orders.enqueue("INSERT INTO orders (id, note) VALUES (?, ?)", '[4, "gift"]');
    orders.enqueue("INSERT INTO orders (id) VALUES (?)", "[5]");
    orders.close();
    const config = path.join(tmp, "outbox.toml");
    fs.writeFileSync(
      config,
      `[app.a]\ndb_dir = "queue"\nflush_interval = 0.05\ntable_flush_threshold = 1\n[app.a.db.r]\nwriter = "sqlite"\ntables = ["orders"]\n[app.a.db.r.connection]\npath = "remote.db"\n`,
    );
    const drain = Bun.spawn(["bun", "src/cli/bin.ts", "runservice", "--config", config], {
      cwd: REPO,
      stdout: "pipe",
      stderr: "pipe",
    });
    try {
      await waitFor(
        async () =>
          JSON.parse((await runInProcess(["status", "--db-dir", dbDir, "--json"])).stdout).namespaces[0].isStuck,
        "status to report the stuck head",
      );
      expect(await remote.count("orders")).toBe(3);
      expect((await runInProcess(["skip", "--db-dir", dbDir, "--namespace", "orders", "--seq", "4"])).code).toBe(0);
      await waitFor(async () => (await remote.count("orders")) === 4, "rows 1–3 and 5"); // row 5 passes the skipped head
      await remote.exec("CREATE TABLE orders2 (id INTEGER PRIMARY KEY, note TEXT)");
      await remote.exec("INSERT INTO orders2 SELECT id, note FROM orders");
      await remote.exec("DROP TABLE orders");
      await remote.exec("ALTER TABLE orders2 RENAME TO orders");
      const replay = await runInProcess([
        "dead-letter",
        "replay",
        "--db-dir",
        dbDir,
        "--namespace",
        "orders",
        "--seq",
        "4",
      ]);
      expect(replay.code).toBe(0);
      await waitFor(async () => (await remote.count("orders")) === 5, "the replayed head");
    } finally {
      drain.kill("SIGTERM");
    }
    expect(await drain.exited).toBe(0);
  });
});
