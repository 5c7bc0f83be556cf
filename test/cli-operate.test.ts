// What an operator sees of a running drain without touching the network: status reads the drain's
// persisted state (targets down, tables held, the ledger's fleet view), `status --check` exits
// non-zero for each condition cron, Nagios or a probe cares about, `kick` cuts a backoff short,
// and JSON logs carry their facts as fields.
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import fs from "node:fs";
import { SQLMiddleware, closeSharedOutboxes } from "../src/outbox/middleware.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { BIN, cleanEnv, REPO, run, runInProcess } from "./support/cli.ts";
import { openRemote } from "./support/remote.ts";
import { describeSlow } from "./support/slow.ts";
import { pgBehindProxy } from "./support/tcp-proxy.ts";
import type { TempDir } from "./support/tmp.ts";
import { waitFor } from "./support/wait.ts";
import { drainSide } from "./support/queue.ts";

const cleanups = cleanupsAfterEach();
const tmp = (): TempDir => tempDirCleanedBy(cleanups);

/** outbox.toml for one app over `queue/` with one target; `tuning` lines go under [app.a]. */
function config(dir: TempDir, target: string, tuning = ""): string {
  const file = dir.file("outbox.toml");
  fs.writeFileSync(
    file,
    `[app.a]\ndb_dir = "queue"\nflush_interval = 0.02\ntable_flush_threshold = 1\ntable_max_wait = 0\nbackoff_unit_seconds = 0.01\n${tuning}\n[app.a.db.r]\n${target}\n`,
  );
  return file;
}

/** Starts `sqloutbox runservice` in the background; resolves once it logged that it is draining. */
async function runservice(file: string, extra: string[] = [], env: Record<string, string> = {}) {
  const proc = Bun.spawn(["bun", BIN, "runservice", "--config", file, ...extra], {
    cwd: REPO,
    env: cleanEnv(env),
    stdout: "pipe",
    stderr: "pipe",
  });
  cleanups.push(async () => {
    proc.kill("SIGTERM");
    await proc.exited;
  });
  let err = "";
  const reader = proc.stderr.getReader();
  const lines: string[] = [];
  void (async () => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      err += new TextDecoder().decode(value);
      lines.splice(0, lines.length, ...err.split("\n"));
    }
  })();
  await waitFor(() => /draining/.test(err), "runservice to start", 20_000);
  return { proc, lines, stderr: () => err };
}

const check = (file: string, ...extra: string[]) => runInProcess(["status", "--config", file, "--check", ...extra]);

describe("status --check", () => {
  test("exits 0 when all is well and 1 for a stuck head, dead letters or a too-old row, naming each; --fail-on picks the conditions", async () => {
    const dir = tmp();
    const file = config(
      dir,
      `writer = "sqlite"\ntables = ["a", "b", "c"]\n[app.a.db.r.connection]\npath = "remote.db"`,
    );
    const producer = new SQLMiddleware({ dbDir: dir.file("queue") });
    for (const t of ["a", "b", "c"]) producer.push(t, `INSERT INTO ${t} (id) VALUES (?)`, [1]);
    closeSharedOutboxes();
    const ok = await check(file, "--max-age", "1h");
    expect({ code: ok.code, tail: ok.stdout.trim().split("\n").at(-1) }).toEqual({ code: 0, tail: "check: ok" });

    const a = new Outbox(dir.file("queue/a.db"), "a");
    const head = a.head()!.seq;
    drainSide(a).recordAttempt(head);
    drainSide(a).recordFailure(head, "boom", "E1", new Date(Date.now() + 60_000));
    drainSide(a).recordAttempt(head);
    a.close();
    const b = new Outbox(dir.file("queue/b.db"), "b");
    b.skipHead(b.head()!.seq);
    b.close();
    const bad = await check(file, "--max-age", "1h");
    expect(bad.code).toBe(1);
    expect(bad.stdout).toContain("check: 2 problem(s)");
    expect(bad.stdout).toMatch(/- stuck: a\/a head seq 1 failed 2 time\(s\): boom/);
    expect(bad.stdout).toMatch(/- dead letters: a\/b has 1/);
    const age = await check(file, "--fail-on", "age", "--max-age", "0s");
    expect(age.code).toBe(1);
    expect(age.stdout).toMatch(/- too old: a\/a oldest pending row waited .* \(limit 0ms\)/);
    expect(age.stdout).toMatch(/- too old: a\/c /);
    expect((await check(file, "--fail-on", "age", "--max-age", "1h")).code).toBe(0); // stuck and dead are not asked about
    const json = JSON.parse((await check(file, "--json", "--fail-on", "dead")).stdout);
    expect(json.check).toEqual({ ok: false, problems: ["dead letters: a/b has 1"] });
    expect((await check(file, "--fail-on", "nonsense")).code).toBe(2);
  });
});

