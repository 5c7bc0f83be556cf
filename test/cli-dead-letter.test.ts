// dead-letter list/replay/purge at scale, run for real (in this process: runInProcess) against
// queue files in a temp db_dir: filters, --dry-run, one transaction per file, chain-safe purge,
// --json shapes, usage errors.
import { Database } from "bun:sqlite";
import { beforeEach, describe, expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import { isoTimestamp } from "../src/outbox/timestamp.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { normalize, REPO, runInProcess } from "./support/cli.ts";
import { hashTree } from "./support/dir-hash.ts";
import { drainSide, openQueue } from "./support/queue.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();
let tmp: string;
let dbDir: string;

beforeEach(() => {
  tmp = tempDirCleanedBy(cleanups, "sqloutbox-cli-dead-").path;
  dbDir = path.join(tmp, "queue");
  fs.mkdirSync(dbDir);
  // orders: 6 rows, 1-4 dead (2 and 4 as max_attempts), 5 and 6 pending (5 links to 4).
  // payments: 4 rows, 1-2 dead, 3 and 4 pending.
  letters("orders", 6, 4);
  letters("payments", 4, 2);
  setDead("orders", [2, 4], "reason = 'max_attempts'");
});

/** `count` rows in `{dbDir}/{table}.db`, the first `dead` of them skipped to the dead-letter log. */
function letters(table: string, count: number, dead: number): void {
  const q = openQueue(dbDir, table);
  try {
    const seqs = q.enqueueBatch(
      Array.from({ length: count }, (_, i) => ({ tag: `INSERT INTO ${table} (id) VALUES (?)`, payload: `[${i + 1}]` })),
      "test",
      { grouped: false },
    );
    for (const seq of seqs.slice(0, dead)) q.skipHead(seq);
  } finally {
    q.close();
  }
}

/** Changes dead letters behind the library's back (to age them, or give them another reason). */
function setDead(table: string, seqs: number[], set: string, ...values: string[]): void {
  const db = new Database(path.join(dbDir, `${table}.db`));
  try {
    for (const seq of seqs) db.query(`UPDATE outbox_dead_log SET ${set} WHERE seq = ?`).run(...values, seq);
  } finally {
    db.close();
  }
}

/** Rows of a table in one queue file, read-only. */
function count(table: string, sql: string): number {
  const db = new Database(path.join(dbDir, `${table}.db`), { readonly: true });
  try {
    // A producer process may have the file open: wait out its brief exclusive moments (WAL
    // recovery on its first open, its closing checkpoint) as the product's readers do.
    db.run("PRAGMA busy_timeout = 5000");
    return db.query<{ n: number }, []>(`SELECT count(*) AS n FROM ${sql}`).get()!.n;
  } finally {
    db.close();
  }
}

const daysAgo = (days: number) => isoTimestamp(new Date(Date.now() - days * 86_400_000));
const dl = (...args: string[]) => runInProcess(["dead-letter", ...args, "--db-dir", dbDir]);
const json = async (...args: string[]) => {
  const r = await dl(...args, "--json");
  expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 0, stderr: "" });
  return JSON.parse(normalize(r.stdout, tmp));
};
const keys = (letters: Array<{ namespace: string; seq: number }>) => letters.map((l) => `${l.namespace}:${l.seq}`);

