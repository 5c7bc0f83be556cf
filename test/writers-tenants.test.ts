// The writers of a tenant template (SPEC §4c): createWriters gives the target a TenantWriters whose
// open(tenant) makes the writer of that tenant's own database — checked against what lands there.
import { Database } from "bun:sqlite";
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import fs from "node:fs";
import { createWriters } from "../src/config/writers.ts";
import { ConfigError, defineConfig, InvalidArgumentError, loadConfigToml, WriteError } from "../src/index.ts";
import type { OutboxWriter, Statement } from "../src/writers/writer.ts";
import { createServerDb, MYSQL_BASE_URL, PG_BASE_URL, type ServerDb, type ServerEngine } from "./support/server-db.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";
import { tenantWritersOf } from "./support/writers.ts";

let dir: TempDir;
const opened: OutboxWriter[] = [];
beforeEach(() => {
  dir = makeTempDir();
});
afterEach(async () => {
  await Promise.all(opened.splice(0).map(async (w) => w.close?.()));
  dir.cleanup();
});

/** Writes outbox.toml with one target `shop.tenants`: `settings` are its keys, `connection` its [connection] lines. */
function writeConfig(settings: string, connection: string): string {
  const file = dir.file("outbox.toml");
  fs.writeFileSync(
    file,
    `[app.shop]\ndb_dir = "queue"\n\n[app.shop.db.tenants]\n${settings}\ntables = ["notes"]\n\n[app.shop.db.tenants.connection]\n${connection}\n`,
  );
  return file;
}

async function open(writers: Record<string, unknown>, tenant: string): Promise<OutboxWriter> {
  const writer = await tenantWritersOf(writers as never, "shop.tenants").open(tenant);
  opened.push(writer);
  return writer;
}

const stmt = (sql: string, args: Statement["args"], seq: number): Statement => ({ sql, args, namespace: "notes", seq });

describe("a sqlite template", () => {
  test("gives each tenant its own file: a batch for acme lands in remote/acme.db, one for globex in remote/globex.db", async () => {
    fs.mkdirSync(dir.file("remote"));
    const { writers } = await loadConfigToml(writeConfig('writer = "sqlite"', 'path = "remote/{tenant}.db"'), {
      env: {},
    });
    for (const tenant of ["acme", "globex"]) {
      const writer = await open(writers, tenant);
      const results = await writer.writeBatch([
        stmt("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)", [], 0),
        stmt("INSERT INTO notes (body) VALUES (?)", [`hello ${tenant}`], 1),
      ]);
      expect(results.every((r) => r.ok)).toBe(true);
      await writer.close?.();
    }
    expect(
      fs
        .readdirSync(dir.file("remote"))
        .filter((f) => f.endsWith(".db"))
        .sort(),
    ).toEqual(["acme.db", "globex.db"]);
    for (const tenant of ["acme", "globex"]) {
      const db = new Database(dir.file(`remote/${tenant}.db`), { readonly: true });
      expect(db.query("SELECT body FROM notes").values()).toEqual([[`hello ${tenant}`]]);
      db.close();
    }
  });

  test("is the sqlite dialect, one batch at a time, described with {tenant} left in", async () => {
    const { writers } = await loadConfigToml(writeConfig('writer = "sqlite"', 'path = "remote/{tenant}.db"'), {
      env: {},
    });
    const tenants = tenantWritersOf(writers, "shop.tenants");
    expect([tenants.tenantTemplate, tenants.dialect, tenants.concurrent]).toEqual([true, "sqlite", false]);
    expect(tenants.describe()).toBe(`sqlite:${dir.file("remote/{tenant}.db")}`);
  });

  test("refuses a tenant name that could leave the directory, and makes no file", async () => {
    const { writers } = await loadConfigToml(writeConfig('writer = "sqlite"', 'path = "remote/{tenant}.db"'), {
      env: {},
    });
    const error = await tenantWritersOf(writers, "shop.tenants")
      .open("../escaped")
      .catch((e) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error.message).toStartWith('target shop.tenants: invalid tenant name "../escaped": it contains "."');
    expect(fs.existsSync(dir.file("escaped.db"))).toBe(false);
  });
});

