// trace_comments: each row's traceparent goes to the remote as a sqlcommenter comment on its
// statement; only a traceparent in the stored form does, coalescing still merges the rows of one
// trace context, and the server writers stop keeping every (now unique) text prepared.
import { describe, expect, test } from "bun:test";
import { OutboxSyncService } from "../src/drain/service.ts";
import { TraceComments } from "../src/drain/trace-comments.ts";
import { SQLMiddleware } from "../src/outbox/middleware.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { commentPoint, splitTraceComment, traceComment } from "../src/sql/trace-comment.ts";
import { createWriters } from "../src/config/writers.ts";
import { coalesce } from "../src/writers/coalesce.ts";
import type { Statement } from "../src/writers/writer.ts";
import type { Dialect } from "../src/vocabulary.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { FaultyWriter, oneApp } from "./support/drain-harness.ts";
import { openRemote } from "./support/remote.ts";
import { writerOf } from "./support/writers.ts";

const cleanups = cleanupsAfterEach();
const TP = (n: number) => `00-${n.toString(16).padStart(32, "a")}-${n.toString(16).padStart(16, "b")}-01`;

describe("where the comment goes", () => {
  test.each([
    ["postgres", "INSERT INTO t (a) VALUES ($1)", "INSERT INTO t (a) VALUES ($1)<C>"],
    ["postgres", "INSERT INTO t (a) VALUES ($1);", "INSERT INTO t (a) VALUES ($1)<C>;"],
    ["sqlite", "UPDATE t SET a = ? WHERE id = ? -- the note", "UPDATE t SET a = ? WHERE id = ?<C> -- the note"],
    ["mysql", "DELETE FROM t WHERE id = ? /* why */ ;  ", "DELETE FROM t WHERE id = ?<C> /* why */ ;  "],
    [
      "postgres",
      "INSERT INTO t (a) VALUES ('it''s; -- not a comment')",
      "INSERT INTO t (a) VALUES ('it''s; -- not a comment')<C>",
    ],
  ] as Array<[Dialect, string, string]>)("%s: %s", (dialect, sql, expected) => {
    const comments = new TraceComments(dialect);
    expect(comments.add(sql, TP(1))).toBe(expected.replace("<C>", traceComment(TP(1))));
  });

  test("is sqlcommenter's key='value' form", () => {
    expect(traceComment(TP(7))).toBe(` /*traceparent='${TP(7)}'*/`);
  });

  test("a traceparent not in the stored form never reaches the statement", () => {
    const comments = new TraceComments("postgres");
    const sql = "INSERT INTO t (a) VALUES ($1)";
    for (const bad of [`${TP(1).slice(0, 54)}'`, "00-x'*/ DROP TABLE t; --", TP(1).toUpperCase(), `${TP(1)}-extra`])
      expect(comments.add(sql, bad)).toBe(sql);
    expect(commentPoint(";", "postgres")).toBe(-1);
  });

  test("a commented text splits back into its text and its comment", () => {
    const sql = `INSERT INTO t (a) VALUES ($1)${traceComment(TP(3))} ON CONFLICT DO NOTHING`;
    expect(splitTraceComment(sql)).toEqual({
      base: "INSERT INTO t (a) VALUES ($1) ON CONFLICT DO NOTHING",
      comment: traceComment(TP(3)),
      fromEnd: " ON CONFLICT DO NOTHING".length,
    });
    expect(splitTraceComment("INSERT INTO t (a) VALUES ($1) /*other*/")).toBeNull();
  });
});

describe("coalescing commented statements", () => {
  const stmt = (sql: string, seq: number, args: unknown[] = [seq]): Statement => ({
    sql,
    args: args as Statement["args"],
    namespace: "t",
    seq,
  });
  const commented = (n: number) => `INSERT INTO t (a) VALUES ($1)${traceComment(TP(n))}`;

  test("rows of one trace context merge, keeping its comment; another context starts a new statement", () => {
    const batch = coalesce(
      [
        stmt(commented(1), 1),
        stmt(commented(1), 2),
        stmt(commented(1), 3),
        stmt(commented(2), 4),
        stmt(commented(2), 5),
      ],
      "postgres",
    );
    expect(batch.members).toEqual([
      [0, 1, 2],
      [3, 4],
    ]);
    expect(batch.sent.map((s) => s.sql)).toEqual([
      `INSERT INTO t (a) VALUES ($1), ($2), ($3)${traceComment(TP(1))}`,
      `INSERT INTO t (a) VALUES ($1), ($2)${traceComment(TP(2))}`,
    ]);
  });

  test("the comment stays where the drain put it, before what follows the tuple", () => {
    const sql = `INSERT INTO t (a) VALUES (?)${traceComment(TP(1))} ON CONFLICT DO NOTHING`;
    expect(coalesce([stmt(sql, 1), stmt(sql, 2)], "sqlite").sent[0]!.sql).toBe(
      `INSERT INTO t (a) VALUES (?), (?)${traceComment(TP(1))} ON CONFLICT DO NOTHING`,
    );
  });
});

