import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import { ConfigError, createWriters, defineConfig, loadConfigToml } from "../src/index.ts";
import { parseConfigDocument } from "../src/config/parse.ts";
import { describeSlow } from "./support/slow.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";
import { writerOf } from "./support/writers.ts";

let dir: TempDir;
beforeEach(() => {
  dir = makeTempDir();
});
afterEach(() => dir.cleanup());

function writeConfig(target: string, connection = 'db_url = "libsql://example"\ndb_token = "${TOKEN}"'): string {
  const file = dir.file("outbox.toml");
  fs.writeFileSync(
    file,
    `[app.myapp]\ndb_dir = "data"\n\n[app.myapp.db.primary]\n${target}\ntables = ["events"]\n\n[app.myapp.db.primary.connection]\n${connection}\n`,
  );
  return file;
}

const WRITER_SOURCE = `
import { helperTag } from "./helper.ts";
interface Connection { db_url: string; db_token: string }
export class TursoWriter {
  readonly dialect = "libsql" as const;
  constructor(readonly connection: Connection) {}
  async writeBatch(stmts: unknown[]): Promise<unknown[]> { return stmts.map(() => ({ ok: true, rowsAffected: 1 })); }
  tag(): string { return helperTag; }
}
export default TursoWriter;
export const notAClass = 42;
export class NoWriteBatch { constructor(_c: unknown) {} }
export class Throws { constructor(c: { db_token: string }) { throw new Error("cannot connect with token " + c.db_token); } }
`;

async function loadError(
  file: string,
  env: Record<string, string> = { TOKEN: "tok-abcdef-123" },
): Promise<ConfigError> {
  const error = await loadConfigToml(file, { env }).catch((e) => e);
  expect(error).toBeInstanceOf(ConfigError);
  expect(error.code).toBe("E_CONFIG");
  expect(error.file).toBe(file);
  return error;
}

