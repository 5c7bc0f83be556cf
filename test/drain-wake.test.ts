// How the drain learns of commits without polling every file (CommitWatcher), which tables a cycle
// then looks at (Agenda), and the loop that puts them together: a commit wakes it for that table,
// a table's max wait wakes it on time, whatever flush_interval says.
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import fs from "node:fs";
import { OutboxSyncService } from "../src/drain/service.ts";
import { Agenda, CommitWatcher, type CommitHandlers } from "../src/drain/wake.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { SQLMiddleware } from "../src/outbox/middleware.ts";
import { createWriter } from "../src/writers/registry.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { oneApp } from "./support/drain-harness.ts";
import { openRemote } from "./support/remote.ts";
import { waitFor } from "./support/wait.ts";
import { drainSide } from "./support/queue.ts";

const cleanups = cleanupsAfterEach();
const tmp = () => tempDirCleanedBy(cleanups);
const CHECKS = { recheckMs: 1, sweepMs: 60_000, now: Date.now };

/** A watcher whose reports are collected, reading the owner's counters with `counters`. */
function watching(paths: string[], counters: CommitHandlers["counters"], checks = CHECKS) {
  const commits: string[] = [];
  const errors: unknown[] = [];
  const watcher = new CommitWatcher(
    paths,
    { onCommit: (p) => void commits.push(p), onCheckDue: () => {}, onError: (e) => void errors.push(e), counters },
    checks,
  );
  cleanups.push(() => watcher.close());
  return { watcher, commits, errors };
}

/** Runs the watcher's checks as its owner would, for `ms`. */
async function checkFor(watcher: CommitWatcher, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    watcher.check();
    await Bun.sleep(2);
  }
}

function outbox(path: string, namespace: string): Outbox {
  const q = new Outbox(path, namespace);
  cleanups.push(() => q.close());
  return q;
}

describe("CommitWatcher", () => {
  test("reports another connection's commits to the files it watches, in any directory, and neither the owner's own commits nor other files", async () => {
    const one = tmp();
    const two = tmp();
    const files = { a: one.file("a.db"), b: two.file("b.db"), c: one.file("c.db") };
    const owners = { a: outbox(files.a, "a"), b: outbox(files.b, "b") };
    const { watcher, commits, errors } = watching([files.a, files.b], (p) =>
      drainSide(p === files.a ? owners.a : owners.b).commitCounters(),
    );
    outbox(files.b, "b").enqueue("INSERT INTO b VALUES (1)", "[]");
    await waitFor(() => {
      watcher.check();
      return commits.includes(files.b);
    }, "the producer's commit to b.db");
    commits.length = 0;
    owners.a.enqueue("INSERT INTO a VALUES (1)", "[]"); // the owner's own commit: data_version does not move
    outbox(files.c, "c").enqueue("INSERT INTO c VALUES (1)", "[]"); // a file nobody watches, beside a.db
    await checkFor(watcher, 200); // past every recheck of the owner's change
    expect(commits).toEqual([]);
    outbox(files.a, "a").enqueue("INSERT INTO a VALUES (2)", "[]");
    await waitFor(() => {
      watcher.check();
      return commits.includes(files.a);
    }, "the producer's commit to a.db");
    expect(errors).toEqual([]);
  });

  test("a change whose commit is not visible yet is reported once it is, at a check", async () => {
    const dir = tmp();
    const file = dir.file("q.db");
    let version = 1;
    const { watcher, commits } = watching([file], () => ({ version, writes: 0 }));
    fs.writeFileSync(`${file}-wal`, "frames"); // what a writer does before its commit is in the WAL index
    await checkFor(watcher, 20);
    expect(commits).toEqual([]); // the connection sees nothing new yet
    version = 2; // now it does
    await waitFor(
      () => {
        watcher.check();
        return commits.length > 0;
      },
      "the recheck to find the commit",
      2000,
    );
    expect(commits).toEqual([file]);
  });

  test("a WAL write that moved data_version is looked at again: a writer starting the WAL over moves it before its commit is visible", async () => {
    const dir = tmp();
    const file = dir.file("q.db");
    fs.writeFileSync(`${file}-wal`, "");
    let version = 1;
    const { watcher, commits } = watching([file], () => ({ version, writes: 0 }));
    const wal = fs.openSync(`${file}-wal`, "r+");
    cleanups.push(() => fs.closeSync(wal));
    version = 2; // the writer restarted the WAL: the header changed, its commit is not in yet
    fs.writeSync(wal, "frames"); // one write, one event
    await waitFor(() => commits.length === 1, "the change to be reported", 2000);
    version = 3; // its commit is in now
    await waitFor(
      () => {
        watcher.check();
        return commits.length === 2;
      },
      "the recheck to find the commit",
      2000,
    );
    expect(commits).toEqual([file, file]);
  });

  test("a commit whose change was never reported is found by the sweep of every file's data_version", () => {
    const dir = tmp();
    const files = [dir.file("x.db"), dir.file("y.db")];
    const versions = new Map(files.map((f) => [f, 1]));
    const { watcher, commits } = watching(files, (p) => ({ version: versions.get(p)!, writes: 0 }), {
      ...CHECKS,
      sweepMs: 50,
    });
    versions.set(files[1]!, 2); // no file event at all
    watcher.check(Date.now());
    expect(commits).toEqual([]); // the sweep is not due yet
    expect(watcher.checkAt).toBeLessThanOrEqual(Date.now() + 50);
    watcher.check(Date.now() + 60);
    expect(commits).toEqual([files[1]!]);
  });

  test("a change to a file its owner has not open is reported as is; the sweep leaves such files alone", async () => {
    const dir = tmp();
    const file = dir.file("held.db");
    const { watcher, commits } = watching([file], () => null, { ...CHECKS, sweepMs: 10 });
    watcher.check(Date.now() + 20);
    expect(commits).toEqual([]);
    fs.writeFileSync(file, "anything");
    await waitFor(() => commits.length > 0, "the change to be reported", 2000);
    expect(commits[0]).toBe(file);
  });

  test("paused (a backlog: every table is looked at anyway) it reports nothing; resumed, it reports what was committed meanwhile", async () => {
    const dir = tmp();
    const file = dir.file("q.db");
    const owner = outbox(file, "q");
    const { watcher, commits } = watching([file], () => drainSide(owner).commitCounters());
    watcher.pause();
    expect(watcher.armed).toBe(false);
    outbox(file, "q").enqueue("INSERT INTO q VALUES (1)", "[]");
    await checkFor(watcher, 50);
    expect(commits).toEqual([]);
    watcher.resume();
    expect(watcher.armed).toBe(true);
    expect(commits).toEqual([file]);
  });

  test("a directory that cannot be watched makes construction throw, naming it", () => {
    const dir = tmp();
    expect(() => watching([dir.file("gone/q.db")], () => null)).toThrow(dir.file("gone"));
  });
});

