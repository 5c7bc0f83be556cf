import { afterEach, describe, expect, test } from "bun:test";
import { ConfigError, ConfigIssuesError, parseConfigToml } from "../src/index.ts";
import { tableNameProblem } from "../src/outbox/table-name.ts";
import { builtinWriters } from "../src/writers/registry.ts";
import type { WriterSpec } from "../src/writers/writer-spec.ts";
import { errorOf } from "./support/errors.ts";

const FILE = "/srv/app/outbox.toml";

const BASE = `
[app.myapp]
db_dir = "data"

[app.myapp.db.primary]
writer_class = "./w.ts:W"
tables = ["events"]
`;

/** The single ConfigError `text` raises (fails the test if it parses or raises several). */
function configErrorOf(text: string, env: Record<string, string> = {}): ConfigError {
  const error = errorOf<ConfigError>(() => parseConfigToml(text, FILE, env));
  expect(error).toBeInstanceOf(ConfigError);
  expect(error).not.toBeInstanceOf(ConfigIssuesError);
  expect(error.code).toBe("E_CONFIG");
  expect(error.file).toBe(FILE);
  return error;
}

describe("TOML syntax errors", () => {
  test("carry the file, line and column of the mistake", () => {
    const error = configErrorOf(`[app.myapp]\ndb_dir = "data"\nbatch_size = = 3\n`);
    expect(error.line).toBe(3);
    expect(error.column).toBe(14);
    expect(error.keyPath).toBeUndefined();
    expect(error.message).toStartWith(`${FILE}:3:14: TOML syntax error: invalid value`);
  });

  test("do not quote the surrounding lines, which may hold a literal credential", () => {
    const error = configErrorOf(`[app.myapp]\npassword = "literal-secret-1"\nbatch_size = = 3\n`);
    expect(error.message).not.toContain("literal-secret-1");
    expect(error.cause).toBeUndefined();
  });

  test("a table defined twice points at the second definition", () => {
    const error = configErrorOf(`${BASE}\n[app.myapp]\nbatch_size = 3\n`);
    expect(error.message).toContain("defined twice");
    expect([error.line, error.column]).toEqual([9, 2]);
  });

  // What the operator typed, what they are told, and where (line:column as smol-toml reports it).
  test.each([
    ['db_dir = "data\nx = 1', "unterminated string: a quoted value must close on the line it starts", 1, 15],
    ["db_dir = 'data\r\nx = 1", "unterminated string: a quoted value must close on the line it starts", 1, 15],
    ['db_dir = """data', "unterminated string: no closing quote before the end of the file", 1, 10],
    ["db_dir = data", "invalid value: a string needs quotes", 1, 10],
    ["db_dir = ", "missing value after =", 1, 10],
    ["[app.shop\ndb_dir = 1", "unclosed table header: expected ]", 1, 10],
    ["db_dir", "expected = after the key", 1, 1],
    ["db_dir\nx = 1", "expected = after the key", 1, 7],
    ['tables = ["a", "b"\n', "expected , or the closing ] or }: an array or inline table is not closed", 2, 1],
    ["a = 1 b = 2", "expected the end of the line after the value: one key = value per line", 1, 7],
    ['path = "C:\\data\\q"', "unknown escape sequence", 1, 12],
    ["batch_size = 0500", "a number may not start with 0", 1, 14],
    ["a = 1\na = 2", "defined twice", 2, 1],
  ])("%j says %p at %i:%i", (text, plain, line, column) => {
    const error = configErrorOf(text);
    expect(error.message).toStartWith(`${FILE}:${line}:${column}: TOML syntax error: ${plain}`);
    expect([error.line, error.column]).toEqual([line, column]);
  });

  test("an integer TOML cannot represent losslessly is a syntax error with its position", () => {
    const error = configErrorOf(`${BASE}\n[app.other]\ndb_dir = "x"\nbatch_size = 99999999999999999999\n`);
    expect([error.line, error.column]).toEqual([11, 14]);
  });
});