describe("a libsql template", () => {
  test("gives each tenant its own client on its own database", async () => {
    const { writers } = await loadConfigToml(writeConfig('writer = "libsql"', 'url = "file:remote/{tenant}.db"'), {
      env: {},
    });
    fs.mkdirSync(dir.file("remote"));
    for (const tenant of ["acme", "globex"]) {
      const writer = await open(writers, tenant);
      await writer.writeBatch([
        stmt("CREATE TABLE notes (body TEXT)", [], 0),
        stmt("INSERT INTO notes (body) VALUES (?)", [tenant], 1),
      ]);
    }
    for (const tenant of ["acme", "globex"]) {
      const db = new Database(dir.file(`remote/${tenant}.db`), { readonly: true });
      expect(db.query("SELECT body FROM notes").values()).toEqual([[tenant]]);
      db.close();
    }
    expect(tenantWritersOf(writers, "shop.tenants").describe()).toBe(`libsql file:${dir.file("remote/{tenant}.db")}`);
  });
});

/**
 * Each server: its placeholders, what it answers for a database that does not exist, and a
 * password its test server lets pass (PostgreSQL's trust ignores one; MariaDB's root has none, and
 * refuses any — the password's masking is the same code, tested for both in the conformance suite).
 */
const SERVERS: Array<[ServerEngine, string, (n: number) => string, RegExp, string]> = [
  ["postgres", PG_BASE_URL, (n) => `$${n}`, /3D000: database "sqloutbox_t_nosuch" does not exist/, "pw-never-shown"],
  ["mysql", MYSQL_BASE_URL, () => "?", /1049: Unknown database 'sqloutbox_t_nosuch'/, ""],
];

describe.each(SERVERS)("a %s template", (engine, base, ph, missing, password) => {
  const dbs: ServerDb[] = [];
  afterEach(async () => {
    await Promise.all(opened.splice(0).map(async (w) => w.close?.()));
    await Promise.all(dbs.splice(0).map((db) => db.drop()));
  });

  /** A config of one template target on this server, `{tenant}` standing for the part after `sqloutbox_t_`. */
  const template = (url: string, extra: Record<string, unknown> = {}) =>
    defineConfig({
      baseDir: dir.path,
      app: {
        shop: { dbDir: "queue", db: { tenants: { writer: engine, tables: ["notes"], connection: { url }, ...extra } } },
      },
    });

  test("delivers each tenant's batch into that tenant's own database", async () => {
    dbs.push(await createServerDb(engine), await createServerDb(engine));
    const tenants = dbs.map((db) => db.name.replace(/^sqloutbox_t_/, ""));
    for (const db of dbs) await db.sql.unsafe("CREATE TABLE notes (body VARCHAR(64))");
    const writers = await createWriters(template(`${base}/sqloutbox_t_{tenant}`));
    for (const tenant of tenants) {
      const writer = await open(writers, tenant);
      const [result] = await writer.writeBatch([stmt(`INSERT INTO notes (body) VALUES (${ph(1)})`, [tenant], 1)]);
      expect(result).toMatchObject({ ok: true, rowsAffected: 1 });
    }
    for (const [i, db] of dbs.entries()) {
      expect(await db.sql.unsafe("SELECT body FROM notes").values()).toEqual([[tenants[i]]]);
    }
  });

  test("says where a missing tenant database was looked for: writer, user, host, port and database, never the password", async () => {
    const url = new URL(base);
    url.password = password;
    const writers = await createWriters(template(`${url.href.replace(/\/$/, "")}/sqloutbox_t_{tenant}`));
    const tenants = tenantWritersOf(writers, "shop.tenants");
    const where = `${engine} ${decodeURIComponent(url.username)}@${url.hostname}:${url.port}/sqloutbox_t_{tenant}`;
    expect(tenants.describe()).toBe(where);
    expect([tenants.dialect, tenants.concurrent]).toEqual([engine, true]);
    const writer = await open(writers, "nosuch");
    const error = await writer.writeBatch([stmt("SELECT 1", [], 1)]).catch((e) => e);
    expect(error).toBeInstanceOf(WriteError);
    expect(error.message).toStartWith(`${where.replace("{tenant}", "nosuch")}: cannot connect: `);
    expect(error.message).toMatch(missing);
    if (password) {
      expect(error.message).not.toContain(password);
      expect(String(error.cause?.message ?? "")).not.toContain(password);
    }
  });
});

