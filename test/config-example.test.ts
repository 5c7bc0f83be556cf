// etc/outbox.example.toml is the sample config people copy, and docs/configuration.md the reference
// they read: both must keep up with every key the loader accepts, read from its own declarations
// (src/config/keys.ts) — the reference with each key's type, default and meaning as declared.
import { describe, expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import { Described, typeWords, type Key, type Keys } from "../src/config/declaration.ts";
import { ADMIN_KEYS, APP_KEYS, TABLE_KEYS, TARGET_KEYS, TOP_KEYS, TRACING_KEYS } from "../src/config/keys.ts";
import { builtinWriters, parseConfigToml } from "../src/index.ts";
import { DEFAULT_LIBSQL_BATCH_TIMEOUT_S } from "../src/writers/libsql.ts";
import {
  DEFAULT_BATCH_TIMEOUT_S,
  DEFAULT_CONNECT_TIMEOUT_S,
  DEFAULT_MAX_CONNECTIONS,
} from "../src/writers/server-keys.ts";
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
/** Each table of declared keys, under the heading of its section of the reference. */
const SECTIONS: Array<[string, Keys]> = [
  ["Top-level keys", TOP_KEYS],
  ["App keys", APP_KEYS],
  ["Target keys", TARGET_KEYS],
  ["Table entries", TABLE_KEYS],
  ["Tracing keys", TRACING_KEYS],
  ["Admin keys", ADMIN_KEYS],
];
const DECLARED = SECTIONS.flatMap(([section, keys]) =>
  Object.entries(keys).map(([name, key]) => [section, name, key] as const),
);
const CONFIG_KEYS = [...new Set(DECLARED.map(([, name]) => name))];
const CONNECTION_KEYS = Object.entries(builtinWriters).flatMap(([writer, spec]) =>
  spec.keys.map((k) => [writer, k.name] as const),
);

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
  test.each(SECTIONS)("%s: documents exactly the declared keys", (section, keys) => {
    expect([...rowsOf(section).keys()].sort()).toEqual(Object.keys(keys).sort());
  });

  test.each(DECLARED)("%s: documents %s with its declared type, default and meaning", (section, name, key) => {
    const row = rowsOf(section).get(name);
    expect(row, `no row for ${name} under "${section}"`).toBeDefined();
    expect(plain(row!.type)).toBe(typeWords(key));
    expect(documentedDefault(row!.default, key)).toEqual(declaredDefault(key));
    expect(plain(row!.meaning)).toStartWith(key.doc);
  });

  test.each(CONNECTION_KEYS)("documents the %s writer's connection key %s", (_writer, key) => {
    expect(reference).toContain(`\`${key}\``);
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

/** The rows of the key table under `heading` (a `##` or `###` section), by key: its cells as written. */
function rowsOf(heading: string): Map<string, { type: string; default: string; meaning: string }> {
  const rows = new Map<string, { type: string; default: string; meaning: string }>();
  let section = "";
  for (const line of reference.split("\n")) {
    if (/^#{2,3} /.test(line)) section = line.replace(/^#+ /, "");
    const row = /^\| `([a-z_]+)` \| (.*) \|$/.exec(line);
    if (section !== heading || !row) continue;
    const [type = "", value = "", meaning = ""] = row[2]!.split(" | ");
    rows.set(row[1]!, { type, default: value, meaning });
  }
  return rows;
}

/** A cell as read: links as their text, code spans as their code, `\|` as `|`. */
function plain(cell: string): string {
  return cell
    .replace(/\[([^\]]+)\]\([^)]+\)/g, "$1")
    .replaceAll("`", "")
    .replaceAll("\\|", "|")
    .trim();
}

/** What the declaration says the Default column shows: a literal, or the words of a default that is not one. */
function declaredDefault(key: Key): unknown {
  if (key.required) return "required";
  if (key.default instanceof Described) return key.default.text;
  // "No limit" is spelled 0 in TOML.
  return key.default ?? 0;
}

/** The Default cell as `key` declares its default: the value of its first code span for a literal, else its words. */
function documentedDefault(cell: string, key: Key): unknown {
  return key.required || key.default instanceof Described ? plain(cell) : codeValue(cell);
}

/** The default column of every table row documenting `key`, as values (the first code span of the cell). */
function documentedDefaults(key: string): unknown[] {
  const rows = reference.split("\n").filter((l) => l.startsWith(`| \`${key}\``));
  return rows.map((row) => {
    const cells = row.split(" | ");
    // Key tables are `| key | type | default | meaning |`; the writers' are `| key | default | meaning |`.
    return codeValue(cells.length >= 4 ? cells[2]! : cells[1]!);
  });
}

/** A cell's first code span as a value (`0o600`, `"normal"`, `true`, `500`), or the cell's text without one. */
function codeValue(cell: string): unknown {
  const code = /`([^`]+)`/.exec(cell)?.[1];
  if (code === undefined) return cell.trim();
  if (/^0o[0-7]+$/.test(code)) return Number.parseInt(code.slice(2), 8);
  if (/^".*"$/.test(code)) return code.slice(1, -1);
  if (code === "true" || code === "false") return code === "true";
  return Number.isNaN(Number(code)) ? code : Number(code);
}