describe("dead-letter list filters", () => {
  test("by namespace, reason, since (a duration or an ISO time) and replay state, combined with AND", async () => {
    setDead("orders", [1, 2], "dead_at = ?", daysAgo(3));
    await runInProcess(["dead-letter", "replay", "--db-dir", dbDir, "--namespace", "payments", "--seq", "1"]);
    const list = async (...args: string[]) => keys((await json("list", ...args)).deadLetters);
    expect(await list()).toEqual(["orders:1", "orders:2", "orders:3", "orders:4", "payments:1", "payments:2"]);
    expect(await list("--namespace", "orders")).toEqual(["orders:1", "orders:2", "orders:3", "orders:4"]);
    expect(await list("--reason", "max_attempts")).toEqual(["orders:2", "orders:4"]);
    expect(await list("--since", "1d")).toEqual(["orders:3", "orders:4", "payments:1", "payments:2"]);
    expect(await list("--since", daysAgo(4).slice(0, 10))).toEqual(await list());
    expect(await list("--replayed")).toEqual(["payments:1"]);
    expect(await list("--unreplayed", "--namespace", "payments")).toEqual(["payments:2"]);
    expect(await list("--namespace", "orders", "--reason", "max_attempts", "--since", "2d", "--unreplayed")).toEqual([
      "orders:4",
    ]);
  });

  test("by key (--key, an integer key by its digits): only the letters pushed with it, with a KEY column when letters have keys", async () => {
    setDead("orders", [1, 3], "lane_key = ?", "customer-42");
    setDead("payments", [2], "lane_key = ?", "42");
    const list = async (...args: string[]) => keys((await json("list", ...args)).deadLetters);
    expect(await list("--key", "customer-42")).toEqual(["orders:1", "orders:3"]);
    expect(await list("--key", "42")).toEqual(["payments:2"]);
    expect(await list("--key", "customer-42", "--namespace", "payments")).toEqual([]);
    expect(await list("--key", "customer-4")).toEqual([]); // the whole key, not a part of it
    const [letter] = (await json("list", "--key", "42")).deadLetters;
    expect(letter.laneKey).toBe("42");
    const text = await dl("list", "--key", "customer-42");
    expect(text.code).toBe(0);
    expect(normalize(text.stdout, tmp)).toMatchInlineSnapshot(`
      "NAMESPACE  SEQ  GROUP  KEY          REASON   STATE  ATTEMPTS  DEAD AT                           REPLAYED AS  ERROR
      orders       1      -  customer-42  skipped  dead          0  <TIME>            -  -
      orders       3      -  customer-42  skipped  dead          0  <TIME>            -  -
      "
    `);
    // Without keyed letters in the answer, the list is as it always was: no KEY column.
    expect((await dl("list", "--namespace", "orders", "--reason", "max_attempts")).stdout).not.toContain("KEY");
    const none = await dl("list", "--key", "nobody");
    expect({ code: none.code, out: none.stdout.trim() }).toEqual({ code: 0, out: "no dead letters match" });
    const empty = await dl("list", "--key", "");
    expect(empty.code).toBe(2);
    expect(empty.stderr).toContain("--key needs a key");
  });

  test("replay --key re-enqueues only that key's letters, and the new rows keep the key", async () => {
    setDead("orders", [1, 3], "lane_key = ?", "customer-42");
    setDead("payments", [2], "lane_key = ?", "42");
    const dry = await json("replay", "--key", "customer-42", "--dry-run");
    expect(keys(dry.replayed)).toEqual(["orders:1", "orders:3"]);
    const report = await json("replay", "--key", "customer-42");
    expect(keys(report.replayed)).toEqual(["orders:1", "orders:3"]);
    const list = async (...args: string[]) => keys((await json("list", ...args)).deadLetters);
    expect(await list("--replayed")).toEqual(["orders:1", "orders:3"]);
    const db = new Database(path.join(dbDir, "orders.db"), { readonly: true });
    try {
      const newSeqs = report.replayed.map((r: { newSeq: number }) => r.newSeq);
      const rows = db
        .query(`SELECT lane_key FROM outbox_queue WHERE seq IN (${newSeqs.join(",")}) ORDER BY seq`)
        .all() as Array<{ lane_key: string | null }>;
      expect(rows.map((r) => r.lane_key)).toEqual(["customer-42", "customer-42"]);
    } finally {
      db.close();
    }
    expect((await dl("replay", "--key", "")).code).toBe(2);
  });

  test("--json entries carry the file; a filter that matches nothing says so", async () => {
    const [entry] = (await json("list", "--namespace", "payments", "--reason", "skipped")).deadLetters;
    expect(entry).toMatchInlineSnapshot(`
      {
        "app": null,
        "attempts": 0,
        "createdAt": "<TIME>",
        "dbDir": "<DIR>/queue",
        "dbFile": null,
        "deadAt": "<TIME>",
        "error": null,
        "errorClass": null,
        "file": "<DIR>/queue/payments.db",
        "grp": null,
        "laneKey": null,
        "namespace": "payments",
        "payload": "[1]",
        "prevSeq": null,
        "reason": "skipped",
        "remote": "not applied",
        "replayedAsSeq": null,
        "replayedAt": null,
        "seq": 1,
        "source": "test",
        "state": "dead",
        "tag": "INSERT INTO payments (id) VALUES (?)",
        "tenant": null,
        "traceparent": null,
        "tracestate": null,
      }
    `);
    const none = await dl("list", "--reason", "undecodable");
    expect(none).toEqual({ code: 0, stdout: "no dead letters match\n", stderr: "" });
  });
});

