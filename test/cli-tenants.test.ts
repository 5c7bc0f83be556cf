// What an operator sees and repairs of a tenant template (SPEC §4c) from the command line: status
// per template (tenants with backlog, the held ones with why and since — a few lines whatever the
// tenant count), status --tenant T, kick --tenant, skip --tenant for a tenant whose database is
// gone (dry run first, the count given back), and the dead letters of a tenant — against a real
// `sqloutbox runservice` over SQLite files, a tenant held being one whose directory is missing.
import { Database } from "bun:sqlite";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fs from "node:fs";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import type { StatusTenants } from "../src/cli/tenant-report.ts";
import { renderTenants } from "../src/cli/tenant-status.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { BIN, cleanEnv, REPO, runInProcess } from "./support/cli.ts";
import { drainSide } from "./support/queue.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();
const INSERT = "INSERT INTO ev (k, n) VALUES (?, ?)";

/** outbox.toml for app `a` over `queue/` (or `where`), target `r` a template over `remote/{tenant}/db.sqlite`: a tenant without its directory cannot be opened. */
function config(dir: TempDir, where = 'db_dir = "queue"'): string {
  const file = dir.file("outbox.toml");
  fs.writeFileSync(
    file,
    `[app.a]\n${where}\nflush_interval = 0.02\ntable_flush_threshold = 1\ntable_max_wait = 0\noutage_backoff_cap_minutes = 1\n\n[app.a.db.r]\nwriter = "sqlite"\ntables = ["ev", "other"]\n\n[app.a.db.r.connection]\npath = "remote/{tenant}/db.sqlite"\n`,
  );
  return file;
}

/** Gives `tenant` its database (its directory and the tables): its rows can land. */
function makeTenant(dir: TempDir, tenant: string): void {
  fs.mkdirSync(dir.file(`remote/${tenant}`), { recursive: true });
  const db = new Database(dir.file(`remote/${tenant}/db.sqlite`), { create: true });
  db.run("CREATE TABLE IF NOT EXISTS ev (k TEXT NOT NULL, n INTEGER NOT NULL)");
  db.run("CREATE TABLE IF NOT EXISTS other (k TEXT NOT NULL, n INTEGER NOT NULL)");
  db.close();
}

/** The rows that landed in `tenant`'s database, in order (none while it cannot be read: the drain is writing it). */
function landed(dir: TempDir, tenant: string): number[] {
  const path = dir.file(`remote/${tenant}/db.sqlite`);
  if (!fs.existsSync(path)) return [];
  let db: Database | undefined;
  try {
    db = new Database(path, { readonly: true });
    return db
      .query<{ n: number }, []>("SELECT n FROM ev ORDER BY rowid")
      .all()
      .map((r) => r.n);
  } catch {
    return [];
  } finally {
    db?.close();
  }
}

/** Starts `sqloutbox runservice` as a child; resolves once it drains; stopped with SIGTERM by `stops`. */
async function runservice(file: string, stops: Array<() => unknown>) {
  const proc = Bun.spawn(["bun", BIN, "runservice", "--config", file], {
    cwd: REPO,
    env: cleanEnv(),
    stdout: "ignore",
    stderr: "pipe",
  });
  stops.push(async () => {
    proc.kill("SIGTERM");
    await proc.exited;
  });
  let err = "";
  void (async () => {
    const decoder = new TextDecoder();
    for await (const chunk of proc.stderr) err += decoder.decode(chunk, { stream: true });
  })();
  await waitFor(() => /draining/.test(err), "runservice to start", 20_000);
  return { log: () => err };
}

const cli = (file: string, ...args: string[]) => runInProcess([...args, "--config", file]);
const json = async (file: string, ...args: string[]) => {
  const r = await cli(file, ...args, "--json");
  return { ...r, doc: JSON.parse(r.stdout) };
};

