import { describe, expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import { APP_KEYS } from "../src/config/build.ts";
import { TABLE_KEYS } from "../src/config/tables.ts";
import { TARGET_KEYS } from "../src/config/target.ts";
import { parseConfigToml } from "../src/index.ts";

const root = path.resolve(import.meta.dir, "..");
const example = fs.readFileSync(path.join(root, "etc/outbox.example.toml"), "utf8");
const docs = fs.readFileSync(path.join(root, "README.md"), "utf8");
const ENV = {
  TURSO_URL: "libsql://db.turso.io",
  TURSO_AUTH_TOKEN: "tok",
  WAREHOUSE_DATABASE_URL: "postgres://u:p@h/db",
  BILLING_DB_HOST: "127.0.0.1",
  BILLING_DB_PASSWORD: "pw",
};

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

  test.each([...APP_KEYS, ...TARGET_KEYS, ...TABLE_KEYS])("mentions %s, and so does README.md", (key) => {
    expect(example).toMatch(new RegExp(`\\b${key}\\b`));
    expect(docs).toContain(`\`${key}\``);
  });
});