describe("dead-letter replay with a selection", () => {
  test("--namespace replays all of that namespace at its tail, in seq order, one line per namespace", async () => {
    const r = await dl("replay", "--namespace", "orders");
    expect(r.code).toBe(0);
    expect(normalize(r.stdout, tmp)).toMatchInlineSnapshot(`
      "NAMESPACE  REPLAYED  UNCHANGED  SEQS  FILE
      orders            4          0  1-4   <DIR>/queue/orders.db

      replayed 4 dead letter(s) at the tail of their namespace
      "
    `);
    const q = openQueue(dbDir, "orders");
    try {
      expect(q.fetchUnsynced(10).map((row) => [row.seq, row.prevSeq, row.payload])).toEqual([
        [5, 4, "[5]"],
        [6, 5, "[6]"],
        [7, 6, "[1]"],
        [8, 7, "[2]"],
        [9, 8, "[3]"],
        [10, 9, "[4]"],
      ]);
    } finally {
      q.close();
    }
    expect(count("payments", "outbox_dead_log WHERE replayed_at IS NULL")).toBe(2);
  });

  test("--reason, --since and their combination select only the matching letters", async () => {
    setDead("orders", [1, 2], "dead_at = ?", daysAgo(3));
    const replayed = async (...args: string[]) => keys((await json("replay", "--dry-run", ...args)).replayed);
    expect(await replayed("--reason", "max_attempts")).toEqual(["orders:2", "orders:4"]);
    expect(await replayed("--since", "1d")).toEqual(["orders:3", "orders:4", "payments:1", "payments:2"]);
    expect(await replayed("--reason", "skipped", "--since", "1d", "--namespace", "orders")).toEqual(["orders:3"]);
    const r = await json("replay", "--reason", "max_attempts", "--since", "2d");
    expect(r.replayed).toEqual([{ namespace: "orders", seq: 4, newSeq: 7, file: "<DIR>/queue/orders.db" }]);
  });

  test("--all --json: every letter once; a second run finds none left to replay", async () => {
    const all = await json("replay", "--all");
    // `skipped`: the deprecated name of `unchanged`, kept for scripts.
    expect(Object.keys(all)).toEqual([
      "action",
      "dryRun",
      "selected",
      "replayed",
      "unchanged",
      "skipped",
      "refusedLetters",
      "failed",
    ]);
    expect(all).toMatchInlineSnapshot(`
      {
        "action": "replay",
        "dryRun": false,
        "failed": [],
        "refusedLetters": [],
        "replayed": [
          {
            "file": "<DIR>/queue/orders.db",
            "namespace": "orders",
            "newSeq": 7,
            "seq": 1,
          },
          {
            "file": "<DIR>/queue/orders.db",
            "namespace": "orders",
            "newSeq": 8,
            "seq": 2,
          },
          {
            "file": "<DIR>/queue/orders.db",
            "namespace": "orders",
            "newSeq": 9,
            "seq": 3,
          },
          {
            "file": "<DIR>/queue/orders.db",
            "namespace": "orders",
            "newSeq": 10,
            "seq": 4,
          },
          {
            "file": "<DIR>/queue/payments.db",
            "namespace": "payments",
            "newSeq": 5,
            "seq": 1,
          },
          {
            "file": "<DIR>/queue/payments.db",
            "namespace": "payments",
            "newSeq": 6,
            "seq": 2,
          },
        ],
        "selected": 6,
        "skipped": [],
        "unchanged": [],
      }
    `);
    const again = await json("replay", "--all");
    expect([again.selected, again.replayed, again.unchanged]).toEqual([0, [], []]);
    expect(normalize((await dl("replay", "--all")).stdout, tmp)).toBe("no dead letters match\n");
  });

  test("a letter replayed before (by --seq) is not selected again; the rest are replayed", async () => {
    expect((await dl("replay", "--namespace", "orders", "--seq", "3")).code).toBe(0);
    const r = await json("replay", "--namespace", "orders");
    expect(r.selected).toBe(3);
    expect(keys(r.replayed)).toEqual(["orders:1", "orders:2", "orders:4"]);
    expect(r.unchanged).toEqual([]);
  });

  test("--dry-run prints what would be replayed and leaves every file byte-identical", async () => {
    const before = hashTree(tmp);
    const r = await dl("replay", "--all", "--dry-run");
    expect(r.code).toBe(0);
    expect(normalize(r.stdout, tmp)).toMatchInlineSnapshot(`
      "NAMESPACE  TO REPLAY  UNCHANGED  SEQS  FILE
      orders             4          0  1-4   <DIR>/queue/orders.db
      payments           2          0  1-2   <DIR>/queue/payments.db

      dry run: would replay 6 dead letter(s) at the tail of their namespace; nothing changed
      "
    `);
    const dry = await json("replay", "--all", "--dry-run");
    expect(hashTree(tmp)).toEqual(before);
    expect(dry.dryRun).toBe(true);
    expect(dry.replayed.every((e: { newSeq: number | null }) => e.newSeq === null)).toBe(true);
    const real = await json("replay", "--all");
    expect(keys(real.replayed)).toEqual(keys(dry.replayed));
  });

  test("the one-letter form is unchanged: --namespace N --seq S prints the same line and JSON", async () => {
    const r = await dl("replay", "--namespace", "payments", "--seq", "2");
    expect(normalize(r.stdout, tmp)).toBe(
      "replayed dead letter payments seq 2 as seq 5 (re-enqueued at the tail, <DIR>/queue/payments.db)\n",
    );
    expect(await json("replay", "--namespace", "orders", "--seq", "1")).toEqual({
      action: "replay",
      namespace: "orders",
      seq: 1,
      newSeq: 7,
      file: "<DIR>/queue/orders.db",
    });
  });
});