test("status stays a few lines per template for 10 000 held tenants", () => {
  const at = "2026-12-07T12:00:00.000Z";
  const held = Array.from({ length: 10_000 }, (_, i) => ({
    tenant: `t${i}`,
    reason: "misconfigured" as const,
    message: `3D000: database "tenant_t${i}" does not exist`,
    since: at,
    until: "2026-12-07T12:05:00.000Z",
  }));
  const entry: StatusTenants = {
    app: "a",
    dbDir: "/q",
    dbFile: null,
    target: "a.r",
    tables: ["ev"],
    backlog: { tenants: 10_000, rows: 50_000, rowsWithoutTenant: 0, oldest: null },
    databases: { open: 0, maxOpen: 64, opened: 10_000, closed: 10_000 },
    held: { count: held.length, tenants: held },
  };
  const lines = renderTenants([entry], at);
  expect(lines).toHaveLength(9); // a blank line, the summary, the header, five tenants, the count of the rest
  expect(lines.at(-1)).toBe("  and 9995 more (status --json lists them all; status --tenant T shows one)");
});

describe("status of a tenant template with held tenants (a running drain)", () => {
  let dir: TempDir;
  let file: string;
  const stops: Array<() => unknown> = [];

  // acme delivers; g1…g7 have no database (held: the drain cannot open it); one row names no tenant.
  beforeAll(async () => {
    dir = makeTempDir("sqloutbox-cli-tenants-");
    file = config(dir);
    makeTenant(dir, "acme");
    const producer = new SQLMiddleware({ dbDir: dir.file("queue") });
    for (const t of ["acme", "g1", "g2", "g3", "g4", "g5", "g6", "g7"])
      for (let n = 1; n <= 2; n++) producer.push("ev", INSERT, [t, n], { tenant: t });
    producer.push("other", "INSERT INTO other (k, n) VALUES (?, ?)", ["g3", 9], { tenant: "g3" });
    producer.push("ev", INSERT, ["nobody", 1]);
    closeSharedOutboxes();
    await runservice(file, stops);
    await waitFor(
      async () => (await json(file, "status")).doc.tenants[0]?.held?.count === 7 && landed(dir, "acme").length === 2,
      "seven tenants held and acme's rows landed",
      30_000,
    );
  }, 60_000);
  afterAll(async () => {
    for (const stop of stops.reverse()) await stop();
    dir?.cleanup();
  });

  test("status: per template, its tenants with backlog, the oldest, its databases, and the first five held with why and since — never all of them", async () => {
    const { code, stdout } = await cli(file, "status");
    expect(code).toBe(0);
    const section = stdout.slice(stdout.indexOf("tenants of"));
    const lines = section.trimEnd().split("\n");
    expect(lines[0]).toMatch(
      /^tenants of target a\.r: 7 with backlog \(16 rows; 1 without a tenant\), the oldest g1 \d+\S* \(ev seq 3\); \d+\/64 databases open \(\d+ opened, \d+ closed\); 7 held, the oldest first:$/,
    );
    expect(lines[1]).toMatch(/^ {2}TENANT +HELD +SINCE +RETRY +WHY$/);
    expect(lines.slice(2, 7).map((l) => l.trim().split(/\s+/)[0])).toEqual(["g1", "g2", "g3", "g4", "g5"]);
    for (const l of lines.slice(2, 7))
      expect(l).toMatch(/ (outage|misconfigured) +\d+\S* ago .*cannot open .*db\.sqlite/);
    expect(lines[7]).toBe("  and 2 more (status --json lists them all; status --tenant T shows one)");
    expect(lines).toHaveLength(8);
  });

  test("status --json: the backlog counted from the queue, every held tenant with its reason, message, since and until", async () => {
    const { code, doc } = await json(file, "status");
    expect(code).toBe(0);
    const [t] = doc.tenants;
    expect(t).toMatchObject({
      app: "a",
      target: "a.r",
      tables: ["ev", "other"],
      backlog: { tenants: 7, rows: 16, rowsWithoutTenant: 1, oldest: { tenant: "g1", namespace: "ev", seq: 3 } },
      databases: { maxOpen: 64 },
      held: { count: 7 },
    });
    expect(t.databases.opened).toBeGreaterThanOrEqual(1);
    expect(t.held.tenants.map((h: { tenant: string }) => h.tenant)).toEqual(["g1", "g2", "g3", "g4", "g5", "g6", "g7"]);
    for (const h of t.held.tenants) {
      expect(h.reason).toMatch(/^(outage|misconfigured)$/);
      expect(h.message).toContain(`remote/${h.tenant}/db.sqlite`);
      expect(Date.parse(h.since)).toBeLessThanOrEqual(Date.parse(h.until));
    }
  });

  test("status --tenant T: its hold and its rows table by table; a tenant with nothing queued says so", async () => {
    const g3 = await cli(file, "status", "--tenant", "g3");
    expect(g3.code).toBe(0);
    const lines = g3.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(
      /^tenant g3 at target a\.r: HELD \((outage|misconfigured)\) since \S+ \(\d+\S* ago\), retried (now|in \S+): .*remote\/g3\/db\.sqlite/,
    );
    expect(lines.slice(2, 5).map((l) => l.split(/\s+/).slice(0, 4))).toEqual([
      ["APP", "TABLE", "PENDING", "OLDEST"],
      ["a", "ev", "2", expect.stringMatching(/^\d+\S*$/)],
      ["a", "other", "1", expect.stringMatching(/^\d+\S*$/)],
    ]);
    expect(lines.at(-1)).toBe("3 row(s) pending in 2 table(s), 0 dead letter(s)");
    const { doc } = await json(file, "status", "--tenant", "g3");
    expect(doc).toMatchObject({
      tenant: "g3",
      targets: [{ app: "a", target: "a.r", held: { tenant: "g3", reason: expect.any(String) } }],
      tables: [
        { namespace: "ev", pending: 2, head: { seq: 7, attempts: 0 }, failing: null, deadLetters: 0 },
        { namespace: "other", pending: 1, deadLetters: 0 },
      ],
      unreadable: [],
    });
    const acme = await cli(file, "status", "--tenant", "acme");
    expect(acme.stdout.trimEnd().split("\n")).toEqual([
      "tenant acme at target a.r: not held",
      "tenant acme has no rows queued and no dead letters",
    ]);
  });

  test("status --check fails on held tenants: one line per template, its oldest held tenant and why", async () => {
    const { code, stdout } = await cli(file, "status", "--check", "--fail-on", "held");
    expect(code).toBe(1);
    expect(stdout).toMatch(
      /check: 1 problem\(s\)\n {2}- held: 7 tenant\(s\) of a\/a\.r, the oldest g1 \((outage|misconfigured)\) since /,
    );
  });
});