describe.each(["postgres", "mysql"] as const)("delivering with trace_comments into %s", (engine) => {
  test("every row's statement carries its traceparent, a transaction's rows go merged, and no text stays prepared", async () => {
    const dir = tempDirCleanedBy(cleanups).path;
    const remote = await openRemote(engine, { cleanups });
    await remote.exec("CREATE TABLE t (id BIGINT PRIMARY KEY)");
    const config = oneApp(`${dir}/outbox`, {
      remote: { writer: engine, connection: remote.connection, tables: ["t"], traceComments: true },
    });
    const writers = await createWriters(config);
    const faulty = new FaultyWriter(writerOf(writers, "app.remote"));
    const svc = new OutboxSyncService(config, { "app.remote": faulty });
    cleanups.push(() => svc.stop(2000));
    cleanups.push(() => faulty.inner.close?.());
    const producer = new SQLMiddleware({ dbDir: `${dir}/outbox` });
    const sql = "INSERT INTO t (id) VALUES (?)";
    for (let i = 1; i <= 20; i++) producer.push("t", sql, [i], { traceparent: TP(i) });
    producer.pushMany(
      "t",
      Array.from({ length: 30 }, (_, i) => [sql, [100 + i]] as [string, number[]]),
      { traceparent: TP(99) },
    );
    // A row another program wrote with a traceparent that is not one: delivered, uncommented.
    const raw = new Outbox(`${dir}/outbox/t.db`, "t");
    raw.enqueue(sql, "[500]", "other", { traceparent: "00-x'*/ DROP TABLE t; --", tracestate: null });
    raw.close();
    let delivered = 0;
    for (let i = 0; i < 10 && delivered < 51; i++) delivered += (await svc.runOnce()).delivered;
    expect(delivered).toBe(51);
    const rows = faulty.statements.filter((s) => s.seq > 0 && !s.fence);
    expect(rows.slice(0, 20).map((s) => s.sql.endsWith(traceComment(TP(rows.indexOf(s) + 1))))).toEqual(
      Array(20).fill(true),
    );
    expect(rows.slice(20, 50).every((s) => s.sql.endsWith(traceComment(TP(99))))).toBe(true);
    expect(rows[50]!.sql).not.toContain("traceparent");
    expect(await remote.count("t")).toBe(51);
    await svc.stop();
  });
});

// Why a postgres target with trace_comments connects with prepare = false (MySQL's driver always prepares: refused there).
test("with trace_comments the writer keeps no statement prepared; without, it does", async () => {
  const remote = await openRemote("postgres", { cleanups });
  const preparedAfter = async (traceComments: boolean) => {
    const config = oneApp("/unused", {
      remote: {
        writer: "postgres",
        connection: { ...remote.connection, max_connections: 1 },
        tables: ["t"],
        traceComments,
      },
    });
    const writer = writerOf(await createWriters(config), "app.remote");
    try {
      const stmts = Array.from({ length: 5 }, (_, i) => ({
        sql: `SELECT $1::int${traceComment(TP(i + 1))}`,
        args: [i],
        namespace: "t",
        seq: i + 1,
      }));
      await writer.writeBatch(stmts);
      // The same connection (max_connections 1) answers: its prepared statements.
      const [row] = (await writer.writeBatch([
        { sql: "SELECT count(*)::int FROM pg_prepared_statements", args: [], namespace: "t", seq: 9 },
      ])) as Array<{ ok: true; rows?: unknown[][] }>;
      return row!.rows![0]![0];
    } finally {
      await writer.close?.();
    }
  };
  expect(await preparedAfter(true)).toBe(0);
  expect(await preparedAfter(false)).toBeGreaterThanOrEqual(5);
});