describe("writer_class", () => {
  beforeEach(() => {
    fs.mkdirSync(dir.file("writers"));
    fs.writeFileSync(dir.file("writers/turso.ts"), WRITER_SOURCE);
    fs.writeFileSync(dir.file("writers/helper.ts"), 'export const helperTag: string = "helped";\n');
  });

  test("a relative .ts path is imported and constructed with the [connection] table", async () => {
    const { writers, config } = await loadConfigToml(writeConfig('writer_class = "./writers/turso.ts:TursoWriter"'), {
      env: { TOKEN: "tok-1" },
    });
    const writer = writers["myapp.primary"] as unknown as { connection: unknown; tag(): string; dialect: string };
    expect(writer.connection).toEqual({ db_url: "libsql://example", db_token: "tok-1" });
    expect(writer.tag()).toBe("helped");
    expect(writer.dialect).toBe("libsql");
    expect(config.apps[0]!.targets[0]!.writerClass).toBe(`${dir.file("writers/turso.ts")}:TursoWriter`);
  });

  test("no :Export means the default export", async () => {
    const { writers } = await loadConfigToml(writeConfig('writer_class = "./writers/turso.ts"'), {
      env: { TOKEN: "t" },
    });
    expect(typeof writerOf(writers, "myapp.primary").writeBatch).toBe("function");
  });

  test("a package specifier is resolved from the config file's directory", async () => {
    const pkg = dir.file("node_modules/acme-writers");
    fs.mkdirSync(pkg, { recursive: true });
    fs.writeFileSync(
      path.join(pkg, "package.json"),
      JSON.stringify({ name: "acme-writers", type: "module", main: "index.ts" }),
    );
    fs.writeFileSync(
      path.join(pkg, "index.ts"),
      "export class AcmeWriter { constructor(readonly c: unknown) {} async writeBatch() { return []; } }\n",
    );
    const { writers } = await loadConfigToml(writeConfig('writer_class = "acme-writers:AcmeWriter"'), {
      env: { TOKEN: "t" },
    });
    expect((writers["myapp.primary"] as unknown as { c: unknown }).c).toEqual({
      db_url: "libsql://example",
      db_token: "t",
    });
  });

  test("a missing file is an error naming writer_class and the resolved path", async () => {
    const error = await loadError(writeConfig('writer_class = "./writers/nope.ts:X"'));
    expect(error.keyPath).toBe("app.myapp.db.primary.writer_class");
    expect(error.message).toContain(`file not found: ${dir.file("writers/nope.ts")}`);
  });

  test("an unresolvable package is an error naming writer_class", async () => {
    const error = await loadError(writeConfig('writer_class = "no-such-package-xyz:W"'));
    expect(error.keyPath).toBe("app.myapp.db.primary.writer_class");
    expect(error.message).toContain('package "no-such-package-xyz" cannot be resolved');
  });

  test("a reference-style Python module path gets a hint", async () => {
    const error = await loadError(writeConfig('writer_class = "myapp.writers:TursoWriter"'));
    expect(error.keyPath).toBe("app.myapp.db.primary.writer_class");
    expect(error.message).toContain('looks like a Python module path; use "./path/to/writer.ts:TursoWriter"');
  });

  test("a missing export is an error listing the module's exports", async () => {
    const error = await loadError(writeConfig('writer_class = "./writers/turso.ts:TursoWritr"'));
    expect(error.keyPath).toBe("app.myapp.db.primary.writer_class");
    expect(error.message).toContain(`${dir.file("writers/turso.ts")} has no export "TursoWritr"`);
    expect(error.message).toContain("TursoWriter");
  });

  test("an export that is not a class is rejected", async () => {
    const error = await loadError(writeConfig('writer_class = "./writers/turso.ts:notAClass"'));
    expect(error.message).toContain("is not a class (got number)");
  });

  test("an object without writeBatch is rejected", async () => {
    const error = await loadError(writeConfig('writer_class = "./writers/turso.ts:NoWriteBatch"'));
    expect(error.keyPath).toBe("app.myapp.db.primary.writer_class");
    expect(error.message).toContain("does not implement writeBatch(stmts)");
  });

  test("a throwing constructor is reported with the connection secrets masked", async () => {
    const error = await loadError(writeConfig('writer_class = "./writers/turso.ts:Throws"'), {
      TOKEN: "tok-abcdef-123",
    });
    expect(error.message).toContain("constructor threw: cannot connect with token ***");
    expect(error.message).not.toContain("tok-abcdef-123");
    expect((error.cause as Error).message).toBe("cannot connect with token ***");
    expect(String((error.cause as Error).stack)).not.toContain("tok-abcdef-123");
    expect(JSON.stringify(error)).not.toContain("tok-abcdef-123");
  });

  test("a dialect property the drain does not know is rejected", async () => {
    fs.writeFileSync(
      dir.file("writers/odd.ts"),
      'export class W { dialect = "oracle"; async writeBatch() { return []; } }\n',
    );
    const error = await loadError(writeConfig('writer_class = "./writers/odd.ts:W"'));
    expect(error.keyPath).toBe("app.myapp.db.primary.writer_class");
    expect(error.message).toContain('has dialect "oracle"');
  });

  test("a writer without a dialect loads without a warning: the drain, which picks the dialect, says it once", async () => {
    fs.writeFileSync(dir.file("writers/plain.ts"), "export class W { async writeBatch() { return []; } }\n");
    const warnings: string[] = [];
    const logger = { debug() {}, info() {}, error() {}, warn: (m: string) => warnings.push(m) };
    const { config } = await loadConfigToml(writeConfig('writer_class = "./writers/plain.ts:W"'), {
      env: { TOKEN: "t" },
      logger,
    });
    expect(warnings).toEqual([]);
    expect(config.apps[0]!.targets[0]!.dialect).toBeNull();
  });

  test("a module that fails to load is an error naming writer_class and the syntax error's line:column", async () => {
    fs.writeFileSync(dir.file("writers/broken.ts"), "export class W { constructor( }\n");
    const error = await loadError(writeConfig('writer_class = "./writers/broken.ts:W"'));
    expect(error.keyPath).toBe("app.myapp.db.primary.writer_class");
    expect(error.message).toContain("failed to load");
    expect(error.message).toMatch(
      new RegExp(`failed to load: ${dir.file("writers/broken.ts").replaceAll(".", "\\.")}:1:\\d+: \\S`),
    );
  });

  test("secret-looking connection values are reported as secrets, where the target is is not", async () => {
    const { secrets } = await loadConfigToml(
      writeConfig(
        'writer_class = "./writers/turso.ts:TursoWriter"',
        'db_url = "postgres://u:pw-in-url@h/db"\ndb_token = "${TOKEN}"\nhost = "${HOST}"\nother_url = "${DSN_URL}"\nkey_value = "${DSN}"\nextra = "${EXTRA_SECRET}"',
      ),
      {
        env: {
          TOKEN: "tok-777777",
          HOST: "internal-host",
          DSN_URL: "mysql://app:pw-of-dsn@db.internal:3306/x",
          DSN: "host=db.internal user=app password='pw in dsn' dbname=x",
          EXTRA_SECRET: "named-secret-value",
        },
      },
    );
    expect(secrets).toEqual(
      expect.arrayContaining(["tok-777777", "pw-in-url", "pw-of-dsn", "pw in dsn", "named-secret-value"]),
    );
    for (const where of ["internal-host", "postgres://u:pw-in-url@h/db", "mysql://app:pw-of-dsn@db.internal:3306/x"])
      expect(secrets).not.toContain(where);
    expect(secrets.some((s) => s.includes("db.internal"))).toBe(false);
  });
});