describe("Agenda", () => {
  test("the first cycle, a cycle after rows were left ready and a cycle after `all` look at every table; the others at the changed ones only", () => {
    const agenda = new Agenda<string>(60_000);
    expect(agenda.take(1000)).toBeNull();
    agenda.after(null, false);
    expect(agenda.pending).toBe(false);
    agenda.changed(["b"]);
    expect(agenda.pending).toBe(true);
    expect(agenda.take(1001)).toEqual(new Set(["b"]));
    expect(agenda.take(1002)).toEqual(new Set()); // what a cycle took is done with
    agenda.after(null, true); // rows are still ready
    expect(agenda.take(1003)).toBeNull();
    agenda.all();
    expect(agenda.nextAt()).toBe(0);
    expect(agenda.take(1004)).toBeNull();
  });

  test("the cycle at the earliest time a cycle reported looks at every table, and so does one every fullEveryMs", () => {
    const agenda = new Agenda<string>(10_000);
    expect(agenda.take(0)).toBeNull();
    agenda.after(500, false);
    agenda.changed(["a"]);
    expect(agenda.take(100)).toEqual(new Set(["a"]));
    agenda.after(900, false); // a later time does not move the earlier one
    expect(agenda.nextAt()).toBe(500);
    expect(agenda.take(500)).toBeNull();
    expect(agenda.nextAt()).toBe(10_500); // nothing due: the next full look
    expect(agenda.take(10_499)).toEqual(new Set());
    expect(agenda.take(10_500)).toBeNull();
  });
});