// The drain writes what status reads every 2 s (runService's stateIntervalMs, which runservice
// does not expose), so each step of this test waits that long.
describeSlow(
  "status of a running drain",
  "watch runservice's persisted state change as a target goes down and comes back",
  () => {
    test("a running drain's held table and down target are in status (no network call) and fail the check; status shows the fleet view", async () => {
      const dir = tmp();
      const db = await openRemote("postgres", { cleanups });
      await db.exec("CREATE TABLE present (id BIGINT)");
      const { proxy, url } = pgBehindProxy(db, cleanups);
      const file = config(
        dir,
        `writer = "postgres"\ntables = ["present", "absent"]\n[app.a.db.r.connection]\nurl = "${url}"\nconnect_timeout = 1`,
        'outage_backoff_cap_minutes = 0.02\norigin_label = "web-7"',
      );
      const producer = new SQLMiddleware({ dbDir: dir.file("queue") });
      producer.push("present", "INSERT INTO present (id) VALUES (?)", [1]);
      producer.push("absent", "INSERT INTO absent (id) VALUES (?)", [1]);
      closeSharedOutboxes();
      await runservice(file);
      const status = async () => JSON.parse((await runInProcess(["status", "--config", file, "--json"])).stdout);
      await waitFor(
        async () => (await status()).namespaces.some((n: { held: unknown }) => n.held !== null),
        "the held table to show in status",
        20_000,
      );
      const held = await status();
      expect(held.dbDirs[0].drain.pid).toBeGreaterThan(0);
      expect(held.namespaces.find((n: { namespace: string }) => n.namespace === "absent").held).toMatchObject({
        reason: "remote schema",
      });
      expect(held.namespaces.find((n: { namespace: string }) => n.namespace === "present")).toMatchObject({
        depth: 0,
        held: null,
      });
      await waitFor(async () => (await status()).fleet.length > 0, "the fleet view", 20_000);
      const fleet = (await status()).fleet;
      expect(fleet).toEqual([
        expect.objectContaining({ target: "a.r", namespace: "present", label: "web-7", through: 1, self: true }),
      ]);
      const human = await runInProcess(["status", "--config", file]);
      expect(human.stdout).toMatch(/drain running \(pid \d+\)/);
      expect(human.stdout).toMatch(/absent .* remote schema/);
      expect(human.stdout).toMatch(/fleet .*\n.*\n.*present .* \(this host\) +web-7 +1/);
      const c1 = await check(file, "--fail-on", "held");
      expect(c1.code).toBe(1);
      expect(c1.stdout).toMatch(/- held: a\/absent \(remote schema\)/);

      proxy.cut();
      const again = new SQLMiddleware({ dbDir: dir.file("queue") });
      again.push("present", "INSERT INTO present (id) VALUES (?)", [2]); // the drain finds out at its next batch
      await waitFor(
        async () => (await status()).targets[0]?.state === "outage",
        "the target to be down in status",
        20_000,
      );
      const down = await check(file, "--fail-on", "down");
      expect(down.code).toBe(1);
      expect(down.stdout).toMatch(/- down: target a\.r since .*, \d+ failed attempt\(s\)/);
      expect((await runInProcess(["status", "--config", file])).stdout).toMatch(/a\.r +DOWN/);
      proxy.restore();
      await waitFor(async () => (await status()).targets[0]?.state === "ok", "the target to be back", 20_000);
    }, 60_000);
  },
);

describe("kick", () => {
  test("without a drain says so and exits 1", async () => {
    const dir = tmp();
    const file = config(dir, `writer = "sqlite"\ntables = ["t"]\n[app.a.db.r.connection]\npath = "remote.db"`);
    const kicked = await runInProcess(["kick", "--config", file]); // no drain (and no db_dir)
    expect(kicked.code).toBe(1);
    expect(kicked.stderr).toContain(`no drain is running on ${dir.file("queue")}`);
  });
});