describe("unknown keys", () => {
  test.each([
    [BASE.replace('db_dir = "data"', 'db_dir = "data"\nbatch_szie = 10'), "app.myapp.batch_szie", '"batch_size"'],
    [
      BASE.replace('db_dir = "data"', 'db_dir = "data"\nflush_intervall = 1'),
      "app.myapp.flush_intervall",
      '"flush_interval"',
    ],
    [
      BASE.replace('tables = ["events"]', 'tables = ["events"]\ninject_outbox = false'),
      "app.myapp.db.primary.inject_outbox",
      '"inject_outbox_seq"',
    ],
    [
      BASE.replace('tables = ["events"]', 'tables = [{ name = "events", retain_days = 3 }]'),
      "app.myapp.db.primary.tables[0].retain_days",
      '"retain_log_days"',
    ],
    [`${BASE}\n[apps.x]\ndb_dir = "y"\n`, "apps", '"app"'],
  ])("are reported with a suggestion (%#)", (text, keyPath, suggestion) => {
    const error = configErrorOf(text);
    expect(error.keyPath).toBe(keyPath);
    expect(error.message).toContain(`(did you mean ${suggestion}?)`);
  });

  test("a key nothing resembles gets no suggestion", () => {
    const error = configErrorOf(BASE.replace('db_dir = "data"', 'db_dir = "data"\nzzzzzzzzzzz = 1'));
    expect(error.keyPath).toBe("app.myapp.zzzzzzzzzzz");
    expect(error.message).not.toContain("did you mean");
  });
});

describe("wrong types and ranges", () => {
  test.each([
    ['batch_size = "500"', "app.myapp.batch_size", "expected an integer, got string"],
    ["batch_size = 1.5", "app.myapp.batch_size", "expected an integer, got 1.5"],
    ["batch_size = 0", "app.myapp.batch_size", "must be ≥ 1, got 0"],
    ["flush_interval = 0", "app.myapp.flush_interval", "must be > 0, got 0"],
    ['flush_interval = "1s"', "app.myapp.flush_interval", "expected a number, got string"],
    ["flush_interval = inf", "app.myapp.flush_interval", "expected a finite number, got Infinity"],
    ["table_flush_threshold = 0", "app.myapp.table_flush_threshold", "must be ≥ 1, got 0"],
    ["table_max_wait = -1", "app.myapp.table_max_wait", "must be ≥ 0, got -1"],
    ['auto_schema = "yes"', "app.myapp.auto_schema", "expected a boolean (true or false), got string"],
    ["cleanup_every = 0", "app.myapp.cleanup_every", "must be ≥ 1, got 0"],
    ["retain_log_days = -1", "app.myapp.retain_log_days", "must be ≥ 0, got -1"],
    ["max_pending = -5", "app.myapp.max_pending", "must be ≥ 0, got -5"],
    ["max_attempts = 2.5", "app.myapp.max_attempts", "expected an integer, got 2.5"],
    ["backoff_cap_minutes = 0", "app.myapp.backoff_cap_minutes", "must be > 0, got 0"],
    ["backoff_unit_seconds = -1", "app.myapp.backoff_unit_seconds", "must be > 0, got -1"],
    ["write_timeout = 0", "app.myapp.write_timeout", "must be > 0, got 0"],
    ['durability = "fsync"', "app.myapp.durability", 'expected one of "normal", "full", got "fsync"'],
    ["db_dir = 3", "app.myapp.db_dir", "expected a string, got integer"],
    ['db_dir = ""', "app.myapp.db_dir", "must not be empty"],
    ["table_max_wait = nan", "app.myapp.table_max_wait", "expected a number, got nan"],
    ["write_timeout = 1979-05-27", "app.myapp.write_timeout", "expected a number, got datetime"],
    ["batch_size = [1]", "app.myapp.batch_size", "expected an integer, got array"],
    ["auto_schema = { x = 1 }", "app.myapp.auto_schema", "expected a boolean (true or false), got table"],
    ["db = 3", "app.myapp.db", "expected a table of targets"],
  ])("%s is rejected", (line, keyPath, message) => {
    const key = line.split(" ")[0]!;
    const text = BASE.replace(/\[app\.myapp\]\n/, `[app.myapp]\n${line}\n`).replace(
      key === "db_dir" ? 'db_dir = "data"\n' : "\0",
      "",
    );
    const error = configErrorOf(key === "db" ? `[app.myapp]\ndb_dir = "d"\n${line}\n` : text);
    expect(error.keyPath).toBe(keyPath);
    expect(error.message).toContain(message);
  });

  test.each([
    ['compat = "no"', "app.myapp.db.primary.compat", "expected a boolean"],
    [
      'compat = true\ndialect = "postgres"',
      "app.myapp.db.primary.compat",
      "exists only for sqlite and libsql targets; this target writes postgres",
    ],
    [
      'compat = true\ndialect = "mysql"',
      "app.myapp.db.primary.compat",
      "exists only for sqlite and libsql targets; this target writes mysql",
    ],
    ['dialect = "postgresql"', "app.myapp.db.primary.dialect", '(did you mean "postgres"?)'],
    ["retain_log_days = -2", "app.myapp.db.primary.retain_log_days", "must be ≥ 0"],
    [
      'inject_outbox_seq = "yes"',
      "app.myapp.db.primary.inject_outbox_seq",
      "expected a boolean or an array of table names, got string",
    ],
    [
      'inject_outbox_seq = ["evnts"]',
      "app.myapp.db.primary.inject_outbox_seq",
      'names table "evnts", which is not in tables (did you mean "events"?)',
    ],
    [
      "inject_outbox_seq = [1]",
      "app.myapp.db.primary.inject_outbox_seq[0]",
      "expected a table name (string), got integer",
    ],
    ['connection = "postgres://x"', "app.myapp.db.primary.connection", "expected a table"],
    ["writer_class = 5", "app.myapp.db.primary.writer_class", "expected a string, got integer"],
  ])("target %s is rejected", (line, keyPath, message) => {
    const text = BASE.replace('tables = ["events"]', `tables = ["events"]\n${line}`).replace(
      line.startsWith("writer_class") ? 'writer_class = "./w.ts:W"\n' : "\0",
      "",
    );
    const error = configErrorOf(text);
    expect(error.keyPath).toBe(keyPath);
    expect(error.message).toContain(message);
  });
});

