// A tenant template target in outbox.toml and defineConfig (SPEC §4c): a `{tenant}` in a
// [connection] value makes one; what it needs and what it refuses, each at its key.
import { describe, expect, test } from "bun:test";
import { configSecrets } from "../src/config/secret-values.ts";
import { ConfigError, ConfigIssuesError, defineConfig, parseConfigToml } from "../src/index.ts";
import { errorOf } from "./support/errors.ts";

const FILE = "/srv/app/outbox.toml";
const TARGET = "app.myapp.db.tenants";

/** A config with one target `myapp.tenants`: `settings` are its keys, `connection` its [connection] lines. */
function toml(settings: string, connection: string): string {
  return `[app.myapp]\ndb_dir = "data"\n\n[app.myapp.db.tenants]\n${settings}\ntables = ["notes"]\n\n[app.myapp.db.tenants.connection]\n${connection}\n`;
}

function targetOf(text: string, env: Record<string, string> = {}) {
  return parseConfigToml(text, FILE, env).apps[0]!.targets[0]!;
}

/** The single ConfigError `text` raises: its key path and its message after the location. */
function problemOf(text: string, env: Record<string, string> = {}): { keyPath: string | undefined; message: string } {
  const error = errorOf<ConfigError>(() => parseConfigToml(text, FILE, env));
  expect(error).toBeInstanceOf(ConfigError);
  expect(error).not.toBeInstanceOf(ConfigIssuesError);
  expect(error.code).toBe("E_CONFIG");
  expect(error.file).toBe(FILE);
  return { keyPath: error.keyPath, message: error.message.slice(error.message.indexOf("]: ") + 3) };
}

describe("a tenant template", () => {
  test("is a target with {tenant} in a connection value: 64 tenants open at most by default, the template kept", () => {
    const target = targetOf(toml('writer = "postgres"', 'url = "postgres://app@db.internal:5432/tenant_{tenant}"'));
    expect(target.tenants).toEqual({ maxOpen: 64 });
    expect(target.connection).toEqual({ url: "postgres://app@db.internal:5432/tenant_{tenant}" });
  });

  test("max_open_tenants sets how many", () => {
    const target = targetOf(toml('writer = "sqlite"\nmax_open_tenants = 8', 'path = "remote/{tenant}.db"'));
    expect(target.tenants).toEqual({ maxOpen: 8 });
  });

  test("a target without {tenant} is none", () => {
    expect(targetOf(toml('writer = "sqlite"', 'path = "remote/one.db"')).tenants).toBeNull();
  });

  test("a relative sqlite path is resolved against the config's directory, {tenant} left in", () => {
    const target = targetOf(toml('writer = "sqlite"', 'path = "remote/{tenant}.db"'));
    expect(target.connection.path).toBe("/srv/app/remote/{tenant}.db");
  });

  test("a relative libsql file: URL likewise", () => {
    const target = targetOf(toml('writer = "libsql"', 'url = "file:remote/{tenant}.db"'));
    expect(target.connection.url).toBe("file:/srv/app/remote/{tenant}.db");
    expect(target.tenants).toEqual({ maxOpen: 64 });
  });

  test("${VAR} is interpolated around {tenant}", () => {
    const target = targetOf(
      toml('writer = "libsql"', 'url = "libsql://{tenant}-${ORG}.turso.io"\nauth_token = "${TURSO_TOKEN}"'),
      { ORG: "acme", TURSO_TOKEN: "shared-token-1234" },
    );
    expect(target.connection).toEqual({ url: "libsql://{tenant}-acme.turso.io", auth_token: "shared-token-1234" });
    expect(target.tenants).toEqual({ maxOpen: 64 });
  });

  test("a {tenant} that comes from a variable's value makes a template too, and is left alone", () => {
    const target = targetOf(toml('writer = "postgres"', 'url = "${DATABASE_URL}"'), {
      DATABASE_URL: "postgres://app@db/tenant_{tenant}",
    });
    expect(target.connection.url).toBe("postgres://app@db/tenant_{tenant}");
    expect(target.tenants).toEqual({ maxOpen: 64 });
  });

  test("a {tenant} at any depth of a custom writer's connection counts", () => {
    const target = targetOf(
      toml(
        'writer_class = "./w.ts:W"\ndialect = "postgres"',
        'endpoint = "https://api"\noptions = { db = ["t_{tenant}"] }',
      ),
    );
    expect(target.tenants).toEqual({ maxOpen: 64 });
    expect(target.connection).toEqual({ endpoint: "https://api", options: { db: ["t_{tenant}"] } });
  });

  test.each([
    ["a database", 'url = "postgres://app:pw-1234@db.internal/tenant_{tenant}"'],
    ["a host", 'url = "postgres://app@{tenant}.db.internal/app"'],
    ["a user", 'url = "postgres://{tenant}@db.internal/app"'],
    ["a separate key", 'host = "db.internal"\ndatabase = "tenant_{tenant}"\nport = 5433'],
  ])("a postgres template with {tenant} in %s passes the writer's checks", (_where, connection) => {
    expect(targetOf(toml('writer = "postgres"', connection)).tenants).toEqual({ maxOpen: 64 });
  });

  test("the writer's checks still apply to everything else", () => {
    expect(problemOf(toml('writer = "postgres"', 'url = "mysql://app@db/tenant_{tenant}"'))).toEqual({
      keyPath: `${TARGET}.connection.url`,
      message: "must start with postgres:// or postgresql://, got mysql://",
    });
    expect(problemOf(toml('writer = "sqlite"', 'path = "{tenant}.db"\nbusy_timeout = "{tenant}"'))).toEqual({
      keyPath: `${TARGET}.connection.busy_timeout`,
      message: 'must be a positive number, got "{tenant}"',
    });
  });

  test("its password is a secret, its database is not", () => {
    const config = parseConfigToml(
      toml('writer = "postgres"', 'url = "postgres://app:pw-secret-1@db.internal/tenant_{tenant}"'),
      FILE,
      {},
    );
    expect(configSecrets(config)).toEqual(["pw-secret-1"]);
  });
});