describe("kick retries a stuck head", () => {
  test("ends the head's backoff in place, only where --app/--namespace say: the fixed rows land at once, the others wait", async () => {
    const dir = tmp();
    const db = await openRemote("postgres", { cleanups });
    await db.exec("CREATE TABLE parents (id BIGINT PRIMARY KEY)");
    for (const t of ["items", "notes"])
      await db.exec(`CREATE TABLE ${t} (id BIGINT PRIMARY KEY, parent BIGINT NOT NULL REFERENCES parents (id))`);
    // A minute's backoff unit: the first retry is 2 minutes away, so only a kick retries within the test.
    const file = config(
      dir,
      `writer = "postgres"\ntables = ["items", "notes"]\n[app.a.db.r.connection]\nurl = "${db.url}"`,
      "backoff_unit_seconds = 60",
    );
    fs.writeFileSync(file, fs.readFileSync(file, "utf8").replace("backoff_unit_seconds = 0.01\n", ""));
    const drain = await runservice(file);
    const producer = new SQLMiddleware({ dbDir: dir.file("queue") });
    producer.push("items", "INSERT INTO items (id, parent) VALUES (?, ?)", [1, 10]); // no parent 10 yet
    producer.push("notes", "INSERT INTO notes (id, parent) VALUES (?, ?)", [1, 20]); // no parent 20 yet
    closeSharedOutboxes();
    const namespaces = async () =>
      JSON.parse((await runInProcess(["status", "--config", file, "--json"])).stdout).namespaces;
    await waitFor(
      async () => (await namespaces()).every((n: { isStuck: boolean }) => n.isStuck),
      "both heads stuck",
      20_000,
    );
    for (const n of await namespaces()) expect(Date.parse(n.nextAttemptAt) - Date.now()).toBeGreaterThan(60_000);
    const shown = await runInProcess(["status", "--config", file]);
    expect(shown.stdout).toMatch(/ NEXT /);
    expect(shown.stdout).toMatch(/items +1 .* in 1m\d\ds +STUCK /);
    await db.exec("INSERT INTO parents (id) VALUES (10), (20)"); // the operator fixes the remote

    const one = await run(["kick", "--config", file, "--app", "a", "--namespace", "items", "--json"]);
    expect(one.code).toBe(0);
    const kicked = JSON.parse(one.stdout);
    expect(
      kicked.heads.map((h: { namespace: string; seq: number; attempts: number }) => [h.namespace, h.seq, h.attempts]),
    ).toEqual([["items", 1, 1]]);
    expect(kicked.drains[0].pid).toBe(drain.proc.pid);
    const landed = async (t: string) => (await db.rows(`SELECT id FROM ${t}`)).length;
    await waitFor(async () => (await landed("items")) === 1, "the kicked head to land", 10_000);
    await Bun.sleep(500);
    expect(await landed("notes")).toBe(0); // not kicked: still backing off
    const notes = (await namespaces()).find((n: { namespace: string }) => n.namespace === "notes");
    expect([notes.depth, notes.isStuck]).toEqual([1, true]);

    const all = await run(["kick", "--config", file]);
    expect(all.code).toBe(0);
    expect(all.stdout).toMatch(/ended the backoff of a\/notes head seq 1 \(1 attempt\), .*notes\.db/);
    await waitFor(async () => (await landed("notes")) === 1, "the second head to land", 10_000);
    // The local confirmation follows the remote commit: status shows it a moment later.
    await waitFor(
      async () => (await namespaces()).every((n: { depth: number }) => n.depth === 0),
      "both queues confirmed empty",
      10_000,
    );
  }, 60_000);

  test("--key ends only that key's head backoff (a held lane's), and needs --namespace", async () => {
    const dir = tmp();
    const file = config(dir, `writer = "sqlite"\ntables = ["t"]\n[app.a.db.r.connection]\npath = "remote.db"`);
    const producer = new SQLMiddleware({ dbDir: dir.file("queue") });
    const k1 = producer.push("t", "INSERT INTO t (id) VALUES (?)", [1], { key: "k1" });
    const k2 = producer.push("t", "INSERT INTO t (id) VALUES (?)", [2], { key: "k2" });
    closeSharedOutboxes();
    const q = new Outbox(dir.file("queue/t.db"), "t");
    cleanups.push(() => q.close());
    for (const seq of [k1, k2]) drainSide(q).recordFailure(seq, "boom", "E", new Date(Date.now() + 3_600_000));
    const kicked = await runInProcess(["kick", "--config", file, "--namespace", "t", "--key", "k2", "--json"]);
    expect(kicked.code).toBe(1); // no drain runs: the backoff is ended in the file all the same
    expect(q.fetchUnsynced(10).map((r) => [r.seq, r.nextAttemptAt === null])).toEqual([
      [k1, false],
      [k2, true],
    ]);
    const usage = await runInProcess(["kick", "--config", file, "--key", "k2"]);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain("--key K needs --namespace N");
  });

  test("a --namespace that no location holds is an error, and nothing is signalled", async () => {
    const dir = tmp();
    const file = config(dir, `writer = "sqlite"\ntables = ["t"]\n[app.a.db.r.connection]\npath = "remote.db"`);
    new SQLMiddleware({ dbDir: dir.file("queue") }).push("t", "INSERT INTO t (id) VALUES (?)", [1]);
    closeSharedOutboxes();
    const kicked = await runInProcess(["kick", "--config", file, "--namespace", "typo"]);
    expect(kicked.code).toBe(1);
    expect(kicked.stderr).toContain(`namespace "typo": no typo.db in ${dir.file("queue")}`);
  });
});