describe("tables", () => {
  test.each([
    ["tables = []", "app.myapp.db.primary.tables", "must list at least one table"],
    ['tables = "events"', "app.myapp.db.primary.tables", "expected an array of table names, got string"],
    [
      'tables = ["events", "events"]',
      "app.myapp.db.primary.tables[1]",
      'table "events" is listed twice (also tables[0])',
    ],
    [
      'tables = ["a", { name = "a", retain_log_days = 1 }]',
      "app.myapp.db.primary.tables[1]",
      'table "a" is listed twice',
    ],
    ['tables = ["a", 5]', "app.myapp.db.primary.tables[1]", 'expected a table name or { name = "…" }, got integer'],
    ["tables = [{ retain_log_days = 1 }]", "app.myapp.db.primary.tables[0].name", "required: the table name"],
    ['tables = [""]', "app.myapp.db.primary.tables[0]", 'invalid table name ""'],
    ['tables = ["../etc/passwd"]', "app.myapp.db.primary.tables[0]", 'invalid table name "../etc/passwd"'],
    [
      'tables = [{ name = "a", inject_outbox_seq = 1 }]',
      "app.myapp.db.primary.tables[0].inject_outbox_seq",
      "expected a boolean",
    ],
  ])("%s is rejected", (line, keyPath, message) => {
    const error = configErrorOf(BASE.replace('tables = ["events"]', line));
    expect(error.keyPath).toBe(keyPath);
    expect(error.message).toContain(message);
  });

  // The drain creates {db_dir}/{table}.db for every configured table: a name the producer refuses
  // would be a queue nobody can ever write to, so the config asks the producer's own question.
  test("refuses the table names the producer refuses, each with the producer's message, key path and position", () => {
    const caught = errorOf<ConfigIssuesError>(() =>
      parseConfigToml(BASE.replace('tables = ["events"]', 'tables = ["a b", "c;d"]'), FILE, {}),
    );
    expect(caught).toBeInstanceOf(ConfigIssuesError);
    const issues = caught.issues;
    expect(issues.map((i) => [i.file, i.keyPath, i.line, i.column])).toEqual([
      [FILE, "app.myapp.db.primary.tables[0]", 7, 1],
      [FILE, "app.myapp.db.primary.tables[1]", 7, 1],
    ]);
    expect(issues[0]!.message).toBe(`${FILE}:7:1 [app.myapp.db.primary.tables[0]]: ${tableNameProblem("a b")}`);
    expect(issues[1]!.message).toBe(`${FILE}:7:1 [app.myapp.db.primary.tables[1]]: ${tableNameProblem("c;d")}`);
  });

  test("refuses an inline entry's name at its name key", () => {
    const error = configErrorOf(
      BASE.replace('tables = ["events"]', 'tables = [\n  "events",\n  { name = "a b", retain_log_days = 1 },\n]'),
    );
    expect(error.keyPath).toBe("app.myapp.db.primary.tables[1].name");
    expect([error.line, error.column]).toEqual([7, 1]);
    expect(error.message).toEndWith(`: ${tableNameProblem("a b")}`);
  });

  test("refuses a name that only becomes invalid once ${VAR} is interpolated", () => {
    const error = configErrorOf(BASE.replace('"events"', '"${TABLE}"'), { TABLE: "orders; drop" });
    expect(error.keyPath).toBe("app.myapp.db.primary.tables[0]");
    expect(error.message).toEndWith(`: ${tableNameProblem("orders; drop")}`);
  });

  test.each(["a b", "c;d", "", " events", "events\n", ".hidden", "-dash", "a..b", "a/b", "a\\b", "naïve", "a\0b"])(
    "refuses %p exactly when the producer does",
    (name) => {
      expect(tableNameProblem(name)).not.toBeNull();
      for (const entry of [JSON.stringify(name), `{ name = ${JSON.stringify(name)} }`]) {
        const error = configErrorOf(BASE.replace('tables = ["events"]', `tables = [${entry}]`));
        expect(error.message).toEndWith(`: ${tableNameProblem(name)}`);
      }
    },
  );

  test.each(["events", "v1.orders", "$sys", "_private", "Order-Items_2", "a.b-c"])(
    "accepts the valid name %p, plain or inline",
    (name) => {
      expect(tableNameProblem(name)).toBeNull();
      const text = BASE.replace(
        'tables = ["events"]',
        `tables = ["${name}"]\n[app.myapp.db.other]\nwriter_class = "./w.ts:W"\ntables = [{ name = "${name}x", retain_log_days = 2 }]`,
      );
      const targets = parseConfigToml(text, FILE, {}).apps[0]!.targets;
      expect(targets.map((t) => t.tables.map((table) => table.name))).toEqual([[name], [`${name}x`]]);
    },
  );

  test("a target without tables is rejected", () => {
    const error = configErrorOf(BASE.replace('tables = ["events"]', ""));
    expect(error.keyPath).toBe("app.myapp.db.primary.tables");
    expect(error.message).toContain("required");
  });

  test("the same table routed to two targets of one app is rejected at the second", () => {
    const error = configErrorOf(
      `${BASE}\n[app.myapp.db.backup]\nwriter_class = "./w.ts:W"\ntables = ["other", "events"]\n`,
    );
    expect(error.keyPath).toBe("app.myapp.db.backup.tables[1]");
    expect(error.message).toContain('table "events" is already routed to target "myapp.primary"');
  });

  test("the same table name in two different apps is fine (different db_dirs)", () => {
    const text = `${BASE}\n[app.other]\ndb_dir = "other"\n[app.other.db.primary]\nwriter_class = "./w.ts:W"\ntables = ["events"]\n`;
    expect(parseConfigToml(text, FILE, {}).apps).toHaveLength(2);
  });
});