test("skip --tenant on a running drain: the dry run moves nothing; the count given back moves the gone tenant's rows aside and every other row lands; when it comes back, a replay lands them once", async () => {
  const dir = tempDirCleanedBy(cleanups);
  // One file for both tables: the gone tenant has a transaction across them.
  const file = config(dir, 'db_file = "app.db"');
  for (const t of ["acme", "globex"]) makeTenant(dir, t);
  const producer = new SQLMiddleware({ dbFile: dir.file("app.db") });
  // The gone tenant's rows first: the others' rows wait applied behind them until they leave.
  for (let n = 1; n <= 3; n++) producer.push("ev", INSERT, ["gone", n], { tenant: "gone" });
  producer.transaction(
    () => {
      producer.push("ev", INSERT, ["gone", 4]);
      producer.push("other", "INSERT INTO other (k, n) VALUES (?, ?)", ["gone", 4]);
    },
    { tenant: "gone" },
  );
  for (let n = 1; n <= 3; n++) for (const t of ["acme", "globex"]) producer.push("ev", INSERT, [t, n], { tenant: t });
  closeSharedOutboxes();
  await runservice(file, cleanups);
  await waitFor(() => landed(dir, "acme").length === 3 && landed(dir, "globex").length === 3, "the other tenants");
  const depth = async () => (await json(file, "status")).doc.totals.depth as number;
  expect(await depth()).toBeGreaterThanOrEqual(5); // the gone tenant's, and the others' behind them

  const refused = await cli(file, "skip", "--tenant", "gone");
  expect(refused.code).toBe(2);
  expect(refused.stderr).toContain("run it with --dry-run first, then again with --expect N");
  const dry = await cli(file, "skip", "--tenant", "gone", "--dry-run");
  expect(dry.code).toBe(0);
  expect(dry.stdout.replaceAll(dir.path, "DIR")).toBe(
    [
      "APP  TABLE  TO MOVE  GROUPS  SEQS  FILE",
      "a    ev           4       1  1-4   DIR/app.db",
      "a    other        1       1  5     DIR/app.db",
      "",
      "dry run: would move 5 row(s) of tenant gone aside into the dead letters (reason tenant_gone), whole groups; nothing changed",
      "to move them: sqloutbox skip --config DIR/outbox.toml --tenant gone --expect 5",
      "",
    ].join("\n"),
  );
  const stale = await cli(file, "skip", "--tenant", "gone", "--expect", "4");
  expect(stale.code).toBe(1);
  expect(stale.stdout).toContain("refused: tenant gone has 5 row(s) queued now, not the 4 expected: nothing was moved");
  expect(
    (await json(file, "status", "--tenant", "gone")).doc.tables.map((t: { pending: number }) => t.pending),
  ).toEqual([4, 1]);

  const { code, doc } = await json(file, "skip", "--tenant", "gone", "--expect", "5");
  expect(code).toBe(0);
  expect(doc).toMatchObject({
    action: "skip",
    tenant: "gone",
    dryRun: false,
    selected: 5,
    expect: 5,
    moved: [
      { namespace: "ev", rows: 4, groups: 1, first: 1, last: 4 },
      { namespace: "other", rows: 1, groups: 1, first: 5, last: 5 },
    ],
    drains: [{ app: "a", pid: expect.any(Number) }],
    failed: [],
  });
  // The drain reads its queue again at once: the rows that waited behind are confirmed, nothing is left.
  await waitFor(async () => (await depth()) === 0, "the queue emptied");
  const letters = await json(file, "dead-letter", "list", "--tenant", "gone");
  expect(letters.doc.deadLetters.map((l: { seq: number; reason: string }) => [l.seq, l.reason])).toEqual([
    [1, "tenant_gone"],
    [2, "tenant_gone"],
    [3, "tenant_gone"],
    [4, "tenant_gone"],
    [5, "tenant_gone"],
  ]);

  // The tenant comes back: its letters replay, and land once, in order, the transaction whole.
  makeTenant(dir, "gone");
  const replay = await cli(file, "dead-letter", "replay", "--tenant", "gone", "--reason", "tenant_gone");
  expect(replay.code).toBe(0);
  await cli(file, "kick");
  await waitFor(() => landed(dir, "gone").length === 4, "the replayed rows", 20_000);
  expect(landed(dir, "gone")).toEqual([1, 2, 3, 4]);
  expect(landed(dir, "acme")).toEqual([1, 2, 3]);
}, 60_000);