// The outage backoff's first step is a fixed 1 s (src/drain/schedule.ts), so reaching a backoff
// long enough to tell a kick from a retry takes seconds of real outage.
describeSlow("kick against a real backoff", "wait out five outage backoffs of a running drain", () => {
  test("makes a drain that backs off from a long outage retry at once", async () => {
    const dir = tmp();
    const db = await openRemote("postgres", { cleanups });
    await db.exec("CREATE TABLE t (id BIGINT)");
    const { proxy, url } = pgBehindProxy(db, cleanups);
    const file = config(
      dir,
      `writer = "postgres"\ntables = ["t"]\n[app.a.db.r.connection]\nurl = "${url}"\nconnect_timeout = 1`,
      "outage_backoff_cap_minutes = 10",
    );
    const drain = await runservice(file);
    proxy.cut();
    const producer = new SQLMiddleware({ dbDir: dir.file("queue") });
    producer.push("t", "INSERT INTO t (id) VALUES (?)", [1]);
    // Five failures in a row: the next retry is 8-16 s away (16 s jittered to between half and
    // all) — room for the state file's 2 s and a kick process starting on a loaded machine (after
    // four, 4-8 s was sometimes not).
    const failures = () =>
      JSON.parse(fs.readFileSync(dir.file("queue/.sqloutbox-state.json"), "utf8")).targets[0].failures as number;
    await waitFor(
      () => fs.existsSync(dir.file("queue/.sqloutbox-state.json")) && failures() >= 5,
      "five failed attempts",
      40_000,
    );
    proxy.restore();
    const kicked = await run(["kick", "--config", file]);
    expect(kicked.code).toBe(0);
    expect(kicked.stdout).toMatch(/asked the drain \(pid \d+\) on .* to retry now/);
    const q = new Outbox(dir.file("queue/t.db"), "t");
    cleanups.push(() => q.close());
    // Within the wait the backoff (at least 8 s) cannot have ended by itself: only the kick retries.
    await waitFor(() => q.pendingCount() === 0, "delivery right after the kick", 3_500);
    expect(drain.stderr()).toMatch(
      /SIGUSR2: retrying every backed-off target and held table now\n[\s\S]*target a\.r is reachable again/,
    );
  }, 90_000);
});

describe("JSON logs", () => {
  test("carry app, target, namespace, seq, attempt, error_class, rows and duration_ms as fields; one debug line per batch", async () => {
    const dir = tmp();
    const remote = new Database(dir.file("remote.db"), { create: true });
    remote.run("CREATE TABLE t (id INTEGER CHECK (id > 0))");
    remote.close();
    const file = config(
      dir,
      `writer = "sqlite"\ntables = ["t"]\n[app.a.db.r.connection]\npath = "remote.db"`,
      "max_attempts = 2",
    );
    const producer = new SQLMiddleware({ dbDir: dir.file("queue") });
    producer.push("t", "INSERT INTO t (id) VALUES (?)", [-1]); // poison: a CHECK violation
    producer.push("t", "INSERT INTO t (id) VALUES (?)", [2]);
    closeSharedOutboxes();
    const drain = await runservice(file, ["--log-format", "json", "--log-level", "debug"]);
    const q = new Outbox(dir.file("queue/t.db"), "t");
    cleanups.push(() => q.close());
    await waitFor(
      () => q.pendingCount() === 0 && q.deadCount() === 1,
      "the poison row to be dead-lettered and the next to land",
      20_000,
    );
    await waitFor(
      () => /dead-lettered seq 1/.test(drain.stderr()) && /drain: batch to a\.r/.test(drain.stderr()),
      "the dead letter and the next batch in the log",
    );
    const records = drain
      .stderr()
      .trim()
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l));
    const failed = records.find((r) => /failed on target/.test(r.msg));
    expect(failed).toMatchObject({
      level: "warn",
      app: "a",
      target: "a.r",
      namespace: "t",
      seq: 1,
      attempt: 1,
      error_class: "SQLITE_CONSTRAINT_CHECK",
    });
    const dead = records.find((r) => /dead-lettered seq 1/.test(r.msg));
    expect(dead).toMatchObject({ level: "error", app: "a", target: "a.r", namespace: "t", seq: 1, attempt: 2 });
    const batches = records.filter((r) => r.level === "debug" && /^drain: batch to a\.r/.test(r.msg));
    expect(batches.length).toBeGreaterThan(0);
    for (const b of batches)
      expect(b).toMatchObject({ app: "a", target: "a.r", rows: expect.any(Number), duration_ms: expect.any(Number) });
    // The same warning is not repeated: each distinct line at most a few times.
    const counts = new Map<string, number>();
    for (const r of records) if (r.level !== "debug") counts.set(r.msg, (counts.get(r.msg) ?? 0) + 1);
    expect(Math.max(...counts.values())).toBe(1);
  }, 30_000);
});
