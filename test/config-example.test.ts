// etc/outbox.example.toml is the sample config people copy, and docs/configuration.md the reference
// they read: both must keep up with every key the loader accepts, read from its declarations.
import { describe, expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import { APP_KEYS, TABLE_KEYS, TARGET_KEYS, TOP_KEYS, TRACING_KEYS } from "../src/config/keys.ts";
import { DEFAULTS } from "../src/config/types.ts";
import { builtinWriters, parseConfigToml } from "../src/index.ts";
import { DEFAULT_LIBSQL_BATCH_TIMEOUT_S } from "../src/writers/libsql.ts";
import { DEFAULT_BATCH_TIMEOUT_S, DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_MAX_CONNECTIONS } from "../src/writers/server-keys.ts";
import { DEFAULT_SQLITE_BUSY_TIMEOUT_MS } from "../src/writers/sqlite.ts";

const root = path.resolve(import.meta.dir, "..");
const example = fs.readFileSync(path.join(root, "etc/outbox.example.toml"), "utf8");
const reference = fs.readFileSync(path.join(root, "docs/configuration.md"), "utf8");
const ENV = {
  TURSO_URL: "libsql://db.turso.io",
  TURSO_AUTH_TOKEN: "tok",
  WAREHOUSE_DATABASE_URL: "postgres://u:p@h/db",
  BILLING_DB_HOST: "127.0.0.1",
  BILLING_DB_PASSWORD: "pw",
};
const CONFIG_KEYS = [...new Set([TOP_KEYS, APP_KEYS, TARGET_KEYS, TABLE_KEYS, TRACING_KEYS].flatMap((keys) => Object.keys(keys)))];
const CONNECTION_KEYS = Object.entries(builtinWriters).flatMap(([writer, spec]) => spec.keys.map((k) => [writer, k.name] as const));

describe("etc/outbox.example.toml", () => {
  test("is a valid config", () => {
    const config = parseConfigToml(example, path.join(root, "etc/outbox.example.toml"), ENV);
    expect(config.apps.map((a) => a.name)).toEqual(["shop", "billing"]);
    expect(config.apps[0]!.targets.map((t) => t.name)).toEqual(["shop.analytics", "shop.warehouse", "shop.local"]);
  });

  test("the values it shows for the first app are the defaults", () => {
    const shown = parseConfigToml(example, "/x/outbox.toml", ENV).apps[0]!;
    const minimal = parseConfigToml(
      `[app.shop]\ndb_dir = "data/shop"\n[app.shop.db.t]\nwriter_class = "./w.ts:W"\ntables = ["t"]\n`,
      "/x/outbox.toml",
      {},
    ).apps[0]!;
    expect({ ...shown, targets: [] }).toEqual({ ...minimal, targets: [] });
  });

  test.each(CONFIG_KEYS)("mentions %s", (key) => {
    expect(example).toMatch(new RegExp(`\\b${key}\\b`));
  });

  test.each(CONNECTION_KEYS)("mentions the %s writer's connection key %s", (_writer, key) => {
    expect(example).toMatch(new RegExp(`\\b${key}\\b`));
  });
});

describe("docs/configuration.md", () => {
  test.each(CONFIG_KEYS)("documents %s", (key) => {
    expect(reference).toContain(`\`${key}\``);
  });

  test.each(CONNECTION_KEYS)("documents the %s writer's connection key %s", (_writer, key) => {
    expect(reference).toContain(`\`${key}\``);
  });

  test.each(Object.entries(DEFAULTS))("gives the loader's default of %s", (camel, value) => {
    const key = camel.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
    // "no limit" is spelled 0 in TOML.
    expect(documentedDefault(key)).toEqual(value === null ? 0 : value);
  });

  test("gives the writers' defaults, and max_attempts' 0 as 'forever'", () => {
    expect(documentedDefaults("busy_timeout")).toEqual([DEFAULT_SQLITE_BUSY_TIMEOUT_MS]);
    // The first `batch_timeout` row is the libsql writer's, the second the server writers'.
    expect(documentedDefaults("batch_timeout")).toEqual([DEFAULT_LIBSQL_BATCH_TIMEOUT_S, DEFAULT_BATCH_TIMEOUT_S]);
    expect(documentedDefaults("connect_timeout")).toEqual([DEFAULT_CONNECT_TIMEOUT_S]);
    expect(documentedDefaults("max_connections")).toEqual([DEFAULT_MAX_CONNECTIONS]);
    expect(reference).toMatch(/\| `max_attempts` \|[^\n]*`0` never dead-letters/);
  });
});

/** The default column of every table row documenting `key`, as values (the first code span of the cell). */
function documentedDefaults(key: string): unknown[] {
  const rows = reference.split("\n").filter((l) => l.startsWith(`| \`${key}\``));
  return rows.map((row) => {
    const cells = row.split(" | ");
    // Key tables are `| key | type | default | meaning |`; the writers' are `| key | default | meaning |`.
    const cell = cells.length >= 4 ? cells[2]! : cells[1]!;
    const code = /`([^`]+)`/.exec(cell)?.[1];
    if (code === undefined) return cell.trim();
    if (/^0o[0-7]+$/.test(code)) return Number.parseInt(code.slice(2), 8);
    if (/^".*"$/.test(code)) return code.slice(1, -1);
    if (code === "true" || code === "false") return code === "true";
    return Number.isNaN(Number(code)) ? code : Number(code);
  });
}

/** The default documented in the first row of `key` (the app's or the target's own table). */
function documentedDefault(key: string): unknown {
  return documentedDefaults(key)[0];
}