describe("a group's dead letters", () => {
  /** A group of `size` rows in `shipments`, tried 3 times (the head carries the error), then skipped. */
  function failedGroup(size: number): number {
    const q = openQueue(dbDir, "shipments");
    try {
      const [head] = q.enqueueBatch(
        Array.from({ length: size }, (_, i) => ({ tag: "INSERT INTO shipments (id) VALUES (?)", payload: `[${i}]` })),
        "test",
      );
      drainSide(q).recordFailure(head!, "23514: check failed", "23514", new Date(Date.now() + 60_000), 3);
      q.skipHead(head!);
      return head!;
    } finally {
      q.close();
    }
  }

  test("every letter shows the group's attempts and its error, the head's kept under the operator's skip", async () => {
    failedGroup(2);
    const { deadLetters } = await json("list", "--namespace", "shipments");
    expect(deadLetters.map((l: Record<string, unknown>) => [l.seq, l.reason, l.attempts, l.error])).toEqual([
      [1, "skipped", 3, "23514: check failed"],
      [2, "skipped", 3, "23514: check failed"],
    ]);
  });

  test("replay counts what its dry run counted: the group's second letter is replayed, not 'unchanged'", async () => {
    failedGroup(2);
    const dry = await json("replay", "--namespace", "shipments", "--dry-run");
    const real = await json("replay", "--namespace", "shipments");
    expect(keys(real.replayed)).toEqual(keys(dry.replayed));
    expect(keys(real.replayed)).toEqual(["shipments:1", "shipments:2"]);
    expect([real.unchanged, real.skipped]).toEqual([[], []]);
  });

  test("a selection that meets one letter of a group counts the group in its dry run, as the real run does", async () => {
    const head = failedGroup(3);
    // --since selects by dead time: age every letter but the head, so only the head is selected.
    const db = new Database(path.join(dbDir, "shipments.db"));
    db.query("UPDATE outbox_dead_log SET dead_at = ? WHERE seq > ?").run(daysAgo(3), head);
    db.close();
    const dry = await dl("replay", "--namespace", "shipments", "--since", "1d", "--dry-run");
    expect(dry.stdout).toContain(
      "dry run: would replay 3 dead letter(s) (1 selected, the rest with their groups) at the tail of their namespace; nothing changed",
    );
    const real = await json("replay", "--namespace", "shipments", "--since", "1d");
    expect([real.selected, keys(real.replayed)]).toEqual([1, ["shipments:1", "shipments:2", "shipments:3"]]);
  });
});

describe("dead-letter discard", () => {
  test("a selection is discarded only after its dry run, with --expect the count it printed", async () => {
    const before = hashTree(tmp);
    const bare = await dl("discard", "--reason", "max_attempts");
    expect(bare.code).toBe(2);
    expect(bare.stderr).toContain("run it with --dry-run first, then again with --expect N");
    const dry = await dl("discard", "--reason", "max_attempts", "--dry-run");
    expect(dry.code).toBe(0);
    expect(normalize(dry.stdout, tmp)).toMatchInlineSnapshot(`
      "NAMESPACE  TO DISCARD  UNCHANGED  SEQS  FILE
      orders              2          0  2, 4  <DIR>/queue/orders.db

      dry run: would discard 2 dead letter(s) for good: never delivered, never replayed; nothing changed
      to discard them: sqloutbox dead-letter discard --db-dir <DIR>/queue --reason max_attempts --expect 2
      "
    `);
    const wrong = await dl("discard", "--reason", "max_attempts", "--expect", "3");
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toContain("the selection holds 2 letter(s) now, not the 3 expected: nothing was changed");
    expect(hashTree(tmp)).toEqual(before);
    const done = await json("discard", "--reason", "max_attempts", "--expect", "2");
    expect(done).toMatchObject({ action: "discard", dryRun: false, selected: 2, expect: 2, unchanged: [], failed: [] });
    expect(keys(done.discarded)).toEqual(["orders:2", "orders:4"]);
    // Discarded: still in the log with their own error, never replayed, no longer dead letters.
    const listed = (await json("list", "--namespace", "orders")).deadLetters;
    expect(listed.map((l: Record<string, unknown>) => [l.seq, l.state])).toEqual([
      [1, "dead"],
      [2, "discarded"],
      [3, "dead"],
      [4, "discarded"],
    ]);
    const replay = await dl("replay", "--namespace", "orders", "--seq", "2");
    expect(replay.code).toBe(1);
    expect(replay.stderr).toContain("dead letter 2 was discarded at");
    expect(keys((await json("replay", "--namespace", "orders", "--dry-run")).replayed)).toEqual([
      "orders:1",
      "orders:3",
    ]);
    expect(count("orders", "outbox_dead_log WHERE replayed_at IS NULL")).toBe(2);
  });

  test("one letter named by --namespace and --seq needs no count; a letter replayed or discarded before is refused", async () => {
    const dry = await dl("discard", "--namespace", "payments", "--seq", "1", "--dry-run");
    expect(normalize(dry.stdout, tmp)).toContain(
      "to discard them: sqloutbox dead-letter discard --db-dir <DIR>/queue --namespace payments --seq 1\n",
    );
    expect(keys((await json("discard", "--namespace", "payments", "--seq", "1")).discarded)).toEqual(["payments:1"]);
    const again = await dl("discard", "--namespace", "payments", "--seq", "1");
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("dead letter 1 was discarded before, at");
    expect((await dl("discard", "--namespace", "payments", "--seq", "1", "--expect", "1")).code).toBe(2);
  });
});