describe("what a tenant template refuses", () => {
  test("max_open_tenants on a target that is no template", () => {
    expect(problemOf(toml('writer = "sqlite"\nmax_open_tenants = 8', 'path = "remote/one.db"'))).toEqual({
      keyPath: `${TARGET}.max_open_tenants`,
      message:
        "bounds the open databases of a tenant template, and this target is none: no value of its [connection] contains {tenant} (remove the key, or put {tenant} where each tenant's database is named)",
    });
  });

  test.each([
    ["0", "must be ≥ 1, got 0"],
    ["2.5", "expected an integer, got 2.5"],
    ['"64"', "expected an integer, got string"],
  ])("max_open_tenants = %s", (value, message) => {
    expect(problemOf(toml(`writer = "sqlite"\nmax_open_tenants = ${value}`, 'path = "{tenant}.db"'))).toEqual({
      keyPath: `${TARGET}.max_open_tenants`,
      message,
    });
  });

  test("ledger = false: each tenant's delivery is fenced by its own database's ledger", () => {
    expect(problemOf(toml('writer = "sqlite"\nledger = false', 'path = "{tenant}.db"'))).toEqual({
      keyPath: `${TARGET}.ledger`,
      message:
        "a tenant template needs the delivery ledger: each tenant's delivery is fenced by the ledger in its own database (remove ledger = false)",
    });
  });

  test.each([
    ["the target's inject_outbox_seq", 'writer = "sqlite"\ninject_outbox_seq = true'],
    ["a list naming it", 'writer = "sqlite"\ninject_outbox_seq = ["notes"]'],
  ])("an injected table, by %s", (_how, settings) => {
    expect(problemOf(toml(settings, 'path = "{tenant}.db"'))).toEqual({
      keyPath: `${TARGET}.tables[0]`,
      message:
        "table \"notes\" is injected (inject_outbox_seq), which a tenant template cannot deliver: the compatibility mode seeds the table's seq from its one remote table at startup, while a tenant's database opens only when its rows come (set inject_outbox_seq = false)",
    });
  });

  test("a writer_class template without dialect", () => {
    expect(problemOf(toml('writer_class = "./w.ts:W"', 'endpoint = "https://{tenant}.api"'))).toEqual({
      keyPath: `${TARGET}.dialect`,
      message:
        "required for a writer_class tenant template (one of sqlite, libsql, postgres, mysql): no tenant's writer exists before its first rows, and the drain needs the dialect sooner",
    });
  });

  test("${tenant} written for {tenant} is told the difference", () => {
    expect(problemOf(toml('writer = "sqlite"', 'path = "${tenant}.db"'))).toEqual({
      keyPath: `${TARGET}.connection.path`,
      message:
        'environment variable "tenant" is not set (process env, .env, Doppler); a tenant template names each tenant\'s database with {tenant}, without the $',
    });
  });
});

describe("defineConfig", () => {
  const config = (target: Record<string, unknown>) =>
    defineConfig({
      baseDir: "/srv/app",
      app: { a: { dbDir: "q", db: { t: { writer: "sqlite", tables: ["notes"], ...target } } } },
    });

  test("takes maxOpenTenants, and a relative path stays beside baseDir", () => {
    const target = config({ maxOpenTenants: 3, connection: { path: "remote/{tenant}.db" } }).apps[0]!.targets[0]!;
    expect(target.tenants).toEqual({ maxOpen: 3 });
    expect(target.connection.path).toBe("/srv/app/remote/{tenant}.db");
  });

  test("names maxOpenTenants on a target that is no template", () => {
    const error = errorOf<ConfigError>(() => config({ maxOpenTenants: 3, connection: { path: "one.db" } }));
    expect(error).toBeInstanceOf(ConfigError);
    expect(error.keyPath).toBe("app.a.db.t.maxOpenTenants");
    expect(error.message).toContain("]: bounds the open databases of a tenant template, and this target is none");
  });

  test("names ledger on a template that turns it off", () => {
    const error = errorOf<ConfigError>(() => config({ ledger: false, connection: { path: "{tenant}.db" } }));
    expect(error.keyPath).toBe("app.a.db.t.ledger");
    expect(error.message).toEndWith(
      "a tenant template needs the delivery ledger: each tenant's delivery is fenced by the ledger in its own database (remove ledger = false)",
    );
  });
});
