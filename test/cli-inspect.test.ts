// status, verify and dead-letter list/show against real queue files in a temp db_dir: output,
// exit codes, --json parsed back, and the read-only promise (every file byte-identical, none created).
// Commands run in this process (runInProcess) unless the test needs a process of their own: another
// user, a pipe, a signal.
import { Database } from "bun:sqlite";
import { beforeEach, describe, expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import { renderStatus } from "../src/cli/commands/status.ts";
import { collectStatus } from "../src/cli/status-report.ts";
import { stdoutStyle } from "../src/cli/text-output.ts";
import { drainHome } from "../src/drain/home.ts";
import { acquireLock } from "../src/drain/lock.ts";
import { writeDrainState, type PersistedTarget } from "../src/drain/state-file.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { normalize, REPO, run, runInProcess } from "./support/cli.ts";
import { hashTree } from "./support/dir-hash.ts";
import { drainSide, breakChain, openQueue, seed } from "./support/queue.ts";

const cleanups = cleanupsAfterEach();
let tmp: string;
let dbDir: string;

beforeEach(() => {
  tmp = tempDirCleanedBy(cleanups, "sqloutbox-cli-").path;
  dbDir = path.join(tmp, "queue");
  seed(dbDir, "orders", 5);
  seed(dbDir, "payments", 3);
  // A head that failed twice: stuck, with an error quoting a credential-bearing URL.
  const orders = openQueue(dbDir, "orders");
  const head = orders.head()!;
  drainSide(orders).recordAttempt(head.seq);
  drainSide(orders).recordFailure(
    head.seq,
    'relation "orders" does not exist (postgres://app:hunter2@db.internal/prod)',
    "42P01",
    new Date(Date.now() + 60_000),
  );
  drainSide(orders).recordAttempt(head.seq);
  orders.close();
  // One dead letter in payments.
  const payments = openQueue(dbDir, "payments");
  payments.skipHead(payments.head()!.seq);
  payments.close();
});

describe("status", () => {
  test("prints an aligned row per namespace with depth, age, stuck head, masked error and dead letters", async () => {
    const r = await runInProcess(["status", "--db-dir", dbDir]);
    expect(r.code).toBe(0);
    expect(normalize(r.stdout, tmp)).toMatchInlineSnapshot(`
      "no drain is running on <DIR>/queue
      NAMESPACE  DEPTH  OLDEST  HEAD  ATTEMPTS    NEXT  STUCK  DEAD  LAST ERROR
      orders         5  <age>     1         2  in  <age>  STUCK     0  42P01: relation "orders" does not exist (postgres://app:***@db.internal/prod)
      payments       2  <age>     2         0       -  no        1  -

      2 namespace(s), 7 pending, 1 stuck, 0 held, 1 dead letter(s)
      "
    `);
  });

  test("shows the error class once when the writer's message already starts with it", async () => {
    const q = openQueue(dbDir, "payments");
    const head = q.head()!;
    drainSide(q).recordAttempt(head.seq);
    drainSide(q).recordFailure(
      head.seq,
      '23505: duplicate key value violates unique constraint "payments_pkey"',
      "23505",
      new Date(Date.now() + 60_000),
    );
    q.close();
    const r = await runInProcess(["status", "--db-dir", dbDir]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("  23505: duplicate key value violates unique constraint");
    expect(r.stdout).not.toContain("23505: 23505");
  });

  test("shows the error class once after the name of a group's failing statement; NEXT says when the head is tried again", async () => {
    const q = openQueue(dbDir, "payments");
    const head = q.head()!;
    drainSide(q).recordAttempt(head.seq);
    const error = `seq ${head.seq + 1} of the group of seq ${head.seq}: 23514: new row violates check constraint "amount"`;
    drainSide(q).recordFailure(head.seq, error, "23514", new Date(Date.now() + 90_000));
    q.close();
    const r = await runInProcess(["status", "--db-dir", dbDir]);
    expect(r.code).toBe(0);
    const line = r.stdout.split("\n").find((l) => l.startsWith("payments"))!;
    expect(line).toMatch(/ in 1m[23]\ds +STUCK /);
    expect(line).toEndWith(`  ${error}`);
    const json = JSON.parse((await runInProcess(["status", "--db-dir", dbDir, "--json"])).stdout);
    const payments = json.namespaces.find((n: { namespace: string }) => n.namespace === "payments");
    expect(Date.parse(payments.nextAttemptAt) - Date.now()).toBeGreaterThan(60_000);
  });

  test("--json is the documented shape, parsed back", async () => {
    const r = await runInProcess(["status", "--db-dir", dbDir, "--json"]);
    expect(r.code).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(Object.keys(report)).toEqual([
      "generatedAt",
      "dbDirs",
      "namespaces",
      "targets",
      "fleet",
      "tenants",
      "unreadable",
      "totals",
    ]);
    expect(report.dbDirs).toEqual([
      {
        app: null,
        dbDir,
        dbFile: null,
        exists: true,
        drain: { pid: null, updatedAt: null, stoppedAt: null, stale: false },
      },
    ]);
    expect(report.totals).toEqual({
      namespaces: 2,
      depth: 7,
      stuck: 1,
      held: 0,
      heldLanes: 0,
      deadLetters: 1,
      targetsDown: 0,
    });
    expect([report.targets, report.fleet, report.tenants]).toEqual([[], [], []]); // no drain runs here, no tenant
    const [orders, payments] = report.namespaces;
    expect(orders).toMatchObject({
      app: null,
      dbDir,
      namespace: "orders",
      file: path.join(dbDir, "orders.db"),
      depth: 5,
      headSeq: 1,
      headAttempts: 2,
      isStuck: true,
      lastErrorClass: "42P01",
      capacityPct: null,
      deadLetterCount: 0,
    });
    expect(orders.lastError).toBe('relation "orders" does not exist (postgres://app:***@db.internal/prod)');
    expect(orders.oldestPendingAgeMs).toBeGreaterThanOrEqual(0);
    expect(payments).toMatchObject({
      namespace: "payments",
      depth: 2,
      isStuck: false,
      deadLetterCount: 1,
      lastError: null,
    });
  });

  test("a drain holding the lock without a state file (OutboxSyncService on its own) is running, not stale", async () => {
    const lock = acquireLock(drainHome(dbDir).lockFile);
    try {
      const human = await runInProcess(["status", "--db-dir", dbDir, "--check", "--fail-on", "down"]);
      expect(human.code).toBe(0);
      expect(human.stdout.split("\n")[0]).toBe(`drain running (pid ${process.pid}) on ${dbDir}, without a state file`);
      expect(human.stdout).toContain("check: ok");
      const json = JSON.parse((await runInProcess(["status", "--db-dir", dbDir, "--json"])).stdout);
      expect(json.dbDirs[0].drain).toEqual({ pid: process.pid, updatedAt: null, stoppedAt: null, stale: false });
    } finally {
      lock.release();
    }
  });

  test("with a config the drain would refuse (a typo): warns with every problem, still shows the queues, masks secrets", async () => {
    const config = path.join(tmp, "outbox.toml");
    fs.writeFileSync(
      config,
      `[app.shop]\ndb_dir = "queue"\nbatch_szie = 5\n[app.shop.db.main]\nwriter = "postgres"\ntables = ["orders", "payments"]\n[app.shop.db.main.connection]\nurl = "postgres://app:hunter2@db.internal/prod"\n`,
    );
    const r = await runInProcess(["status", "--config", config]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("shop  orders");
    expect(r.stderr).toContain(
      `${config}:3:1 [app.shop.batch_szie]: unknown key "batch_szie" (did you mean "batch_size"?)`,
    );
    expect(r.stderr).toContain(`(the drain refuses this config; reading only the db_dirs and db_files of ${config})`);
    expect(r.stdout + r.stderr).not.toContain("hunter2");
  });

  test("with a TOML syntax error or no apps: exit 1 with the config error", async () => {
    const config = path.join(tmp, "outbox.toml");
    fs.writeFileSync(config, `[app.shop\ndb_dir = "queue"\n`);
    const syntax = await runInProcess(["status", "--config", config]);
    expect(syntax.code).toBe(1);
    expect(syntax.stderr).toContain(`${config}:1:10: TOML syntax error`);
    fs.writeFileSync(config, "");
    const empty = await runInProcess(["status", "--config", config]);
    expect(empty.code).toBe(1);
    expect(empty.stderr).toContain("no apps configured");
  });

  test("with --config: every app's db_dir, capacity % from max_pending, secrets from the config masked", async () => {
    const other = path.join(tmp, "other");
    seed(other, "events", 4);
    const config = path.join(tmp, "outbox.toml");
    fs.writeFileSync(
      config,
      `[app.shop]
db_dir = "queue"
[app.shop.db.main]
writer = "postgres"
tables = ["orders", "payments"]
[app.shop.db.main.connection]
url = "postgres://app:hunter2@db.internal/prod"

[app.metrics]
db_dir = "other"
max_pending = 8
[app.metrics.db.main]
writer = "mysql"
tables = ["events"]
[app.metrics.db.main.connection]
url = "\${UNSET_IN_THIS_SHELL}"
`,
    );
    const r = await runInProcess(["status", "--config", config]);
    expect(r.code).toBe(0);
    expect(r.stdout).not.toContain("hunter2");
    expect(normalize(r.stdout, tmp)).toMatchInlineSnapshot(`
      "app shop: no drain is running on <DIR>/queue
      app metrics: no drain is running on <DIR>/other
      APP      NAMESPACE  DEPTH  OLDEST  HEAD  ATTEMPTS    NEXT  STUCK  DEAD  CAPACITY  LAST ERROR
      shop     orders         5  <age>     1         2  in  <age>  STUCK     0         -  42P01: relation "orders" does not exist (postgres://app:***@db.internal/prod)
      shop     payments       2  <age>     2         0       -  no        1         -  -
      metrics  events         4  <age>     1         0       -  no        0       50%  -

      3 namespace(s), 11 pending, 1 stuck, 0 held, 1 dead letter(s)
      "
    `);
    const json = JSON.parse((await runInProcess(["status", "--config", config, "--json"])).stdout);
    expect(
      json.namespaces.map((n: { app: string; namespace: string; capacityPct: number | null }) => [
        n.app,
        n.namespace,
        n.capacityPct,
      ]),
    ).toEqual([
      ["shop", "orders", null],
      ["shop", "payments", null],
      ["metrics", "events", 50],
    ]);
  });

  test("./outbox.toml in the working directory is the default config", async () => {
    fs.writeFileSync(
      path.join(tmp, "outbox.toml"),
      `[app.a]\ndb_dir = "queue"\n[app.a.db.x]\nwriter = "sqlite"\ntables = ["orders"]\n[app.a.db.x.connection]\npath = "r.db"\n`,
    );
    const r = await runInProcess(["status", "--json"], { cwd: tmp });
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).totals.namespaces).toBe(2);
  });

  test("a file that is not a database is reported and the exit code is 1", async () => {
    fs.writeFileSync(path.join(dbDir, "garbage.db"), "this is not sqlite".repeat(100));
    const r = await runInProcess(["status", "--db-dir", dbDir]);
    expect(r.code).toBe(1);
    // One line, naming the file once.
    expect(r.stdout).toContain(
      `UNREADABLE ${path.join(dbDir, "garbage.db")}: cannot read outbox file: file is not a database [SQLITE_NOTADB]\n`,
    );
    expect(r.stdout).toContain("orders");
    expect(r.stderr).toContain("status could not read 1 file(s)");
  });

  // Needs another user to be denied: runs where the suite runs as root and runuser exists.
  const asNobody = process.getuid?.() === 0 && Bun.which("runuser") !== null;
  test.skipIf(!asNobody)("a file this user may not read is reported with a permission hint", async () => {
    fs.chmodSync(tmp, 0o755);
    fs.chmodSync(dbDir, 0o755);
    fs.chmodSync(path.join(dbDir, "orders.db"), 0o600);
    const r = await run(["-u", "nobody", "--", "bun", path.join(REPO, "src/cli/bin.ts"), "status", "--db-dir", dbDir], {
      cmd: ["runuser"],
    });
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(
      `UNREADABLE ${path.join(dbDir, "orders.db")}: cannot read outbox file: unable to open database file [SQLITE_CANTOPEN] (permission denied for this user`,
    );
  });

  test("a db_dir holding only an unreadable file says so, not that there are no files", async () => {
    const only = path.join(tmp, "only-garbage");
    fs.mkdirSync(only);
    fs.writeFileSync(path.join(only, "x.db"), "this is not sqlite".repeat(100));
    const r = await runInProcess(["status", "--db-dir", only]);
    expect(r.code).toBe(1);
    expect(r.stdout).toEndWith("\nno readable outbox files\n");
  });

  test("--watch --json prints one document per line until SIGTERM, then exits 0", async () => {
    const proc = Bun.spawn(
      ["bun", "src/cli/bin.ts", "status", "--db-dir", dbDir, "--watch", "--json", "--interval", "0.1"],
      {
        cwd: path.resolve(import.meta.dir, ".."),
        stdout: "pipe",
        stderr: "pipe",
      },
    );
    const reader = proc.stdout.getReader();
    let text = "";
    while (text.split("\n").length < 3) text += new TextDecoder().decode((await reader.read()).value);
    proc.kill("SIGTERM");
    expect(await proc.exited).toBe(0);
    const docs = text
      .split("\n")
      .filter(Boolean)
      .slice(0, 2)
      .map((l) => JSON.parse(l));
    expect(docs.map((d) => d.totals.depth)).toEqual([7, 7]);
  });
});

describe("status --watch", () => {
  test("ends with exit 0 when its reader goes away (| head -1)", async () => {
    // bash waits for every member of a pipeline: a watcher that hung on the closed pipe would hang this.
    const script = `bun src/cli/bin.ts status --db-dir '${dbDir}' --watch --json --interval 0.05 | head -1 >/dev/null; echo "\${PIPESTATUS[0]}"`;
    const r = await run(["-c", script], { cmd: ["bash"] });
    expect(r.stdout.trim()).toBe("0");
    expect(r.stderr).toBe("");
  }, 20_000);

  test("without a terminal prints one timestamped report after another until SIGINT, then exits 0", async () => {
    const proc = Bun.spawn(["bun", "src/cli/bin.ts", "status", "--db-dir", dbDir, "--watch", "--interval", "0.1"], {
      cwd: path.resolve(import.meta.dir, ".."),
      stdout: "pipe",
      stderr: "pipe",
    });
    const reader = proc.stdout.getReader();
    let text = "";
    while (text.split("2 namespace(s)").length < 3) text += new TextDecoder().decode((await reader.read()).value);
    proc.kill("SIGINT");
    expect(await proc.exited).toBe(0);
    expect(text).not.toContain("\u001B["); // no screen clearing when not a terminal
    const first = text.slice(0, text.indexOf("dead letter(s)") + "dead letter(s)".length);
    expect(normalize(first, tmp)).toMatchInlineSnapshot(`
      "<TIME>
      no drain is running on <DIR>/queue
      NAMESPACE  DEPTH  OLDEST  HEAD  ATTEMPTS    NEXT  STUCK  DEAD  LAST ERROR
      orders         5  <age>     1         2  in  <age>  STUCK     0  42P01: relation "orders" does not exist (postgres://app:***@db.internal/prod)
      payments       2  <age>     2         0       -  no        1  -

      2 namespace(s), 7 pending, 1 stuck, 0 held, 1 dead letter(s)"
    `);
  });
});

describe("status of a running drain, from its state file", () => {
  // The cause is the part of a message that gets cut: this one is long on purpose.
  const CAUSE = `connection refused by postgres://app:hunter2@db.internal.example.com:5432/production (${"x".repeat(120)}) — the end`;
  /** A table of a drain's state, nothing delivered or held; with `lanes`, a table with lanes. */
  const tableOf = (namespace: string, lanes?: PersistedTarget["tables"][number]["lanes"]) => ({
    namespace,
    origin: null,
    through: null,
    held: null,
    counts: { delivered: 0, failed: 0, deadLettered: 0 },
    ...(lanes === undefined ? {} : { lanes }),
  });
  const target = (over: Partial<PersistedTarget>): PersistedTarget => ({
    target: "shop.main",
    app: "shop",
    state: "ok",
    failures: 0,
    downSince: null,
    lastError: null,
    lastSuccessAt: new Date().toISOString(),
    batchesInFlight: 0,
    lastRoundTripMs: 12.5,
    lastCycleAt: null,
    lastBeatAt: null,
    setupProblem: null,
    ledger: true,
    totals: { delivered: 0, failed: 0, deadLettered: 0 },
    tables: ["orders", "payments"].map((namespace) => tableOf(namespace)),
    fleet: [],
    fleetReadAt: null,
    recent: null,
    files: [],
    ...over,
  });
  /** Holds dbDir's lock as a drain would and writes its state with these targets. */
  const drainWith = (targets: PersistedTarget[]) => {
    const lock = acquireLock(drainHome(dbDir).lockFile);
    const now = new Date().toISOString();
    writeDrainState(drainHome(dbDir).stateFile, {
      version: 1,
      pid: process.pid,
      startedAt: now,
      updatedAt: now,
      stoppedAt: null,
      targets,
    });
    return lock;
  };

  test("shows per target what it delivered, its rows/s over the last interval, its lag (the oldest pending row) and its files' WAL", async () => {
    const files = [
      { file: `${dbDir}/orders.db`, walBytes: 3 * 1024 * 1024, freePages: 0, embedded: false },
      { file: `${dbDir}/payments.db`, walBytes: 512 * 1024, freePages: 0, embedded: false },
    ];
    const lock = drainWith([
      target({
        totals: { delivered: 12_345, failed: 0, deadLettered: 0 },
        recent: { delivered: 500, ms: 2000 },
        files,
      }),
    ]);
    try {
      const r = await runInProcess(["status", "--db-dir", dbDir]);
      const [header, row] = r.stdout.split("\n").slice(1, 3);
      expect(header).toMatch(/^TARGET +STATE +SINCE +FAILURES +DELIVERED +ROWS\/S +LAG +WAL +LAST BATCH +PROBLEM$/);
      expect(row).toMatch(/^shop\.main {2}ok {5}- {13}0 {6}12345 {3}250\/s +\d+(ms|s) {2}3\.5 MiB +\d+ms ago {2}-$/);
      const json = JSON.parse((await runInProcess(["status", "--db-dir", dbDir, "--json"])).stdout);
      expect(json.targets[0]).toMatchObject({ rowsPerSecond: 250, totals: { delivered: 12_345 } });
      expect(json.targets[0].lagMs).toBe(
        Math.max(...json.namespaces.map((n: { oldestPendingAgeMs: number }) => n.oldestPendingAgeMs)),
      );
    } finally {
      lock.release();
    }
  });

  test("piped, and in --check, a long problem is never cut (its secret still masked)", async () => {
    const lock = drainWith([
      target({ state: "outage", failures: 3, downSince: new Date().toISOString(), lastError: CAUSE }),
    ]);
    try {
      const masked = CAUSE.replace("hunter2", "***");
      const piped = await runInProcess(["status", "--db-dir", dbDir]);
      expect(piped.stdout).toContain(`  ${masked}\n`);
      expect(piped.stdout).toContain(
        `  ${'42P01: relation "orders" does not exist (postgres://app:***@db.internal/prod)'}\n`,
      );
      const check = await runInProcess(["status", "--db-dir", dbDir, "--check", "--fail-on", "down,stuck"]);
      expect(check.code).toBe(1);
      expect(check.stdout).toContain(`  - down: target shop.main since `);
      expect(check.stdout).toContain(`3 failed attempt(s): ${masked}\n`);
      expect(check.stdout).toContain(
        `failed 2 time(s): relation "orders" does not exist (postgres://app:***@db.internal/prod)\n`,
      );
      expect(piped.stdout + check.stdout).not.toContain("…");
      expect(piped.stdout + check.stdout).not.toContain("\u001B["); // no colour through a pipe
    } finally {
      lock.release();
    }
  });

  test("on a terminal, a message wider than the terminal is cut in its table and given in full under it; colour marks down, stuck and dead", () => {
    const lock = drainWith([
      target({ state: "misconfigured", failures: 1, downSince: new Date().toISOString(), lastError: CAUSE }),
    ]);
    try {
      const report = collectStatus({
        dirs: [{ app: null, dbDir, dbFile: null, maxPending: null }],
        secrets: [],
        configFile: null,
      });
      const text = renderStatus(report, { width: 120, color: false });
      const lines = text.split("\n");
      const tables = lines.filter((l) => /^(shop\.main|orders|payments) /.test(l));
      expect(tables.map((l) => l.length <= 120)).toEqual([true, true, true]);
      expect(tables[0]).toEndWith("…");
      expect(lines).toContain(`problem of shop.main: ${CAUSE.replace("hunter2", "***")}`);
      expect(lines).toContain(
        'last error of orders: 42P01: relation "orders" does not exist (postgres://app:***@db.internal/prod)',
      );
      const coloured = renderStatus(report, { width: 120, color: true });
      expect(coloured).toContain("\u001B[31mMISCONFIGURED\u001B[39m");
      expect(coloured).toContain("\u001B[31mSTUCK\u001B[39m");
      // biome-ignore lint/suspicious/noControlCharactersInRegex: the colour codes are what is checked
      expect(coloured).toMatch(/ {2}\u001B\[31m1\u001B\[39m {2}/); // payments' dead letter
      // Colour does not shift the columns: without its codes the text is the uncoloured one.
      // biome-ignore lint/suspicious/noControlCharactersInRegex: the colour codes are what is removed
      expect(coloured.replace(/\u001B\[\d+m/g, "")).toBe(text);
    } finally {
      lock.release();
    }
  });

  test("a table with lanes shows how many are held and its oldest held key (text, attempts, next attempt) in full; --json lists the held lanes, masked; a table without lanes prints as before", async () => {
    const inAMinute = new Date(Date.now() + 90_000).toISOString();
    const held = (lane: number | null, seq: number, key: string | null, attempts: number, error: string) => ({
      lane,
      seq,
      key,
      attempts,
      lastError: error,
      nextAttemptAt: inAMinute,
    });
    const LONG_KEY = `customer-${"9".repeat(200)}`; // a long key is printed whole: it is what an operator greps for
    const lock = drainWith([
      target({
        tables: [
          // Listed by lane, as the drain does; the oldest row (lowest seq) is the one shown.
          tableOf("orders", {
            count: 64,
            held: [
              held(3, 9, "42", 1, "23514: check failed"),
              held(40, 4, LONG_KEY, 3, "23514: check failed at postgres://app:hunter2@db.internal/prod"),
            ],
          }),
          tableOf("payments"),
        ],
      }),
    ]);
    try {
      const r = await runInProcess(["status", "--db-dir", dbDir]);
      const text = normalize(r.stdout, tmp).split("\n");
      const table = text.slice(text.findIndex((l) => l.startsWith("NAMESPACE")));
      expect(table.slice(0, 3).map((l) => l.replace(/ {2}\S.*$/, (m) => m.replace(/ +/g, " ")))).toEqual([
        "NAMESPACE DEPTH OLDEST HEAD ATTEMPTS NEXT STUCK DEAD LANES HELD LAST ERROR",
        expect.stringMatching(/^orders +5 .* STUCK +0 +2\/64 +42P01: /),
        expect.stringMatching(/^payments +2 .* no +1 +- +-$/),
      ]);
      // Aligned: the LANES HELD column ends at one place on every line (ages unnormalized).
      const raw = r.stdout.split("\n").filter((l) => /^(NAMESPACE|orders|payments) /.test(l));
      const end = raw[0]!.indexOf("LANES HELD") + "LANES HELD".length;
      expect(raw.slice(1, 3).map((l) => l.slice(end - 4, end))).toEqual(["2/64", "   -"]);
      expect(text).toContain("oldest held key per table with lanes held:");
      // The summary counts the held lanes, apart from the held tables (none here).
      expect(text.find((l) => l.includes("namespace(s),"))).toMatch(/ 0 held, 2 lane\(s\) held, /);
      expect(text).toContain(
        `  orders: key "${LONG_KEY}" (lane 40, seq 4), 3 attempt(s), next in  <age> on shop.main: 23514: check failed at postgres://app:***@db.internal/prod`,
      );
      const json = JSON.parse((await runInProcess(["status", "--db-dir", dbDir, "--json"])).stdout);
      const [orders, payments] = json.namespaces;
      expect(orders.lanes).toEqual({
        count: 64,
        held: [
          {
            ...held(40, 4, LONG_KEY, 3, "23514: check failed at postgres://app:***@db.internal/prod"),
            target: "shop.main",
          },
          { ...held(3, 9, "42", 1, "23514: check failed"), target: "shop.main" },
        ],
      });
      expect(payments.lanes).toBeNull();
      expect([json.totals.held, json.totals.heldLanes]).toEqual([0, 2]);
      expect(JSON.stringify(json)).not.toContain("hunter2");
      // --check fails on held lanes (a lane's stuck head), one line per table, the oldest held key first; masked.
      const check = await runInProcess(["status", "--db-dir", dbDir, "--check", "--fail-on", "stuck"]);
      expect(check.code).toBe(1);
      expect(check.stdout).toContain(
        `stuck: orders has 2 of 64 lane(s) held, the oldest by key "${LONG_KEY}" (lane 40, seq 4) failed 3 time(s) on shop.main: 23514: check failed at postgres://app:***@db.internal/prod`,
      );
      expect(check.stdout).not.toContain("hunter2");
      expect(check.stdout).not.toMatch(/stuck: payments/);
      // Held lanes are not a held table: --fail-on held passes.
      expect((await runInProcess(["status", "--db-dir", dbDir, "--check", "--fail-on", "held"])).code).toBe(0);
    } finally {
      lock.release();
    }
  });

  test("a row without a key holding every lane is shown as such", async () => {
    const lock = drainWith([
      target({
        tables: [
          tableOf("orders", {
            count: 8,
            held: [
              {
                lane: null,
                seq: 2,
                key: null,
                attempts: 2,
                lastError: "boom",
                nextAttemptAt: new Date().toISOString(),
              },
            ],
          }),
        ],
      }),
    ]);
    try {
      const text = normalize((await runInProcess(["status", "--db-dir", dbDir])).stdout, tmp);
      expect(text).toMatch(/^orders .* 8\/8 {2}42P01: /m);
      expect(text).toContain(
        "  orders: a row without a key (seq 2) holds every lane, 2 attempt(s), next now on shop.main: boom",
      );
      const check = await runInProcess(["status", "--db-dir", dbDir, "--check", "--fail-on", "stuck"]);
      expect(check.stdout).toContain(
        "stuck: orders has 8 of 8 lane(s) held, the oldest by a row without a key (seq 2) failed 2 time(s) on shop.main: boom",
      );
    } finally {
      lock.release();
    }
  });

  test("a terminal gets its width and colour, unless NO_COLOR is set; a pipe gets neither", () => {
    const saved = Object.getOwnPropertyDescriptors(process.stdout);
    try {
      Object.defineProperty(process.stdout, "isTTY", { value: true, configurable: true });
      Object.defineProperty(process.stdout, "columns", { value: 132, configurable: true });
      expect(stdoutStyle({})).toEqual({ width: 132, color: true });
      expect(stdoutStyle({ NO_COLOR: "1" })).toEqual({ width: 132, color: false });
      Object.defineProperty(process.stdout, "isTTY", { value: false, configurable: true });
      expect(stdoutStyle({})).toEqual({ width: null, color: false });
    } finally {
      for (const key of ["isTTY", "columns"] as const) {
        if (saved[key]) Object.defineProperty(process.stdout, key, saved[key]);
        else delete (process.stdout as { isTTY?: boolean; columns?: number })[key];
      }
    }
  });
});

describe("namespaces across apps", () => {
  const twoApps = () => {
    seed(path.join(tmp, "second"), "orders", 2);
    const config = path.join(tmp, "two.toml");
    const app = (name: string, dir: string) =>
      `[app.${name}]\ndb_dir = "${dir}"\n[app.${name}.db.r]\nwriter = "sqlite"\ntables = ["orders"]\n[app.${name}.db.r.connection]\npath = "r.db"\n`;
    fs.writeFileSync(config, app("first", "queue") + app("second", "second") + app("third", "not-yet"));
    return config;
  };

  test("an app whose db_dir does not exist yet is noted, not an error", async () => {
    const r = await runInProcess(["status", "--config", twoApps()]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`app third: db_dir ${path.join(tmp, "not-yet")} does not exist yet (nothing enqueued)`);
    expect(fs.existsSync(path.join(tmp, "not-yet"))).toBe(false);
  });

  test("a namespace in two apps needs --app (usage error), and --app picks the db_dir", async () => {
    const config = twoApps();
    const ambiguous = await runInProcess(["skip", "--config", config, "--namespace", "orders", "--seq", "1"]);
    expect(ambiguous.code).toBe(2);
    expect(ambiguous.stderr).toContain('namespace "orders" exists in several apps (first, second): add --app APP');
    const r = await runInProcess([
      "skip",
      "--config",
      config,
      "--namespace",
      "orders",
      "--seq",
      "1",
      "--app",
      "second",
      "--json",
    ]);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).file).toBe(path.join(tmp, "second", "orders.db"));
    const unknown = await runInProcess([
      "skip",
      "--config",
      config,
      "--namespace",
      "orders",
      "--seq",
      "1",
      "--app",
      "fourth",
    ]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("--app fourth: no such app");
  });
});

describe("verify", () => {
  test("reports every namespace ok and exits 0 on a sound db_dir", async () => {
    const r = await runInProcess(["verify", "--db-dir", dbDir]);
    expect(r.code).toBe(0);
    expect(normalize(r.stdout, tmp)).toMatchInlineSnapshot(`
      "FILE         NAMESPACE  ROWS  GAPS  RESULT
      orders.db    orders        5     0  ok
      payments.db  payments      2     0  ok

      ok: 2 file(s) verified, no problems
      "
    `);
  });

  test("a broken chain is a problem: named row and missing link, exit 1", async () => {
    breakChain(dbDir, "orders", 3);
    const r = await runInProcess(["verify", "--db-dir", dbDir]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("row 4 links to prev_seq 3, which is in no table");
    expect(r.stderr).toContain("verify found problems in 1 of 2 file(s)");
    const json = JSON.parse((await runInProcess(["verify", "--db-dir", dbDir, "--json"])).stdout);
    expect(json.ok).toBe(false);
    const orders = json.files.find((f: { file: string }) => f.file.endsWith("orders.db"));
    expect(orders.ok).toBe(false);
    expect(orders.namespaces[0].gaps).toEqual([{ seq: 4, prevSeq: 3 }]);
  });

  test("with --config: an APP column tells apart two apps' files of one name", async () => {
    seed(path.join(tmp, "other"), "orders", 2);
    const config = path.join(tmp, "outbox.toml");
    const app = (name: string, dir: string) =>
      `[app.${name}]\ndb_dir = "${dir}"\n[app.${name}.db.main]\nwriter = "sqlite"\ntables = ["orders"]\n[app.${name}.db.main.connection]\npath = "r-${name}.db"\n`;
    fs.writeFileSync(config, app("shop", "queue") + app("jobs", "other"));
    const r = await runInProcess(["verify", "--config", config]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatchInlineSnapshot(`
      "APP   FILE         NAMESPACE  ROWS  GAPS  RESULT
      shop  orders.db    orders        5     0  ok
      shop  payments.db  payments      2     0  ok
      jobs  orders.db    orders        2     0  ok

      ok: 3 file(s) verified, no problems
      "
    `);
  });

  test("a garbage file is one problem line naming the file once, exit 1", async () => {
    const garbage = path.join(dbDir, "garbage.db");
    fs.writeFileSync(garbage, "this is not sqlite".repeat(100));
    const r = await runInProcess(["verify", "--db-dir", dbDir]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(
      `\n1 problem(s):\n  - ${garbage}: cannot read outbox file: file is not a database [SQLITE_NOTADB]\n`,
    );
  });
});

describe("dead-letter list and show", () => {
  test("list prints one row per dead letter", async () => {
    const r = await runInProcess(["dead-letter", "list", "--db-dir", dbDir]);
    expect(r.code).toBe(0);
    expect(normalize(r.stdout, tmp)).toMatchInlineSnapshot(`
      "NAMESPACE  SEQ  GROUP  REASON   STATE  ATTEMPTS  DEAD AT                           REPLAYED AS  ERROR
      payments     1      -  skipped  dead          0  <TIME>            -  -
      "
    `);
  });

  test("list with only an unreadable file names it, does not claim there are no dead letters, exit 1", async () => {
    const only = path.join(tmp, "only-garbage");
    fs.mkdirSync(only);
    const garbage = path.join(only, "x.db");
    fs.writeFileSync(garbage, "this is not sqlite".repeat(100));
    const r = await runInProcess(["dead-letter", "list", "--db-dir", only]);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("no dead letters in the readable files\n");
    expect(r.stderr).toContain(garbage);
    expect(r.stderr).toContain("dead-letter could not read 1 file(s)");
  });

  test("list --json and --namespace filter", async () => {
    const all = JSON.parse((await runInProcess(["dead-letter", "list", "--db-dir", dbDir, "--json"])).stdout);
    expect(all.deadLetters).toHaveLength(1);
    expect(all.deadLetters[0]).toMatchObject({
      namespace: "payments",
      seq: 1,
      reason: "skipped",
      tag: "INSERT INTO payments (id) VALUES (?)",
      payload: "[1]",
    });
    const none = JSON.parse(
      (await runInProcess(["dead-letter", "list", "--db-dir", dbDir, "--json", "--namespace", "orders"])).stdout,
    );
    expect(none.deadLetters).toEqual([]);
  });

  test("show prints the whole record, SQL and arguments included", async () => {
    const r = await runInProcess(["dead-letter", "show", "--db-dir", dbDir, "--namespace", "payments", "--seq", "1"]);
    expect(r.code).toBe(0);
    expect(normalize(r.stdout, tmp)).toMatchInlineSnapshot(`
      "namespace:   payments
      seq:         1
      group:       -
      file:        <DIR>/queue/payments.db
      source:      test
      created at:  <TIME>
      dead at:     <TIME>
      reason:      skipped
      state:       dead
      remote:      not applied
      attempts:    0
      error class: -
      error:       -
      prev seq:    -
      replayed at: -
      replayed as: -
      sql:         INSERT INTO payments (id) VALUES (?)
      args:        [1]
      "
    `);
  });

  test("show of a seq that is not dead exits 1 saying so", async () => {
    const r = await runInProcess(["dead-letter", "show", "--db-dir", dbDir, "--namespace", "payments", "--seq", "2"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('no dead letter with seq 2 in namespace "payments"');
  });

  test("a namespace without a file exits 1 and creates none", async () => {
    const r = await runInProcess(["dead-letter", "show", "--db-dir", dbDir, "--namespace", "refunds", "--seq", "1"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('namespace "refunds": no refunds.db in');
    expect(fs.existsSync(path.join(dbDir, "refunds.db"))).toBe(false);
  });
});

describe("read-only commands change nothing", () => {
  test.each([
    [["status"]],
    [["status", "--json"]],
    [["verify"]],
    [["verify", "--json"]],
    [["dead-letter", "list"]],
    [["dead-letter", "show", "--namespace", "payments", "--seq", "1"]],
  ])("sqloutbox %p leaves every file byte-identical and creates none", async (args) => {
    const before = hashTree(tmp);
    const r = await runInProcess([...args, "--db-dir", dbDir]);
    expect(r.code).toBe(0);
    expect(hashTree(tmp)).toEqual(before);
  });

  test("with a producer holding the file open (WAL), they create no file and change neither the db nor its WAL", async () => {
    const producer = openQueue(dbDir, "orders");
    try {
      producer.enqueue("INSERT INTO orders (id) VALUES (?)", "[99]");
      const before = hashTree(tmp);
      expect(Object.keys(before)).toContain(path.join("queue", "orders.db-wal"));
      for (const args of [["status"], ["verify"], ["dead-letter", "list"]]) {
        expect((await runInProcess([...args, "--db-dir", dbDir])).code).toBe(0);
      }
      const after = hashTree(tmp);
      expect(Object.keys(after).sort()).toEqual(Object.keys(before).sort());
      // The -shm index is shared memory that readers may touch; the data itself must not change.
      for (const file of Object.keys(before).filter((f) => !f.endsWith("-shm")))
        expect(after[file]).toBe(before[file]!);
    } finally {
      producer.close();
    }
  });

  test("a file written by the reference implementation is read as is: no migration, no new file", async () => {
    const refDir = path.join(tmp, "reference");
    fs.mkdirSync(refDir);
    const db = new Database(path.join(refDir, "events.db"));
    db.run("PRAGMA journal_mode = WAL");
    db.run(`CREATE TABLE outbox_queue (seq INTEGER PRIMARY KEY AUTOINCREMENT, created_at TEXT NOT NULL, namespace TEXT NOT NULL,
      source TEXT NOT NULL DEFAULT '', tag TEXT NOT NULL, payload TEXT NOT NULL, prev_seq INTEGER UNIQUE, synced INTEGER NOT NULL DEFAULT 0)`);
    db.run("CREATE TABLE outbox_sync_log (seq INTEGER PRIMARY KEY, namespace TEXT NOT NULL, synced_at TEXT NOT NULL)");
    db.run("CREATE INDEX idx_outbox_worker ON outbox_queue (namespace, synced, seq)");
    db.run("CREATE INDEX idx_sync_log ON outbox_sync_log (namespace, seq)");
    db.run("CREATE UNIQUE INDEX idx_outbox_prev ON outbox_queue (prev_seq)");
    db.run("INSERT INTO outbox_sync_log VALUES (1, 'events', '2025-01-01T00:00:00.000000+00:00')");
    for (const [seq, prev] of [
      [2, 1],
      [3, 2],
      [4, 3],
    ]) {
      db.run(
        "INSERT INTO outbox_queue (seq, created_at, namespace, tag, payload, prev_seq) VALUES (?, '2025-01-01T00:00:01.000000+00:00', 'events', 'INSERT INTO events (id) VALUES (?)', ?, ?)",
        [seq!, `[${seq}]`, prev!],
      );
    }
    db.close();
    const before = hashTree(refDir);
    const status = JSON.parse((await runInProcess(["status", "--db-dir", refDir, "--json"])).stdout);
    expect(status.namespaces[0]).toMatchObject({
      namespace: "events",
      depth: 3,
      headSeq: 2,
      headAttempts: 0,
      isStuck: false,
      deadLetterCount: 0,
    });
    expect((await runInProcess(["verify", "--db-dir", refDir])).code).toBe(0);
    expect(JSON.parse((await runInProcess(["dead-letter", "list", "--db-dir", refDir, "--json"])).stdout)).toEqual({
      deadLetters: [],
    });
    expect(hashTree(refDir)).toEqual(before);
  });

  test("a failing verify (broken chain) also changes nothing", async () => {
    breakChain(dbDir, "orders", 2);
    const before = hashTree(tmp);
    expect((await runInProcess(["verify", "--db-dir", dbDir])).code).toBe(1);
    expect(hashTree(tmp)).toEqual(before);
  });
});