const RECORDING_WRITER = `
export class Recording {
  readonly dialect = "postgres" as const;
  constructor(readonly connection: Record<string, unknown>) {
    if (connection.fail) throw new Error("cannot reach " + connection.endpoint + " with " + connection.token);
  }
  async writeBatch(stmts: unknown[]) { return stmts.map(() => ({ ok: true, rowsAffected: 1 })); }
}
`;

describe("a writer_class template", () => {
  test("constructs the class per tenant with that tenant's resolved connection", async () => {
    fs.writeFileSync(dir.file("recording.ts"), RECORDING_WRITER);
    const file = writeConfig(
      'writer_class = "./recording.ts:Recording"\ndialect = "postgres"',
      'endpoint = "https://{tenant}.api.example"\ntoken = "${API_TOKEN}"\noptions = { schemas = ["public", "t_{tenant}"] }',
    );
    const { writers } = await loadConfigToml(file, { env: { API_TOKEN: "shared-token-9876" } });
    const tenants = tenantWritersOf(writers, "shop.tenants");
    expect([tenants.dialect, tenants.concurrent]).toEqual(["postgres", undefined]);
    expect(tenants.describe()).toBe(`writer_class ${dir.file("recording.ts")}:Recording`);
    const acme = (await open(writers, "acme")) as unknown as { connection: unknown };
    const globex = (await open(writers, "globex")) as unknown as { connection: unknown };
    expect(acme.connection).toEqual({
      endpoint: "https://acme.api.example",
      token: "shared-token-9876",
      options: { schemas: ["public", "t_acme"] },
    });
    expect(globex.connection).toEqual({
      endpoint: "https://globex.api.example",
      token: "shared-token-9876",
      options: { schemas: ["public", "t_globex"] },
    });
  });

  test("masks a tenant's own templated secret in its constructor's error", async () => {
    fs.writeFileSync(dir.file("recording.ts"), RECORDING_WRITER);
    const file = writeConfig(
      'writer_class = "./recording.ts:Recording"\ndialect = "postgres"',
      'endpoint = "https://{tenant}.api.example"\ntoken = "tok-{tenant}-secret"\nfail = true',
    );
    const { writers } = await loadConfigToml(file, { env: {} });
    const error = await tenantWritersOf(writers, "shop.tenants")
      .open("acme")
      .catch((e) => e);
    expect(error).toBeInstanceOf(ConfigError);
    expect(error.keyPath).toBe("app.shop.db.tenants.writer_class");
    expect(error.message).toContain("constructor threw: cannot reach https://acme.api.example with ***");
    expect(error.message).not.toContain("tok-acme-secret");
  });

  test("a module that is not there is told at load, before any tenant", async () => {
    const file = writeConfig('writer_class = "./missing.ts:Recording"\ndialect = "postgres"', 'endpoint = "{tenant}"');
    const error = await loadConfigToml(file, { env: {} }).catch((e) => e);
    expect(error).toBeInstanceOf(ConfigError);
    expect(error.keyPath).toBe("app.shop.db.tenants.writer_class");
    expect(error.message).toContain(`writer_class file not found: ${dir.file("missing.ts")}`);
  });
});
