import { describe, expect, test } from "bun:test";
import { ConfigError, ConfigIssuesError, defineConfig, DEFAULTS, type ConfigInput } from "../src/index.ts";
import { errorOf } from "./support/errors.ts";

const input = (app: Partial<ConfigInput["app"][string]> = {}): ConfigInput => ({
  baseDir: "/srv/app",
  app: {
    myapp: {
      dbDir: "data",
      db: { primary: { writer: "sqlite", tables: ["events"], connection: { path: "remote.db" } } },
      ...app,
    },
  },
});

describe("defineConfig", () => {
  test("applies the same defaults as outbox.toml and resolves paths against baseDir", () => {
    const config = defineConfig(input());
    const app = config.apps[0]!;
    expect(app).toMatchObject({
      name: "myapp",
      dbDir: "/srv/app/data",
      batchSize: DEFAULTS.batchSize,
      flushIntervalMs: DEFAULTS.flushInterval * 1000,
      maxAttempts: 10,
      maxPending: null,
      durability: "normal",
    });
    expect(app.targets[0]).toMatchObject({
      name: "myapp.primary",
      writer: "sqlite",
      connection: { path: "/srv/app/remote.db" },
    });
    expect(config.baseDir).toBe("/srv/app");
    expect(config.file).toBeUndefined();
  });

  test("takes camelCase overrides, with null meaning no limit", () => {
    const app = defineConfig(
      input({
        batchSize: 10,
        flushInterval: 0.01,
        tableFlushThreshold: 1,
        maxPending: null,
        maxAttempts: null,
        durability: "full",
        backoffUnitSeconds: 0.001,
      }),
    ).apps[0]!;
    expect(app).toMatchObject({
      batchSize: 10,
      flushIntervalMs: 10,
      tableFlushThreshold: 1,
      maxPending: null,
      maxAttempts: null,
      durability: "full",
      backoffUnitMs: 1,
    });
  });

  test("supports per-table overrides and the array form of injectOutboxSeq", () => {
    const config = defineConfig({
      baseDir: "/x",
      app: {
        a: {
          dbDir: "/q",
          db: {
            t: {
              writerClass: "./w.ts:W",
              injectOutboxSeq: ["b"],
              tables: ["a", "b", { name: "c", injectOutboxSeq: true, retainLogDays: 2, lanes: 1 }],
            },
          },
        },
      },
    });
    expect(config.apps[0]!.targets[0]!.tables).toEqual([
      { name: "a", injectOutboxSeq: false, retainLogDays: 30, lanes: 1 },
      { name: "b", injectOutboxSeq: true, retainLogDays: 30, lanes: 1 },
      { name: "c", injectOutboxSeq: true, retainLogDays: 2, lanes: 1 },
    ]);
    expect(config.apps[0]!.targets[0]!.writerClass).toBe("/x/w.ts:W");
  });

  test("does not interpolate ${VAR} (code reads the environment itself)", () => {
    const config = defineConfig(
      input({ db: { p: { writerClass: "pkg:W", tables: ["t"], connection: { token: "${NOT_INTERPOLATED}" } } } }),
    );
    expect(config.apps[0]!.targets[0]!.connection.token).toBe("${NOT_INTERPOLATED}");
  });

  test("reports errors with camelCase key paths and suggestions", () => {
    const error = errorOf<ConfigError>(() => defineConfig(input({ batchSzie: 3 } as never)));
    expect(error).toBeInstanceOf(ConfigError);
    expect(error.code).toBe("E_CONFIG");
    expect(error.keyPath).toBe("app.myapp.batchSzie");
    expect(error.message).toContain('(did you mean "batchSize"?)');
  });

  test("reports every problem at once", () => {
    const error = errorOf<ConfigIssuesError>(() =>
      defineConfig(input({ batchSize: 0, db: { p: { tables: [] } } } as never)),
    );
    expect(error).toBeInstanceOf(ConfigIssuesError);
    expect(error.issues.map((i) => i.keyPath)).toEqual([
      "app.myapp.batchSize",
      "app.myapp.db.p",
      "app.myapp.db.p.tables",
    ]);
  });
});