describe("dead-letter replay --seq S --dry-run", () => {
  test("prints the letter it would replay, changes no byte, and the real replay then does just that", async () => {
    const before = hashTree(tmp);
    const r = await dl("replay", "--namespace", "payments", "--seq", "2", "--dry-run");
    expect({ ...r, stdout: normalize(r.stdout, tmp) }).toEqual({
      code: 0,
      stdout:
        "dry run: would replay dead letter payments seq 2 at the tail of its namespace; nothing changed (<DIR>/queue/payments.db)\n",
      stderr: "",
    });
    expect(await json("replay", "--namespace", "orders", "--seq", "1", "--dry-run")).toEqual({
      action: "replay",
      dryRun: true,
      namespace: "orders",
      seq: 1,
      newSeq: null,
      file: "<DIR>/queue/orders.db",
    });
    expect(hashTree(tmp)).toEqual(before);
    expect(await json("replay", "--namespace", "orders", "--seq", "1")).toMatchObject({ seq: 1, newSeq: 7 });
  });

  test("names the group the letter would bring back with it", async () => {
    const q = openQueue(dbDir, "shipments");
    try {
      const [head] = q.enqueueBatch(
        [1, 2].map((id) => ({ tag: "INSERT INTO shipments (id) VALUES (?)", payload: `[${id}]` })),
        "test",
      );
      q.skipHead(head!);
    } finally {
      q.close();
    }
    const before = hashTree(tmp);
    const r = await dl("replay", "--namespace", "shipments", "--seq", "2", "--dry-run");
    expect(normalize(r.stdout, tmp)).toBe(
      "dry run: would replay dead letter shipments seq 2 with its group (shipments 1, shipments 2) at the tail of its namespace; nothing changed (<DIR>/queue/shipments.db)\n",
    );
    expect((await json("replay", "--namespace", "shipments", "--seq", "2", "--dry-run")).group).toEqual([
      { namespace: "shipments", seq: 1, newSeq: null },
      { namespace: "shipments", seq: 2, newSeq: null },
    ]);
    expect(hashTree(tmp)).toEqual(before);
  });

  test("refuses what the real replay refuses, with its message and exit 1: a letter replayed before, a seq that is no letter", async () => {
    await dl("replay", "--namespace", "orders", "--seq", "3");
    const before = hashTree(tmp);
    const again = await dl("replay", "--namespace", "orders", "--seq", "3", "--dry-run");
    const real = await dl("replay", "--namespace", "orders", "--seq", "3");
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/dead letter 3 was already replayed as seq 7 at /);
    expect(normalize(again.stderr, tmp)).toBe(normalize(real.stderr, tmp));
    const none = await dl("replay", "--namespace", "orders", "--seq", "5", "--dry-run");
    expect(none.code).toBe(1);
    expect(normalize(none.stderr, tmp)).toContain(
      'no dead letter with seq 5 in namespace "orders" (<DIR>/queue/orders.db)',
    );
    expect(hashTree(tmp)).toEqual(before);
  });
});