describe("writers", () => {
  test("both writer and writer_class is rejected", () => {
    const error = configErrorOf(
      `${BASE.replace('tables = ["events"]', 'tables = ["events"]\nwriter = "sqlite"')}[app.myapp.db.primary.connection]\npath = "x.db"\n`,
    );
    expect(error.keyPath).toBe("app.myapp.db.primary.writer_class");
    expect(error.message).toContain('set either "writer" or "writer_class", not both');
  });

  test("neither writer nor writer_class is rejected", () => {
    const error = configErrorOf(BASE.replace('writer_class = "./w.ts:W"', ""));
    expect(error.keyPath).toBe("app.myapp.db.primary");
    expect(error.message).toContain('missing "writer" (one of sqlite, libsql, postgres, mysql) or "writer_class"');
  });

  test("an unknown built-in writer is rejected with a suggestion", () => {
    const error = configErrorOf(BASE.replace('writer_class = "./w.ts:W"', 'writer = "postgresql"'));
    expect(error.keyPath).toBe("app.myapp.db.primary.writer");
    expect(error.message).toContain('unknown built-in writer "postgresql" (did you mean "postgres"?)');
  });

  test("a writer named like an Object.prototype member is just an unknown writer", () => {
    const error = configErrorOf(BASE.replace('writer_class = "./w.ts:W"', 'writer = "toString"'));
    expect(error.keyPath).toBe("app.myapp.db.primary.writer");
    expect(error.message).toContain('unknown built-in writer "toString"');
  });

  test("a writer's validation message never carries a credential", () => {
    const text = `${BASE.replace('writer_class = "./w.ts:W"', 'writer = "postgres"')}[app.myapp.db.primary.connection]\nurl = "\${DB_URL}"\n`;
    const error = configErrorOf(text, { DB_URL: "mysql://app:hunter2-secret@db/x" });
    expect(error.keyPath).toBe("app.myapp.db.primary.connection.url");
    expect(error.message).not.toContain("hunter2-secret");
  });

  test("an empty writer_class is rejected", () => {
    const error = configErrorOf(BASE.replace('"./w.ts:W"', '""'));
    expect(error.keyPath).toBe("app.myapp.db.primary.writer_class");
  });
});

