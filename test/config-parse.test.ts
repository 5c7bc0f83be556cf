import { hostname } from "node:os";
import { describe, expect, test } from "bun:test";
import { type ConfigError, DEFAULTS, parseConfigToml } from "../src/index.ts";
import { errorOf } from "./support/errors.ts";

const FILE = "/etc/sqloutbox/outbox.toml";

function minimal(extraApp = "", extraTarget = "", tables = `["events"]`): string {
  return `
[app.myapp]
db_dir = "data/myapp"
${extraApp}

[app.myapp.db.primary]
writer_class = "./writers.ts:MyWriter"
tables = ${tables}
${extraTarget}
`;
}

const appOf = (text: string) => parseConfigToml(text, FILE, {}).apps[0]!;
const targetOf = (text: string) => appOf(text).targets[0]!;

describe("app tuning keys", () => {
  test("every tuning key takes its documented default when absent", () => {
    const app = appOf(minimal());
    expect(app).toMatchObject({
      name: "myapp",
      dbDir: "/etc/sqloutbox/data/myapp",
      originLabel: hostname(),
      batchSize: 500,
      batchMaxBytes: 16 * 1024 * 1024,
      flushIntervalMs: 1000,
      tableFlushThreshold: 15,
      tableMaxWaitMs: 6000,
      autoSchema: true,
      cleanupEvery: 500,
      retainLogDays: 30,
      maxPending: null,
      maxAttempts: 10,
      backoffCapMs: 64 * 60_000,
      backoffUnitMs: 60_000,
      outageBackoffCapMs: 5 * 60_000,
      writeTimeoutMs: 30_000,
      durability: "normal",
      fileMode: 0o600,
    });
    expect(app.batchSize).toBe(DEFAULTS.batchSize);
  });

  test.each([
    ["batch_size = 50", "batchSize", 50],
    ["batch_max_bytes = 65536", "batchMaxBytes", 65536],
    ['origin_label = "web-1"', "originLabel", "web-1"],
    ["flush_interval = 0.05", "flushIntervalMs", 50],
    ["table_flush_threshold = 1", "tableFlushThreshold", 1],
    ["table_max_wait = 0.5", "tableMaxWaitMs", 500],
    ["auto_schema = false", "autoSchema", false],
    ["cleanup_every = 7", "cleanupEvery", 7],
    ["retain_log_days = 3", "retainLogDays", 3],
    ["max_pending = 100000", "maxPending", 100000],
    ["max_pending = 0", "maxPending", null],
    ["max_attempts = 3", "maxAttempts", 3],
    ["max_attempts = 0", "maxAttempts", null],
    ["backoff_cap_minutes = 5", "backoffCapMs", 300_000],
    ["backoff_unit_seconds = 0.01", "backoffUnitMs", 10],
    ["outage_backoff_cap_minutes = 2", "outageBackoffCapMs", 120_000],
    ["write_timeout = 2.5", "writeTimeoutMs", 2500],
    ['durability = "full"', "durability", "full"],
    ["file_mode = 0o640", "fileMode", 0o640],
  ] as const)("%s overrides %s", (line, field, expected) => {
    expect(appOf(minimal(line))[field]).toBe(expected);
  });

  test("an absolute db_dir is kept as is and a relative one resolves against the config file's directory", () => {
    expect(appOf(minimal().replace('"data/myapp"', '"/var/lib/outbox"')).dbDir).toBe("/var/lib/outbox");
    expect(appOf(minimal().replace('"data/myapp"', '"../q"')).dbDir).toBe("/etc/q");
  });

  test("each app keeps its own tuning", () => {
    const config = parseConfigToml(
      `
[app.a]
db_dir = "a"
batch_size = 10
[app.a.db.x]
writer = "sqlite"
tables = ["t"]
[app.a.db.x.connection]
path = "remote-a.db"

[app.b]
db_dir = "b"
flush_interval = 0.25
[app.b.db.x]
writer = "sqlite"
tables = ["t"]
[app.b.db.x.connection]
path = "remote-b.db"
`,
      FILE,
      {},
    );
    expect(config.apps.map((a) => [a.name, a.batchSize, a.flushIntervalMs])).toEqual([
      ["a", 10, 1000],
      ["b", 500, 250],
    ]);
    expect(config.apps.flatMap((a) => a.targets.map((t) => t.name))).toEqual(["a.x", "b.x"]);
  });
});