describe("5 000 letters: one transaction per file", () => {
  beforeEach(() => {
    fs.rmSync(path.join(dbDir, "orders.db"));
    letters("orders", 5_000, 5_000);
  });

  test("a write failing at the 4 000th letter replays none of them and exits 1 naming the file", async () => {
    const file = path.join(dbDir, "orders.db");
    const db = new Database(file);
    db.run(
      `CREATE TRIGGER fail_midway BEFORE INSERT ON outbox_queue WHEN new.payload = '[4000]' BEGIN SELECT RAISE(ABORT, 'injected failure'); END`,
    );
    db.close();
    const r = await dl("replay", "--namespace", "orders", "--json");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`cannot replay dead letters: namespace "orders" in ${file}: injected failure`);
    expect(r.stderr).toContain("dead-letter replay failed in 1 file(s)");
    const report = JSON.parse(r.stdout);
    expect(report).toMatchObject({ replayed: [], skipped: [], failed: [{ file }] });
    expect(count("orders", "outbox_queue")).toBe(0);
    expect(count("orders", "outbox_dead_log WHERE replayed_at IS NULL")).toBe(5_000);

    const fixed = new Database(file);
    fixed.run("DROP TRIGGER fail_midway");
    fixed.close();
    const ok = await json("replay", "--namespace", "orders");
    expect(ok.replayed).toHaveLength(5_000);
    expect(
      ok.replayed.every((e: { seq: number; newSeq: number }, i: number) => e.seq === i + 1 && e.newSeq === 5_001 + i),
    ).toBe(true);
    expect((await runInProcess(["verify", "--db-dir", dbDir])).code).toBe(0);
  });

  test("while a producer process writes to the file: the producer never fails and the replayed letters get one unbroken run of seqs", async () => {
    const producer = Bun.spawn(
      ["bun", path.join(REPO, "test/support/children/outbox-producer.ts"), dbDir, "orders", "800", "1"],
      { stdout: "pipe", stderr: "pipe" },
    );
    let r: { replayed: Array<{ newSeq: number }> };
    try {
      // Start replaying once the producer is writing.
      await waitFor(() => count("orders", "outbox_queue") > 0, "the producer's first row");
      r = await json("replay", "--namespace", "orders");
    } catch (e) {
      producer.kill(); // not left writing into the next test's files
      throw e;
    }
    const [out, err, code] = await Promise.all([
      new Response(producer.stdout).text(),
      new Response(producer.stderr).text(),
      producer.exited,
    ]);
    expect({ code, err }).toEqual({ code: 0, err: "" });
    const acked: number[] = JSON.parse(out).acked;
    const newSeqs = r.replayed.map((e) => e.newSeq);
    expect(newSeqs).toHaveLength(5_000);
    const [first, last] = [newSeqs[0]!, newSeqs.at(-1)!];
    expect(last - first).toBe(4_999); // no producer row inside the run: it was one transaction
    expect(acked.filter((s) => s >= first && s <= last)).toEqual([]);
    expect(count("orders", "outbox_queue")).toBe(5_000 + acked.length);
    expect((await runInProcess(["verify", "--db-dir", dbDir])).code).toBe(0);
  });
});

describe("dead-letter purge", () => {
  test("deletes only replayed letters by default, keeps the one a pending row links to, and verify still passes", async () => {
    await dl("replay", "--all"); // orders 1-4 → 7-10, payments 1-2 → 5-6; orders 5 links to 4, payments 3 to 2
    const r = await dl("purge", "--older-than", "0s");
    expect(r.code).toBe(0);
    expect(normalize(r.stdout, tmp)).toMatchInlineSnapshot(`
      "NAMESPACE  PURGED  NEVER REPLAYED  KEPT  FILE
      orders          3               0     1  <DIR>/queue/orders.db
      payments        1               0     1  <DIR>/queue/payments.db

      purged 4 replayed dead letter(s) dead before <TIME>
      kept 2 that the chain still needs (a queued row links to it, or it is its namespace's newest dead letter)
      "
    `);
    expect(keys((await json("list")).deadLetters)).toEqual(["orders:4", "payments:2"]);
    expect((await runInProcess(["verify", "--db-dir", dbDir])).code).toBe(0);
  });

  test("never-replayed letters stay unless --unreplayed, which says how many events are gone for good", async () => {
    await dl("replay", "--namespace", "orders", "--seq", "1");
    const kept = await json("purge", "--older-than", "0s");
    expect(keys(kept.purged)).toEqual(["orders:1"]);
    expect(kept.kept).toEqual([]);
    const r = await dl("purge", "--older-than", "0s", "--unreplayed");
    expect(r.code).toBe(0);
    expect(normalize(r.stdout, tmp)).toMatchInlineSnapshot(`
      "NAMESPACE  PURGED  NEVER REPLAYED  KEPT  FILE
      orders          2               2     1  <DIR>/queue/orders.db
      payments        1               1     1  <DIR>/queue/payments.db

      purged 3 dead letter(s) dead before <TIME>
      3 of them never replayed: their events are gone for good (--unreplayed)
      kept 2 that the chain still needs (a queued row links to it, or it is its namespace's newest dead letter)
      "
    `);
    expect(keys((await json("list")).deadLetters)).toEqual(["orders:4", "payments:2"]);
    expect((await runInProcess(["verify", "--db-dir", dbDir])).code).toBe(0);
  });

  test("--older-than compares dead_at: younger letters stay; --namespace limits it to one namespace", async () => {
    await dl("replay", "--all");
    setDead("orders", [1, 2], "dead_at = ?", daysAgo(10));
    setDead("payments", [1], "dead_at = ?", daysAgo(10));
    expect(keys((await json("purge", "--older-than", "7d", "--namespace", "orders")).purged)).toEqual([
      "orders:1",
      "orders:2",
    ]);
    expect(keys((await json("purge", "--older-than", "1w2d")).purged)).toEqual(["payments:1"]);
    expect(keys((await json("list")).deadLetters)).toEqual(["orders:3", "orders:4", "payments:2"]);
  });

  test("--json is the documented shape; --dry-run reports the same and changes no byte", async () => {
    await dl("replay", "--namespace", "payments");
    const before = hashTree(tmp);
    const dry = await json("purge", "--older-than", "0s", "--unreplayed", "--dry-run");
    expect(hashTree(tmp)).toEqual(before);
    expect(Object.keys(dry)).toEqual([
      "action",
      "dryRun",
      "olderThan",
      "before",
      "unreplayed",
      "purged",
      "kept",
      "failed",
    ]);
    expect(dry).toMatchInlineSnapshot(`
      {
        "action": "purge",
        "before": "<TIME>",
        "dryRun": true,
        "failed": [],
        "kept": [
          {
            "deadAt": "<TIME>",
            "file": "<DIR>/queue/orders.db",
            "keptBecause": "linked",
            "namespace": "orders",
            "reason": "max_attempts",
            "replayedAt": null,
            "seq": 4,
          },
          {
            "deadAt": "<TIME>",
            "file": "<DIR>/queue/payments.db",
            "keptBecause": "linked",
            "namespace": "payments",
            "reason": "skipped",
            "replayedAt": "<TIME>",
            "seq": 2,
          },
        ],
        "olderThan": "0s",
        "purged": [
          {
            "deadAt": "<TIME>",
            "file": "<DIR>/queue/orders.db",
            "namespace": "orders",
            "reason": "skipped",
            "replayedAt": null,
            "seq": 1,
          },
          {
            "deadAt": "<TIME>",
            "file": "<DIR>/queue/orders.db",
            "namespace": "orders",
            "reason": "max_attempts",
            "replayedAt": null,
            "seq": 2,
          },
          {
            "deadAt": "<TIME>",
            "file": "<DIR>/queue/orders.db",
            "namespace": "orders",
            "reason": "skipped",
            "replayedAt": null,
            "seq": 3,
          },
          {
            "deadAt": "<TIME>",
            "file": "<DIR>/queue/payments.db",
            "namespace": "payments",
            "reason": "skipped",
            "replayedAt": "<TIME>",
            "seq": 1,
          },
        ],
        "unreplayed": true,
      }
    `);
    const real = await json("purge", "--older-than", "0s", "--unreplayed");
    expect({ ...real, dryRun: true }).toEqual(dry);
  });

  test("the newest letter of a namespace is kept even when nothing links to it", async () => {
    const q = openQueue(dbDir, "payments");
    q.confirm([3, 4]);
    q.close();
    const r = await json("purge", "--older-than", "0s", "--unreplayed", "--namespace", "payments");
    expect(keys(r.purged)).toEqual(["payments:1"]);
    expect(r.kept).toEqual([
      {
        namespace: "payments",
        seq: 2,
        file: "<DIR>/queue/payments.db",
        reason: "skipped",
        deadAt: "<TIME>",
        replayedAt: null,
        keptBecause: "newest",
      },
    ]);
    expect((await runInProcess(["verify", "--db-dir", dbDir])).code).toBe(0);
  });
});