describe("built-in writer [connection] validation", () => {
  // The mechanism is tested against a stand-in spec registered under a built-in name, so it does
  // not depend on any one engine's key list; the original entry is restored after each test.
  const saved = builtinWriters.mysql;
  afterEach(() => {
    if (saved) builtinWriters.mysql = saved;
    else delete (builtinWriters as Partial<typeof builtinWriters>).mysql;
  });
  const spec: WriterSpec = {
    dialect: "mysql",
    keys: [
      { name: "host", required: true, description: "server host name" },
      { name: "port", description: "server port" },
      { name: "password", secret: true, description: "password" },
    ],
    validate: (c) =>
      c.port !== undefined && typeof c.port !== "number" ? [{ key: "port", message: "must be a port number" }] : [],
    create: () => ({ writeBatch: async () => [] }),
  };
  const text = (connection: string) =>
    `${BASE.replace('writer_class = "./w.ts:W"', 'writer = "mysql"')}[app.myapp.db.primary.connection]\n${connection}\n`;

  test("a missing required key is named with its description", () => {
    builtinWriters.mysql = spec;
    const error = configErrorOf(text("port = 3306"));
    expect(error.keyPath).toBe("app.myapp.db.primary.connection.host");
    expect(error.message).toContain('required by writer "mysql": server host name');
  });

  test("a missing [connection] table counts as every required key missing", () => {
    builtinWriters.mysql = spec;
    const error = configErrorOf(BASE.replace('writer_class = "./w.ts:W"', 'writer = "mysql"'));
    expect(error.keyPath).toBe("app.myapp.db.primary.connection.host");
  });

  test("an unknown connection key is rejected with a suggestion", () => {
    builtinWriters.mysql = spec;
    const error = configErrorOf(text('host = "db"\npasword = "x"'));
    expect(error.keyPath).toBe("app.myapp.db.primary.connection.pasword");
    expect(error.message).toContain('(did you mean "password"?)');
  });

  test("the writer's own validate() problems are reported at their key", () => {
    builtinWriters.mysql = spec;
    const error = configErrorOf(text('host = "db"\nport = "x"'));
    expect(error.keyPath).toBe("app.myapp.db.primary.connection.port");
    expect(error.message).toContain("must be a port number");
  });
});

describe("apps", () => {
  test("a file without apps is rejected", () => {
    const error = configErrorOf(`# nothing here\n`);
    expect(error.keyPath).toBe("app");
    expect(error.message).toContain("no apps configured");
  });

  test("an app without targets is rejected", () => {
    const error = configErrorOf(`[app.myapp]\ndb_dir = "d"\n`);
    expect(error.keyPath).toBe("app.myapp.db");
    expect(error.message).toContain('app "myapp" has no targets');
  });

  test("an app without db_dir is rejected", () => {
    const error = configErrorOf(BASE.replace('db_dir = "data"', ""));
    expect(error.keyPath).toBe("app.myapp.db_dir");
    expect(error.message).toContain("required");
  });

  test("an app name that cannot be part of a target name is rejected", () => {
    const error = configErrorOf(BASE.replaceAll("app.myapp", 'app."my.app"'));
    expect(error.keyPath).toBe('app."my.app"');
  });

  test("two apps sharing one db_dir are rejected", () => {
    const error = configErrorOf(
      `${BASE}\n[app.other]\ndb_dir = "./data"\n[app.other.db.x]\nwriter_class = "./w.ts:W"\ntables = ["t"]\n`,
    );
    expect(error.keyPath).toBe("app.other.db_dir");
    expect(error.message).toContain('also used by app "myapp"');
  });
});