describe("built-in writers", () => {
  test("a sqlite target from TOML writes to its file, resolved beside the config", async () => {
    const file = writeConfig('writer = "sqlite"', 'path = "remote/target.db"');
    fs.mkdirSync(dir.file("remote"));
    const { writers, config } = await loadConfigToml(file, { env: {} });
    expect(config.apps[0]!.targets[0]!.connection.path).toBe(dir.file("remote/target.db"));
    const writer = writerOf(writers, "myapp.primary");
    expect(writer.dialect).toBe("sqlite");
    const results = await writer.writeBatch([
      { sql: "CREATE TABLE events (id INTEGER PRIMARY KEY, v TEXT)", args: [], namespace: "events", seq: 1 },
      { sql: "INSERT INTO events (v) VALUES (?)", args: ["hello"], namespace: "events", seq: 2 },
      { sql: "SELECT v FROM events", args: [], namespace: "events", seq: 3 },
    ]);
    expect(results[1]).toMatchObject({ ok: true, rowsAffected: 1 });
    expect(results[2]).toMatchObject({ ok: true, rows: [["hello"]] });
    await writer.close?.();
    expect(fs.existsSync(dir.file("remote/target.db"))).toBe(true);
  });

  test("an invalid connection value of a built-in writer is a ConfigError at its key", async () => {
    const error = await loadError(writeConfig('writer = "sqlite"', 'path = "t.db"\nbusy_timeout = -1'));
    expect(error.keyPath).toBe("app.myapp.db.primary.connection.busy_timeout");
  });

  test("an unopenable sqlite file surfaces as an outage (WriteError) at first write, not at load", async () => {
    fs.mkdirSync(dir.file("isdir.db"));
    const { writers } = await loadConfigToml(writeConfig('writer = "sqlite"', 'path = "isdir.db"'), { env: {} });
    const error = await writerOf(writers, "myapp.primary")
      .writeBatch([{ sql: "SELECT 1", args: [], namespace: "t", seq: 1 }])
      .catch((e) => e);
    expect(error).toMatchObject({ code: "E_WRITE" });
  });
});

describe("createWriters for defineConfig", () => {
  test("writerClass resolves against baseDir", async () => {
    fs.writeFileSync(
      dir.file("w.ts"),
      "export class W { constructor(readonly c: unknown) {} async writeBatch() { return []; } }\n",
    );
    const config = defineConfig({
      baseDir: dir.path,
      app: { a: { dbDir: "q", db: { x: { writerClass: "./w.ts:W", tables: ["t"], connection: { k: 1 } } } } },
    });
    const writers = await createWriters(config);
    expect((writers["a.x"] as unknown as { c: unknown }).c).toEqual({ k: 1 });
  });
});

