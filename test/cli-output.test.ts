// The CLI's formatting building blocks: tables, ages, truncation, masking, JSON log lines.
import { describe, expect, test } from "bun:test";
import type { LogObject } from "consola";
import { ConfigError, OutboxError } from "../src/errors.ts";
import { jsonLine } from "../src/cli/log-format.ts";
import { parseCommandLine } from "../src/cli/command-line.ts";
import { logOptionsFrom } from "../src/cli/log-options.ts";
import { main } from "../src/cli/main.ts";
import { formatAge, oneLine, redact, renderFields, renderTable } from "../src/cli/text-output.ts";
import { BIN, run } from "./support/cli.ts";
import { openQueue, seed } from "./support/queue.ts";
import { makeTempDir } from "./support/tmp.ts";

describe("renderTable", () => {
  test("aligns columns, right-aligns numbers, upper-cases headers and leaves no trailing spaces", () => {
    const out = renderTable(
      [{ header: "name" }, { header: "depth", right: true }, { header: "note" }],
      [
        ["orders", "5", "-"],
        ["a", "12345", "long note here"],
      ],
    );
    expect(out).toBe(["NAME    DEPTH  NOTE", "orders      5  -", "a       12345  long note here"].join("\n"));
  });
});

describe("renderFields", () => {
  test("aligns values after the longest key", () => {
    expect(
      renderFields([
        ["seq", "1"],
        ["error class", "42P01"],
      ]),
    ).toBe("seq:         1\nerror class: 42P01");
  });
});

describe("formatAge", () => {
  test.each([
    [null, "-"],
    [0, "0ms"],
    [850, "850ms"],
    [42_000, "42s"],
    [312_000, "5m12s"],
    [3 * 3600_000 + 4 * 60_000, "3h04m"],
    [2 * 86_400_000 + 3 * 3600_000, "2d03h"],
  ])("%p ms is %p", (ms, text) => {
    expect(formatAge(ms)).toBe(text);
  });
});

describe("oneLine", () => {
  test("flattens whitespace and cuts with an ellipsis at the limit", () => {
    expect(oneLine("a\n  b\tc", 60)).toBe("a b c");
    expect(oneLine("x".repeat(70), 10)).toBe(`${"x".repeat(9)}…`);
    expect(oneLine(null)).toBe("-");
  });
});

describe("redact", () => {
  test("masks configured secrets and any URL password, even without a config", () => {
    expect(redact("login failed for token abcd1234", ["abcd1234"])).toBe("login failed for token ***");
    expect(redact("connect postgres://app:hunter2@db/prod failed", [])).toBe(
      "connect postgres://app:***@db/prod failed",
    );
    expect(redact("mysql://root@localhost/test", [])).toBe("mysql://root@localhost/test");
  });
});

describe("JSON log lines", () => {
  const obj = (args: unknown[], type = "info"): LogObject =>
    ({ date: new Date("2026-01-02T03:04:05.000Z"), type, level: 3, tag: "", args }) as unknown as LogObject;

  test("one object with time, level, msg and structured fields", () => {
    expect(JSON.parse(jsonLine(obj(["drain: started", { targets: 2 }])))).toEqual({
      time: "2026-01-02T03:04:05.000Z",
      level: "info",
      msg: "drain: started",
      targets: 2,
    });
  });

  test("errors keep their code and cause chain", () => {
    const err = new OutboxError("E_WRITE", "batch failed", { cause: new ConfigError("bad key", { keyPath: "app.a" }) });
    const line = JSON.parse(jsonLine(obj(["delivery failed", err], "error")));
    expect(line.level).toBe("error");
    expect(line.err).toEqual({
      name: "OutboxError",
      message: "batch failed",
      code: "E_WRITE",
      cause: { name: "ConfigError", message: "[app.a]: bad key", code: "E_CONFIG" },
    });
  });
});

describe("log options", () => {
  test("flags, wherever on the line, win over LOG_LEVEL/LOG_FORMAT, which win over the defaults", async () => {
    expect(logOptionsFrom({}, {})).toEqual({ level: "info", format: "pretty" });
    expect(logOptionsFrom({}, { LOG_LEVEL: "DEBUG", LOG_FORMAT: "json" })).toEqual({ level: "debug", format: "json" });
    const line = await parseCommandLine(main, ["--log-level=warn", "status", "--log-format", "pretty", "--json"]);
    expect(line.args).toEqual({ "log-level": "warn", "log-format": "pretty", json: true });
    expect(logOptionsFrom(line.args, { LOG_LEVEL: "debug", LOG_FORMAT: "json" })).toEqual({
      level: "warn",
      format: "pretty",
    });
  });

  test("an invalid value is a UsageError naming the accepted ones", () => {
    expect(() => logOptionsFrom({ "log-format": "xml" }, {})).toThrow(
      expect.objectContaining({ code: "E_USAGE", message: 'invalid log format "xml": expected one of pretty, json' }),
    );
  });
});

describe("output through a slow pipe", () => {
  test("a command's long output reaches a reader that is slow to read, whole (not cut at the pipe's 64 KiB)", async () => {
    const tmp = makeTempDir();
    try {
      const dbDir = tmp.file("queue");
      seed(dbDir, "t", 1_500);
      const q = openQueue(dbDir, "t");
      for (let head = q.head(); head; head = q.head()) q.deadLetter(head.seq, "skipped", "x".repeat(200));
      q.close();
      const direct = await run(["dead-letter", "list", "--db-dir", dbDir, "--json"]);
      expect(direct.code).toBe(0);
      expect(direct.stdout.length).toBeGreaterThan(256 * 1024);
      const piped = await run(["-c", `bun ${BIN} dead-letter list --db-dir ${dbDir} --json | (sleep 0.3; cat)`], {
        cmd: ["sh"],
      });
      expect(piped.code).toBe(0);
      expect(piped.stdout.length).toBe(direct.stdout.length);
      expect(JSON.parse(piped.stdout).deadLetters).toHaveLength(1_500);
    } finally {
      tmp.cleanup();
    }
  }, 20_000);
});