describe("several problems", () => {
  test("are all reported in one ConfigIssuesError, each with its key path", () => {
    const error = errorOf<ConfigIssuesError>(() =>
      parseConfigToml(
        BASE.replace('db_dir = "data"', 'db_dir = "data"\nbatch_size = 0\ndurability = "fast"').replace(
          '["events"]',
          '["a", "a"]',
        ),
        FILE,
        {},
      ),
    );
    expect(error).toBeInstanceOf(ConfigIssuesError);
    expect(error.code).toBe("E_CONFIG");
    expect(error.issues.map((i) => i.keyPath)).toEqual([
      "app.myapp.batch_size",
      "app.myapp.durability",
      "app.myapp.db.primary.tables[1]",
    ]);
    expect(error.message).toContain("3 problems");
    for (const issue of error.issues) expect(error.message).toContain(issue.message);
  });
});

describe("positions of validation errors", () => {
  const text = [
    "[app.myapp]", // 1
    'db_dir = "data"', // 2
    "  batch_size = 0", // 3
    "", // 4
    '[app.myapp.db."primary"]', // 5
    'writer_class = "./w.ts:W"', // 6
    'description = """', // 7
    "not_a_key = 1", // 8
    '"""', // 9
    "tables = [", // 10
    '  "events",', // 11
    '  "events",', // 12
    "]", // 13
    "connection.host = 5", // 14
    "", // 15
    "[app.other]", // 16
    'db_dir = "o"', // 17
  ].join("\n");

  test("each problem carries the line and column of its key, or of the nearest enclosing table", () => {
    const error = errorOf<ConfigIssuesError>(() => parseConfigToml(text, FILE, {}));
    expect(error).toBeInstanceOf(ConfigIssuesError);
    const where = error.issues.map((i) => [i.keyPath, i.line, i.column]);
    expect(where).toEqual([
      ["app.myapp.batch_size", 3, 3],
      ["app.myapp.db.primary.description", 7, 1],
      ["app.myapp.db.primary.tables[1]", 10, 1],
      ["app.other.db", 16, 1],
    ]);
    expect(error.issues[0]!.message).toStartWith(`${FILE}:3:3 [app.myapp.batch_size]: `);
  });
});

describe("routing key paths", () => {
  test("point at the original tables entry even after an earlier duplicate", () => {
    const error = errorOf<ConfigIssuesError>(() =>
      parseConfigToml(
        `${BASE}\n[app.myapp.db.backup]\nwriter_class = "./w.ts:W"\ntables = ["x", "x", "events"]\n`,
        FILE,
        {},
      ),
    );
    expect(error).toBeInstanceOf(ConfigIssuesError);
    expect(error.issues.map((i) => i.keyPath)).toEqual([
      "app.myapp.db.backup.tables[1]",
      "app.myapp.db.backup.tables[2]",
    ]);
  });
});

describe("missing ${VAR} in [connection]", () => {
  test("is one problem at the key, not also an invalid value of the raw ${VAR} text", () => {
    const text = `[app.myapp]\ndb_dir = "data"\n\n[app.myapp.db.primary]\nwriter = "postgres"\ntables = ["events"]\n\n[app.myapp.db.primary.connection]\nurl = "\${DATABASE_URL}"\nport = 5432\n`;
    const error = configErrorOf(text);
    expect(error.keyPath).toBe("app.myapp.db.primary.connection.url");
    expect(error.line).toBe(9);
    expect(error.message).toContain('environment variable "DATABASE_URL" is not set');
  });
});

test("compat = true on a built-in postgres or mysql writer is a config error, not a drain that dead-letters every injected row", () => {
  for (const writer of ["postgres", "mysql"]) {
    const error = configErrorOf(
      `[app.myapp]\ndb_dir = "d"\n[app.myapp.db.primary]\nwriter = "${writer}"\ntables = ["events"]\ninject_outbox_seq = true\ncompat = true\n[app.myapp.db.primary.connection]\nurl = "${writer}://u@h/db"\n`,
    );
    expect(error.keyPath).toBe("app.myapp.db.primary.compat");
    expect(error.message).toContain(`this target writes ${writer}`);
  }
  expect(() =>
    parseConfigToml(
      `[app.myapp]\ndb_dir = "d"\n[app.myapp.db.primary]\nwriter = "sqlite"\ntables = ["events"]\ninject_outbox_seq = true\ncompat = true\n[app.myapp.db.primary.connection]\npath = "r.db"\n`,
      FILE,
      {},
    ),
  ).not.toThrow();
});