describeSlow("compiled binary", "compile a binary that loads a writer_class .ts file", () => {
  test("loads a writer_class .ts file from disk at runtime", async () => {
    fs.mkdirSync(dir.file("writers"));
    fs.writeFileSync(dir.file("writers/turso.ts"), WRITER_SOURCE);
    fs.writeFileSync(dir.file("writers/helper.ts"), 'export const helperTag: string = "helped";\n');
    const config = writeConfig('writer_class = "./writers/turso.ts:TursoWriter"');
    const entry = dir.file("entry.ts");
    fs.writeFileSync(
      entry,
      `import { loadConfigToml } from ${JSON.stringify(path.resolve("src/config/load.ts"))};
const { writers } = await loadConfigToml(process.argv[2]!, { env: { TOKEN: "t" } });
const w = writers["myapp.primary"] as any;
console.log(JSON.stringify({ tag: w.tag(), results: await w.writeBatch([{}]) }));\n`,
    );
    const bin = dir.file("bin");
    const build = Bun.spawnSync(["bun", "build", "--compile", entry, "--outfile", bin], {
      stderr: "pipe",
      stdout: "pipe",
    });
    expect(build.exitCode, build.stderr.toString()).toBe(0);
    const run = Bun.spawnSync([bin, config], {
      cwd: "/",
      stderr: "pipe",
      stdout: "pipe",
      env: { PATH: process.env.PATH },
    });
    expect(run.stderr.toString()).toBe("");
    expect(JSON.parse(run.stdout.toString())).toEqual({ tag: "helped", results: [{ ok: true, rowsAffected: 1 }] });
  }, 60_000);
});

describe("loading", () => {
  test("a config file that does not exist is a ConfigError naming it", async () => {
    const missing = dir.file("nope.toml");
    const error = await loadConfigToml(missing, { env: {} }).catch((e) => e);
    expect(error).toBeInstanceOf(ConfigError);
    expect(error.file).toBe(missing);
    expect(error.message).toContain("cannot read config file");
  });

  test("writer_class itself may use ${VAR}", async () => {
    fs.writeFileSync(
      dir.file("w.ts"),
      "export class W { constructor(readonly c: unknown) {} async writeBatch() { return []; } }\n",
    );
    const { config } = await loadConfigToml(writeConfig('writer_class = "${WRITERS}/w.ts:W"'), {
      env: { WRITERS: ".", TOKEN: "t" },
    });
    expect(config.apps[0]!.targets[0]!.writerClass).toBe(`${dir.file("w.ts")}:W`);
  });
});

describe("secrets a config contains", () => {
  test("built-in writers' secret keys, URL passwords and secret query parameters are reported, not the URLs", () => {
    const text = `[app.a]\ndb_dir = "q"
[app.a.db.pg]\nwriter = "postgres"\ntables = ["t1"]\n[app.a.db.pg.connection]\nurl = "postgres://app:hunter2-pw@db.internal/prod"
[app.a.db.my]\nwriter = "mysql"\ntables = ["t2"]\n[app.a.db.my.connection]\nhost = "h"\npassword = "literal-in-file"
[app.a.db.turso]\nwriter = "libsql"\ntables = ["t3"]\n[app.a.db.turso.connection]\nurl = "libsql://x.turso.io?authToken=query-token-1"\nauth_token = "turso-token-2"
`;
    const { secrets } = parseConfigDocument(text, "/x/outbox.toml", {});
    expect(secrets).toEqual(
      expect.arrayContaining(["hunter2-pw", "literal-in-file", "query-token-1", "turso-token-2"]),
    );
    // Only the secret: the URL around a password says where the target is, which errors must show.
    expect(secrets).not.toContain("postgres://app:hunter2-pw@db.internal/prod");
    expect(secrets).not.toContain("libsql://x.turso.io?authToken=query-token-1");
    expect(secrets).not.toContain("h");
  });
});
