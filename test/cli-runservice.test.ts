// runservice end to end: drains into a sqlite target, SIGTERM exits 0, JSON logs for journald,
// one drain per db_dir, config errors exit 1 naming the place.
import { beforeEach, describe, expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import pkg from "../package.json" with { type: "json" };
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { cleanEnv, REPO, run, runInProcess } from "./support/cli.ts";
import { seed } from "./support/queue.ts";
import { type FileRemote, openRemote } from "./support/remote.ts";
import { waitFor } from "./support/wait.ts";

const cleanups = cleanupsAfterEach();
let tmp: string;
let config: string;
let remote: FileRemote;

beforeEach(async () => {
  tmp = tempDirCleanedBy(cleanups, "sqloutbox-cli-run-").path;
  config = path.join(tmp, "outbox.toml");
  fs.writeFileSync(
    config,
    `[app.shop]
db_dir = "queue"
flush_interval = 0.05
table_flush_threshold = 1

[app.shop.db.local]
writer = "sqlite"
tables = ["orders", "payments"]

[app.shop.db.local.connection]
path = "remote.db"
`,
  );
  remote = await openRemote("sqlite", { path: path.join(tmp, "remote.db"), cleanups });
  await remote.exec("CREATE TABLE orders (id INTEGER PRIMARY KEY)");
  await remote.exec("CREATE TABLE payments (id INTEGER PRIMARY KEY)");
  seed(path.join(tmp, "queue"), "orders", 40);
  seed(path.join(tmp, "queue"), "payments", 25);
});

function start(args: string[], env: Record<string, string | undefined> = {}) {
  return Bun.spawn(["bun", "src/cli/bin.ts", "runservice", ...args], {
    cwd: REPO,
    env: cleanEnv(env),
    stdout: "pipe",
    stderr: "pipe",
  });
}

describe("runservice", () => {
  test("drains every table into the sqlite target and exits 0 on SIGTERM, logging JSON lines", async () => {
    const proc = start(["--config", config], { LOG_FORMAT: "json" });
    await waitFor(
      async () => (await remote.count("orders")) === 40 && (await remote.count("payments")) === 25,
      "every row in remote.db",
    );
    proc.kill("SIGTERM");
    expect(await proc.exited).toBe(0);
    const lines = (await new Response(proc.stderr).text())
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(lines.every((l) => typeof l.time === "string" && ["debug", "info", "warn", "error"].includes(l.level))).toBe(
      true,
    );
    expect(lines.some((l) => l.msg.includes("SIGTERM"))).toBe(true);
    expect(lines.filter((l) => l.level === "error")).toEqual([]);
    const status = JSON.parse((await runInProcess(["status", "--config", config, "--json"])).stdout);
    expect(status.totals.depth).toBe(0);
  });

  test("reads ./outbox.toml by default and stops on SIGINT with exit 0", async () => {
    const proc = Bun.spawn(["bun", path.join(REPO, "src/cli/bin.ts"), "runservice"], {
      cwd: tmp,
      env: cleanEnv(),
      stdout: "pipe",
      stderr: "pipe",
    });
    await waitFor(async () => (await remote.count("orders")) === 40, "the 40 orders in remote.db");
    proc.kill("SIGINT");
    expect(await proc.exited).toBe(0);
  });

  test("a second drain on the same db_dir exits 1 naming the lock file; the first keeps running", async () => {
    const first = start(["--config", config]);
    try {
      await waitFor(async () => (await remote.count("orders")) === 40, "the 40 orders in remote.db");
      const second = await run(["runservice", "--config", config]);
      expect(second.code).toBe(1);
      expect(second.stderr).toContain(path.join(tmp, "queue", ".sqloutbox.lock"));
      expect(first.exitCode).toBeNull();
    } finally {
      first.kill("SIGTERM");
    }
    expect(await first.exited).toBe(0);
  });

  test("the startup line names what each app drains: its db_dir, or the db_file itself (not its folder)", async () => {
    fs.appendFileSync(
      config,
      `
[app.files]
db_file = "files/shop.db"

[app.files.db.local]
writer = "sqlite"
tables = ["payments"]

[app.files.db.local.connection]
path = "remote.db"
`,
    );
    const proc = start(["--config", config]);
    let log = "";
    const pump = (async () => {
      const decoder = new TextDecoder();
      for await (const chunk of proc.stderr) log += decoder.decode(chunk, { stream: true });
    })();
    try {
      await waitFor(() => log.includes(" draining "), "the startup line");
    } finally {
      proc.kill("SIGTERM");
    }
    expect(await proc.exited).toBe(0);
    await pump;
    const line = log.split("\n").find((l) => l.includes(" draining "))!;
    expect(line).toEndWith(
      `[info] sqloutbox ${pkg.version} draining ${path.join(tmp, "queue")}, ${path.join(tmp, "files", "shop.db")} to shop.local, files.local`,
    );
  });

  test("pretty log lines start with the ISO time, for a log file read later", async () => {
    const proc = start(["--config", config]);
    await waitFor(async () => (await remote.count("orders")) === 40, "the 40 orders in remote.db");
    proc.kill("SIGTERM");
    expect(await proc.exited).toBe(0);
    const lines = (await new Response(proc.stderr).text()).trim().split("\n");
    expect(lines.length).toBeGreaterThan(2);
    for (const line of lines)
      expect(line).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \[(debug|info|warn|error)\] \S/);
    expect(lines.at(-1)).toEndWith("[info] drain: stopped");
  });

  test("a missing config file exits 1 and points at init", async () => {
    const r = await runInProcess(["runservice", "--config", path.join(tmp, "nope.toml")]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`config file ${path.join(tmp, "nope.toml")} does not exist`);
    expect(r.stderr).toContain("sqloutbox init");
  });

  test("an invalid config exits 1 naming the file and key", async () => {
    fs.writeFileSync(
      config,
      `[app.shop]\ndb_dir = "queue"\nbatch_sise = 5\n[app.shop.db.local]\nwriter = "sqlite"\ntables = ["orders"]\n[app.shop.db.local.connection]\npath = "remote.db"\n`,
    );
    const r = await runInProcess(["runservice", "--config", config]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(config);
    expect(r.stderr).toContain("batch_sise");
    expect(r.stderr).toContain("batch_size");
  });

  test("a db_dir that cannot be created is one error line naming it, exit 1", async () => {
    fs.writeFileSync(path.join(tmp, "blocker"), "");
    fs.writeFileSync(
      config,
      `[app.shop]\ndb_dir = "blocker/queue"\n[app.shop.db.local]\nwriter = "sqlite"\ntables = ["orders"]\n[app.shop.db.local.connection]\npath = "remote.db"\n`,
    );
    const r = await runInProcess(["runservice", "--config", config]);
    expect(r.code).toBe(1);
    const lines = r.stderr.trim().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \[error\] /);
    expect(lines[0]).toContain(path.join(tmp, "blocker", "queue"));
    expect(lines[0]).toContain("ENOTDIR");
  });

  test("JSON log lines keep their fields as keys when the config holds a secret, masked", async () => {
    fs.writeFileSync(
      config,
      `[app.shop]\ndb_dir = "queue"\nwrite_timeout = 2\n[app.shop.db.pg]\nwriter = "postgres"\ntables = ["orders"]\n[app.shop.db.pg.connection]\nurl = "postgres://postgres:s3cr3t-value@127.0.0.1:1/nowhere"\n`,
    );
    const proc = start(["--config", config], { LOG_FORMAT: "json" });
    let stderr = "";
    const pump = (async () => {
      const decoder = new TextDecoder();
      for await (const chunk of proc.stderr) stderr += decoder.decode(chunk, { stream: true });
    })();
    try {
      await waitFor(() => stderr.includes("is unavailable"), "the drain to log the refused connection");
    } finally {
      proc.kill("SIGTERM");
      await proc.exited;
      await pump;
    }
    const line = stderr
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l))
      .find((l) => l.msg.includes("is unavailable"));
    expect(line).toMatchObject({ level: "warn", app: "shop", target: "shop.pg", attempt: 1, error_class: "E_WRITE" });
    expect(line.msg).not.toContain("target=shop.pg"); // a key, not folded into the message
    expect(stderr).not.toContain("s3cr3t-value");
  });

  // Only the secret is a secret: a connection error says which writer, host, port and database it
  // could not reach, whether the URL is written out, comes whole from ${DATABASE_URL}, or has no
  // password at all — and the password never appears, in the log or in `status --json`.
  test.each([
    [
      "a literal URL with ${PG_SECRET} inside",
      'url = "postgres://postgres:${PG_SECRET}@127.0.0.1:1/nowhere"',
      "postgres postgres@127.0.0.1:1/nowhere",
    ],
    [
      'url = "${DATABASE_URL}" that holds the password',
      'url = "${DATABASE_URL}"',
      "postgres postgres@127.0.0.1:1/nowhere",
    ],
    ['url = "${DATABASE_URL}" without a password', 'url = "${PLAIN_URL}"', "postgres app@127.0.0.1:1/shop"],
    [
      "host, port and password keys",
      'host = "127.0.0.1"\nport = 1\nuser = "app"\npassword = "${PG_SECRET}"\ndatabase = "${PG_DB}"',
      "postgres app@127.0.0.1:1/orders_db",
    ],
  ])("a connection error names where and never the password: %s", async (_, connection, where) => {
    fs.writeFileSync(
      config,
      `[app.shop]\ndb_dir = "queue"\nwrite_timeout = 2\n[app.shop.db.pg]\nwriter = "postgres"\ntables = ["orders"]\n[app.shop.db.pg.connection]\n${connection}\n`,
    );
    fs.writeFileSync(
      path.join(tmp, ".env"),
      "PG_SECRET=s3cr3t-value\nDATABASE_URL=postgres://postgres:s3cr3t-value@127.0.0.1:1/nowhere\nPLAIN_URL=postgres://app@127.0.0.1:1/shop\nPG_DB=orders_db\n",
    );
    const proc = start(["--config", config, "--log-level", "debug"]);
    let stderr = "";
    const pump = (async () => {
      const decoder = new TextDecoder();
      for await (const chunk of proc.stderr) stderr += decoder.decode(chunk, { stream: true });
    })();
    let status = "";
    try {
      await waitFor(() => stderr.includes("is unavailable"), "the drain to log the refused connection");
      await waitFor(async () => {
        status = (await runInProcess(["status", "--config", config, "--json"])).stdout;
        return status.includes("cannot connect");
      }, "status to show the target's error");
    } finally {
      proc.kill("SIGTERM");
      await proc.exited;
      await pump;
    }
    expect(stderr).toContain(`target shop.pg: ${where}: cannot connect`);
    const [target] = JSON.parse(status).targets;
    expect(target.lastError).toStartWith(`target shop.pg: ${where}: cannot connect`);
    for (const text of [stderr, status]) {
      expect(text).not.toContain("s3cr3t-value");
      expect(text).not.toContain("postgres ***");
    }
  });
});