describe("target keys", () => {
  test("a target is named app.db and takes its defaults", () => {
    const target = targetOf(minimal());
    expect(target).toEqual({
      name: "myapp.primary",
      app: "myapp",
      db: "primary",
      writer: null,
      writerClass: "/etc/sqloutbox/writers.ts:MyWriter",
      connection: {},
      tenants: null,
      dialect: null,
      compat: false,
      ledger: true,
      ledgerTable: "sqloutbox_ledger",
      traceComments: false,
      connections: 1,
      tables: [{ name: "events", injectOutboxSeq: false, retainLogDays: 30, lanes: 1 }],
    });
  });

  test("connections is an integer from 1 to 64", () => {
    const at = (value: string) =>
      minimal().replace(
        'writer_class = "./writers.ts:MyWriter"',
        `writer_class = "./writers.ts:MyWriter"\nconnections = ${value}`,
      );
    expect(targetOf(at("8")).connections).toBe(8);
    expect(() => targetOf(at("0"))).toThrow(/connections/);
    expect(() => targetOf(at("65"))).toThrow(/connections.*must be at most 64, got 65/);
    expect(() => targetOf(at("2.5"))).toThrow(/connections/);
  });

  test("writer selects a built-in writer", () => {
    const target = targetOf(
      `${minimal().replace('writer_class = "./writers.ts:MyWriter"', 'writer = "sqlite"')}[app.myapp.db.primary.connection]\npath = "/tmp/x.db"\n`,
    );
    expect(target.writer).toBe("sqlite");
    expect(target.writerClass).toBeNull();
  });

  test("writer_class keeps a package specifier and resolves a relative path", () => {
    expect(targetOf(minimal().replace("./writers.ts:MyWriter", "@acme/writers:Turso")).writerClass).toBe(
      "@acme/writers:Turso",
    );
    expect(targetOf(minimal().replace("./writers.ts:MyWriter", "../w/x.ts:W")).writerClass).toBe("/etc/w/x.ts:W");
  });

  test("dialect and compat override their defaults", () => {
    const target = targetOf(minimal("", 'dialect = "libsql"\ncompat = true'));
    expect(target.dialect).toBe("libsql");
    expect(target.compat).toBe(true);
  });

  test("target retain_log_days overrides the app's, and an inline table overrides the target's", () => {
    const target = targetOf(
      minimal("retain_log_days = 20", "retain_log_days = 10", `["a", { name = "b", retain_log_days = 7 }]`),
    );
    expect(target.tables).toEqual([
      { name: "a", injectOutboxSeq: false, retainLogDays: 10, lanes: 1 },
      { name: "b", injectOutboxSeq: false, retainLogDays: 7, lanes: 1 },
    ]);
    expect(appOf(minimal("retain_log_days = 20")).targets[0]!.tables[0]!.retainLogDays).toBe(20);
  });

  test("inject_outbox_seq = true (the compatibility mode) applies to every table unless a table overrides it", () => {
    const target = targetOf(
      minimal("", "inject_outbox_seq = true", `["a", { name = "b", inject_outbox_seq = false }]`),
    );
    expect(target.tables.map((t) => [t.name, t.injectOutboxSeq])).toEqual([
      ["a", true],
      ["b", false],
    ]);
  });

  test("ledger = false and ledger_table override their defaults; a ledger_table that is not a plain name is refused", () => {
    const target = targetOf(minimal("", 'ledger = false\nledger_table = "outbox_ledger"'));
    expect([target.ledger, target.ledgerTable]).toEqual([false, "outbox_ledger"]);
    expect(() => targetOf(minimal("", 'ledger_table = "a;b"'))).toThrow(/ledger_table.*must be a plain table name/);
  });

  test("lanes without the ledger are refused at the table's entry", () => {
    const error = errorOf<ConfigError>(() =>
      parseConfigToml(minimal("", "ledger = false", '[{ name = "events", lanes = 4 }]'), FILE, {}),
    );
    expect(error.keyPath).toBe("app.myapp.db.primary.tables[0]");
    expect(error.message).toContain("lanes = 4, which need the delivery ledger");
  });

  test("file_mode must let the owner read and write; origin_label must not be empty", () => {
    expect(() => appOf(minimal("file_mode = 0o400"))).toThrow(/file_mode.*owner read and write/);
    expect(() => appOf(minimal("file_mode = 0o1777"))).toThrow(/file_mode/);
    expect(() => appOf(minimal('origin_label = " "'))).toThrow(/origin_label.*must not be empty/);
  });

  test("inject_outbox_seq as an array injects only the named tables (the reference's frozenset)", () => {
    const target = targetOf(
      minimal("", 'inject_outbox_seq = ["events", "metrics"]', `["events", "metrics", "raw_log"]`),
    );
    expect(target.tables.map((t) => [t.name, t.injectOutboxSeq])).toEqual([
      ["events", true],
      ["metrics", true],
      ["raw_log", false],
    ]);
  });

  test("the reference's multi-app example parses", () => {
    const config = parseConfigToml(
      `
[app.pulseview]
db_dir = "data/pulseview"          # outbox .db files for this app
batch_size = 500                   # per-app tuning (all optional)
flush_interval = 1.0
auto_schema = true

[app.pulseview.db.analytics]
writer_class = "myapp.writers:TursoWriter"
inject_outbox_seq = true           # default for all tables below
tables = [
    "loan_rejections",
    "market_snapshots",
]

[app.pulseview.db.analytics.connection]
db_url  = "\${PULSEVIEW_TURSO_URL}"
db_token = "\${PULSEVIEW_TURSO_TOKEN}"

[app.autopulse]
db_dir = "data/autopulse"

[app.autopulse.db.main]
writer_class = "myapp.writers:TursoWriter"
inject_outbox_seq = false
tables = ["wallet_transactions", "loan_placements"]

[app.autopulse.db.main.connection]
db_url  = "\${TURSO_URL}"
db_token = "\${TURSO_AUTH_TOKEN}"
`,
      FILE,
      {
        PULSEVIEW_TURSO_URL: "libsql://p",
        PULSEVIEW_TURSO_TOKEN: "tok-p",
        TURSO_URL: "libsql://a",
        TURSO_AUTH_TOKEN: "tok-a",
      },
    );
    expect(config.apps.map((a) => a.targets[0]!.name)).toEqual(["pulseview.analytics", "autopulse.main"]);
    expect(config.apps[1]!.targets[0]!.connection).toEqual({ db_url: "libsql://a", db_token: "tok-a" });
    expect(config.apps[1]!.targets[0]!.tables.every((t) => !t.injectOutboxSeq)).toBe(true);
  });

  test("a connection table is passed through with nested values", () => {
    const target = targetOf(
      `${minimal("", "", `["t"]`)}[app.myapp.db.primary.connection]\nport = 5432\ntls = true\nhosts = ["a", "b"]\n[app.myapp.db.primary.connection.opts]\nx = "y"\n`,
    );
    expect(target.connection).toEqual({ port: 5432, tls: true, hosts: ["a", "b"], opts: { x: "y" } });
  });

  test("a relative sqlite path resolves against the config file's directory", () => {
    const target = targetOf(
      `${minimal().replace('writer_class = "./writers.ts:MyWriter"', 'writer = "sqlite"')}[app.myapp.db.primary.connection]\npath = "remote/target.db"\n`,
    );
    expect(target.connection.path).toBe("/etc/sqloutbox/remote/target.db");
  });
});

describe("writer_class spelling", () => {
  test.each([
    ["./w.ts:MyWriter", "/etc/sqloutbox/w.ts:MyWriter"],
    ["./w.ts", "/etc/sqloutbox/w.ts:default"],
    ["/opt/w.ts:W", "/opt/w.ts:W"],
    ["pkg:W", "pkg:W"],
    ["@scope/pkg/sub:W", "@scope/pkg/sub:W"],
    ["a:B", "a:B"],
  ])("%s is stored as %s", (spec, stored) => {
    expect(targetOf(minimal().replace("./writers.ts:MyWriter", spec)).writerClass).toBe(stored);
  });
});