describe("files that cannot be read", () => {
  test.each([["replay --all"], ["purge --older-than 0s --unreplayed"]])(
    "dead-letter %s reports the file, does the others, and exits 1",
    async (line) => {
      const args = line.split(" ");
      const garbage = path.join(dbDir, "garbage.db");
      fs.writeFileSync(garbage, "this is not sqlite".repeat(100));
      const r = await dl(...args, "--json");
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(garbage);
      expect(r.stderr).toContain(`dead-letter ${args[0]} failed in 1 file(s)`);
      const report = JSON.parse(r.stdout);
      expect(report.failed).toEqual([{ file: garbage, error: expect.stringContaining("file is not a database") }]);
      expect(report.purged ?? report.replayed).not.toHaveLength(0);
    },
  );
});

describe("usage errors exit 2 and change nothing", () => {
  test.each([
    [
      ["replay"],
      /dead-letter replay needs a selection: --namespace N \[--seq S\], --reason R, --since DUR\|TIME, --key K, --tenant T, or --all/,
    ],
    [["replay", "--dry-run"], /dead-letter replay needs a selection/],
    [["replay", "--all", "--namespace", "orders"], /--all selects every dead letter: give either --all or --namespace/],
    [["replay", "--seq", "1"], /--seq needs --namespace N/],
    [
      ["replay", "--namespace", "orders", "--seq", "1", "--all"],
      /--seq replays one dead letter; it does not combine with --reason, --since, --key, --tenant or --all/,
    ],
    [
      ["replay", "--since", "3 days"],
      /--since must be a duration \(2h, 7d, 1h30m\) or an ISO-8601 time \(2026-03-01T12:00:00Z\), got "3 days"/,
    ],
    [["list", "--since", "2026-02-30"], /--since must be a duration .* got "2026-02-30"/],
    [["list", "--replayed", "--unreplayed"], /give --replayed or --unreplayed, not both/],
    [["purge"], /missing required option --older-than/],
    [
      ["purge", "--older-than", "30"],
      /--older-than must be a duration such as 90s, 30m, 12h, 7d, 2w or 1h30m, got "30"/,
    ],
    [["purge", "--older-than", "-1d"], /--older-than must be a duration .* got "-1d"/],
  ])("dead-letter %p", async (args, message) => {
    const before = hashTree(tmp);
    const r = await runInProcess(["dead-letter", ...(args as string[]), "--db-dir", dbDir]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(message);
    expect(r.stderr).toContain(`Run "sqloutbox dead-letter ${(args as string[])[0]} --help" for usage.`);
    expect(hashTree(tmp)).toEqual(before);
  });
});

describe("letters the remote may have applied", () => {
  beforeEach(() => {
    // orders 1: a batch carrying it got no answer; orders 2: the remote applied it after it died.
    setDead("orders", [1], "remote = 'in doubt'");
    setDead("orders", [2], "remote = 'applied'");
  });

  test("list shows a REMOTE column, show says what it means, status counts the letters in doubt", async () => {
    const list = normalize((await dl("list", "--namespace", "orders")).stdout, tmp);
    expect(list.split("\n")[0]).toMatch(/STATE\s+REMOTE\s+ATTEMPTS/);
    expect(list).toMatch(/orders\s+1\s+-\s+skipped\s+dead\s+in doubt/);
    expect(list).toMatch(/orders\s+2\s+-\s+max_attempts\s+dead\s+applied/);
    expect(list).toMatch(/orders\s+3\s+-\s+skipped\s+dead\s+not applied/);
    expect((await json("list", "--namespace", "orders")).deadLetters.map((l: { remote: string }) => l.remote)).toEqual([
      "in doubt",
      "applied",
      "not applied",
      "not applied",
    ]);
    const show = (await dl("show", "--namespace", "orders", "--seq", "1")).stdout;
    expect(show).toContain("remote:      in doubt — a batch that carried it got no answer");
    const status = await runInProcess(["status", "--db-dir", dbDir]);
    expect(status.stdout).toMatch(/orders .*4 \(1 in doubt\)/);
    const entry = JSON.parse((await runInProcess(["status", "--db-dir", dbDir, "--json"])).stdout).namespaces.find(
      (n: { namespace: string }) => n.namespace === "orders",
    );
    expect(entry).toMatchObject({ deadLetterCount: 4, deadLettersInDoubt: 1 });
    // Lists without such letters print as they always did.
    expect((await dl("list", "--namespace", "payments")).stdout.split("\n")[0]).not.toContain("REMOTE");
  });

  test("replay --seq of a letter in doubt exits 1, saying which, why and what to do; --force replays it", async () => {
    for (const dry of [["--dry-run"], []]) {
      const r = await dl("replay", "--namespace", "orders", "--seq", "1", ...dry);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain('dead letter 1 of namespace "orders"');
      expect(r.stderr).toContain("is in doubt");
      expect(r.stderr).toContain("--force");
    }
    expect(count("orders", "outbox_queue")).toBe(2);
    const forced = await dl("replay", "--namespace", "orders", "--seq", "1", "--force");
    expect({ code: forced.code, stdout: forced.stdout }).toEqual({
      code: 0,
      stdout: `replayed dead letter orders seq 1 as seq 7 (re-enqueued at the tail, ${path.join(dbDir, "orders.db")})\n`,
    });
  });

  test("replay of a letter the remote applied exits 1 even with --force, and says to discard it", async () => {
    const r = await dl("replay", "--namespace", "orders", "--seq", "2", "--force");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("was applied by the remote after it was dead-lettered");
    expect(r.stderr).toContain("sqloutbox dead-letter discard");
    expect(count("orders", "outbox_queue")).toBe(2);
  });

  test("a selection replays the others and exits 1 naming the refused; its dry run counts them as refused", async () => {
    const dry = await dl("replay", "--namespace", "orders", "--dry-run");
    expect(dry.code).toBe(1);
    expect(dry.stdout).toContain("2 would be refused (the remote applied them or may have: 1-2)");
    expect(dry.stderr).toContain("would refuse 2 letter(s): 1 in doubt");
    const r = await dl("replay", "--namespace", "orders", "--json");
    expect(r.code).toBe(1);
    const report = JSON.parse(normalize(r.stdout, tmp));
    expect(keys(report.replayed)).toEqual(["orders:3", "orders:4"]);
    expect(report.refusedLetters).toEqual([
      { namespace: "orders", seq: 1, file: "<DIR>/queue/orders.db", remote: "in doubt" },
      { namespace: "orders", seq: 2, file: "<DIR>/queue/orders.db", remote: "applied" },
    ]);
    expect(r.stderr).toContain("1 applied by the remote after they were dead-lettered (never replayed: discard them)");
    const forced = await dl("replay", "--namespace", "orders", "--force", "--json");
    expect(forced.code).toBe(1); // the applied letter is refused still
    expect(keys(JSON.parse(normalize(forced.stdout, tmp)).replayed)).toEqual(["orders:1"]);
  });
});