describe("the drain loop, watching", () => {
  const remoteWith = (path: string, tables: string[]) => {
    const db = new Database(path, { create: true });
    db.run("PRAGMA journal_mode = WAL");
    for (const t of tables) db.run(`CREATE TABLE ${t} (id INTEGER)`);
    cleanups.push(() => db.close());
    return db;
  };
  const count = (db: Database, table: string) =>
    db.query<{ n: number }, []>(`SELECT count(*) AS n FROM ${table}`).get()!.n;

  test("a commit wakes it for that table at once, and a table's max wait on time, with flush_interval at 60 s", async () => {
    const dir = tmp();
    const remote = remoteWith(dir.file("remote.db"), ["now", "later"]);
    const path = dir.file("remote.db");
    const config = oneApp(
      dir.file("outbox"),
      {
        r: { writer: "sqlite", connection: { path }, tables: ["now", { name: "later" }] },
      },
      { flushInterval: 60, tableFlushThreshold: 2, tableMaxWait: 0.3 },
    );
    const svc = new OutboxSyncService(config, { "app.r": createWriter("sqlite", { path }) });
    cleanups.push(() => svc.stop(2000));
    await svc.start();
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    producer.pushMany("now", [
      ["INSERT INTO now (id) VALUES (?)", [1]],
      ["INSERT INTO now (id) VALUES (?)", [2]],
    ]); // at the threshold
    await waitFor(
      () => count(remote, "now") === 2,
      "the commit to wake the drain (a 60 s flush_interval would not)",
      5000,
    );
    producer.push("later", "INSERT INTO later (id) VALUES (?)", [1]); // below the threshold: sent at its max wait
    const pushedAt = Date.now();
    await waitFor(() => count(remote, "later") === 1, "the max wait to fall due", 5000);
    expect(Date.now() - pushedAt).toBeGreaterThanOrEqual(250);
  });

  test("two targets whose tables share a db_dir both wake on their own tables' commits", async () => {
    const dir = tmp();
    const paths = { one: dir.file("one.db"), two: dir.file("two.db") };
    const remotes = { one: remoteWith(paths.one, ["a"]), two: remoteWith(paths.two, ["b"]) };
    const config = oneApp(
      dir.file("outbox"),
      {
        one: { writer: "sqlite", connection: { path: paths.one }, tables: ["a"] },
        two: { writer: "sqlite", connection: { path: paths.two }, tables: ["b"] },
      },
      { flushInterval: 60 },
    );
    const svc = new OutboxSyncService(config, {
      "app.one": createWriter("sqlite", { path: paths.one }),
      "app.two": createWriter("sqlite", { path: paths.two }),
    });
    cleanups.push(() => svc.stop(2000));
    await svc.start();
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    for (let i = 0; i < 3; i++) {
      producer.push("a", "INSERT INTO a (id) VALUES (?)", [i]);
      producer.push("b", "INSERT INTO b (id) VALUES (?)", [i]);
      await waitFor(
        () => count(remotes.one, "a") === i + 1 && count(remotes.two, "b") === i + 1,
        `push ${i} to reach both targets`,
        5000,
      );
    }
  });
});

describe("TargetLoop", () => {
  test("a writer that answers at once and a producer that commits during every batch do not starve the process's timers", async () => {
    // A SQLite target answers without any I/O wait, so a cycle is microtasks only; a loop that
    // found a commit after every cycle and went on without yielding never let a timer run (the
    // background prune's pauses waited 4-46 s, and with them the state file, metrics and stop).
    const dir = tmp();
    const path = dir.file("remote.db");
    const remote = await openRemote("sqlite", { path, cleanups });
    await remote.exec("CREATE TABLE t (id INTEGER)");
    const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
    producer.push("t", "INSERT INTO t (id) VALUES (?)", [0]);
    const BATCHES = 300;
    let batches = 0;
    const writer = createWriter("sqlite", { path });
    const writeBatch = writer.writeBatch.bind(writer);
    writer.writeBatch = (stmts) => {
      if (++batches < BATCHES) producer.push("t", "INSERT INTO t (id) VALUES (?)", [batches]); // seen by the next idle check
      return writeBatch(stmts);
    };
    const svc = new OutboxSyncService(
      oneApp(dir.file("outbox"), { r: { writer: "sqlite", connection: { path }, tables: ["t"] } }),
      {
        "app.r": writer,
      },
    );
    cleanups.push(() => svc.stop(2000));
    let batchesWhenTimerRan = -1;
    const timer = new Promise<void>((resolve) =>
      setTimeout(() => {
        batchesWhenTimerRan = batches;
        resolve();
      }, 5),
    );
    await svc.start();
    await timer;
    await waitFor(async () => (await remote.count("t")) === BATCHES, "every row delivered", 20_000);
    expect(batchesWhenTimerRan).toBeLessThan(BATCHES / 2); // starved, it ran only once the producer stopped
  });
});