describe("without a drain", () => {
  /** One db_dir of `ev`: acme's and globex's rows, each head failed and backing off. */
  function backedOff() {
    const dir = tempDirCleanedBy(cleanups);
    const file = config(dir);
    const producer = new SQLMiddleware({ dbDir: dir.file("queue") });
    const seqs = ["acme", "globex", "acme"].map((t, i) => producer.push("ev", INSERT, [t, i], { tenant: t }));
    closeSharedOutboxes();
    const q = new Outbox(dir.file("queue/ev.db"), "ev");
    cleanups.push(() => q.close());
    for (const seq of seqs.slice(0, 2)) {
      drainSide(q).recordAttempt(seq);
      drainSide(q).recordFailure(seq, "boom", "E1", new Date(Date.now() + 3_600_000));
    }
    const next = () =>
      q
        .fetchUnsynced(10)
        .filter((r) => r.nextAttemptAt !== null)
        .map((r) => r.tenant);
    return { dir, file, q, next };
  }

  test("kick --tenant ends that tenant's rows' backoff only, says so, and that no drain runs", async () => {
    const { file, next } = backedOff();
    expect(next()).toEqual(["acme", "globex"]);
    const { code, doc } = await json(file, "kick", "--tenant", "acme");
    expect(code).toBe(1); // no drain
    expect(doc).toMatchObject({
      action: "kick",
      tenant: "acme",
      heads: [{ app: "a", namespace: "ev", seq: 1, attempts: 1, nextAttemptAt: expect.any(String) }],
      drains: [{ app: "a", pid: null }],
    });
    expect(next()).toEqual(["globex"]);
    const again = await cli(file, "kick", "--tenant", "acme");
    expect(again.stdout).toContain("no row of tenant acme was backing off");
    const usage = await cli(file, "kick", "--tenant", "acme", "--namespace", "ev");
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain("--tenant ends the backoff of that tenant's rows in every table");
  });

  test("dead-letter list, replay, discard and purge --tenant act on that tenant's letters only", async () => {
    const { dir, file, q } = backedOff();
    q.deadLetter(1, "skipped"); // acme
    q.deadLetter(2, "skipped"); // globex
    q.deadLetter(3, "skipped"); // acme
    const list = await cli(file, "dead-letter", "list", "--tenant", "acme");
    expect(list.stdout.split("\n")[0]).toMatch(/^APP +NAMESPACE +SEQ +GROUP +TENANT +REASON/);
    expect(
      list.stdout
        .trimEnd()
        .split("\n")
        .slice(1)
        .map((l) => l.split(/\s+/).slice(2, 5)),
    ).toEqual([
      ["1", "-", "acme"],
      ["3", "-", "acme"],
    ]);
    const replay = await json(file, "dead-letter", "replay", "--tenant", "acme", "--dry-run");
    expect(replay.doc).toMatchObject({ selected: 2, replayed: [{ seq: 1 }, { seq: 3 }] });
    const discard = await cli(file, "dead-letter", "discard", "--tenant", "globex", "--dry-run");
    expect(discard.stdout).toContain(
      `to discard them: sqloutbox dead-letter discard --config ${file} --tenant globex --expect 1`,
    );
    expect((await json(file, "dead-letter", "discard", "--tenant", "globex", "--expect", "1")).doc.discarded).toEqual([
      { namespace: "ev", seq: 2, file: dir.file("queue/ev.db") },
    ]);
    const purge = await json(file, "dead-letter", "purge", "--tenant", "acme", "--unreplayed", "--older-than", "0s");
    // seq 3 stays: the namespace's newest letter, which the chain may need.
    expect(purge.doc).toMatchObject({
      tenant: "acme",
      purged: [{ seq: 1 }],
      kept: [{ seq: 3, keptBecause: "newest" }],
    });
    const left = await json(file, "dead-letter", "list");
    expect(left.doc.deadLetters.map((l: { seq: number; state: string }) => [l.seq, l.state])).toEqual([
      [2, "discarded"],
      [3, "dead"],
    ]);
    const usage = await cli(file, "dead-letter", "replay", "--namespace", "ev", "--seq", "3", "--tenant", "acme");
    expect(usage.code).toBe(2);
  });

  test("a tenant name no push accepts is a usage error, and skip names its two forms", async () => {
    const { file } = backedOff();
    for (const args of [
      ["status", "--tenant", "../x"],
      ["kick", "--tenant", "a b"],
      ["skip", "--tenant", "_x", "--dry-run"],
      ["dead-letter", "list", "--tenant", "x/y"],
    ]) {
      const r = await cli(file, ...args);
      expect({ args, code: r.code }).toEqual({ args, code: 2 });
      expect(r.stderr).toContain("--tenant: invalid tenant name");
    }
    const both = await cli(file, "skip", "--tenant", "acme", "--namespace", "ev", "--seq", "1");
    expect(both.code).toBe(2);
    expect(both.stderr).toContain("--tenant moves a tenant's rows in every table: not with --namespace or --seq");
    const neither = await cli(file, "skip");
    expect(neither.stderr).toContain(
      "missing required option --namespace (or --tenant T for a tenant's whole backlog)",
    );
  });
});
