// The libsql writer over the client's Hrana-over-HTTP transport (what Turso's libsql:// and https://
// URLs use), against test/support/hrana-server.ts: the protocol re-implemented, every statement
// executed by SQLite on a real file. The conformance suite runs the shared scenarios; this file
// covers what only a remote target has: auth, HTTP failures, batons, the URL forms.
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { OutboxSyncService } from "../src/drain/service.ts";
import { WriteError } from "../src/errors.ts";
import { SQLMiddleware } from "../src/outbox/middleware.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { createWriter } from "../src/writers/registry.ts";
import type { OutboxWriter, Statement } from "../src/writers/writer.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { memoryLogger, oneApp } from "./support/drain-harness.ts";
import { type HranaServer, startHranaServer } from "./support/hrana-server.ts";
import { makeTempDir } from "./support/tmp.ts";
import { waitFor } from "./support/wait.ts";

const TOKEN = "tok-Secret-123";
const cleanups = cleanupsAfterEach();

/** A fresh SQLite file with table t, a Hrana server in front of it, and a direct reader. */
function setup(streamExpiryMs?: number): {
  server: HranaServer;
  file: string;
  ids(): number[];
  writer(connection?: Record<string, unknown>): OutboxWriter;
} {
  const dir = makeTempDir();
  const file = dir.file("remote.db");
  const db = new Database(file, { create: true });
  db.run("PRAGMA journal_mode = WAL");
  db.run("CREATE TABLE t (id INTEGER PRIMARY KEY, note TEXT, loose, bytes BLOB)");
  db.close();
  const server = startHranaServer({ file, token: TOKEN, streamExpiryMs });
  cleanups.push(
    () => dir.cleanup(),
    () => server.stop(),
  );
  return {
    server,
    file,
    ids: () => {
      const r = new Database(file, { readonly: true });
      try {
        return r
          .query("SELECT id FROM t ORDER BY id")
          .values()
          .map((row) => Number(row[0]));
      } finally {
        r.close();
      }
    },
    writer: (connection = { url: server.url, auth_token: TOKEN }) => {
      const w = createWriter("libsql", connection);
      cleanups.push(() => w.close?.());
      return w;
    },
  };
}

const insert = (id: number): Statement => ({
  sql: "INSERT INTO t (id) VALUES (?)",
  args: [id],
  namespace: "t",
  seq: id,
});

async function writeError(promise: Promise<unknown>): Promise<WriteError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(WriteError);
  return error as WriteError;
}

const fullText = (e: Error) =>
  `${e.message} ${String(e.cause ?? "")} ${(e.cause as Error | undefined)?.stack ?? ""} ${e.stack}`;

describe("libsql writer over HTTP (Hrana)", () => {
  test("a wrong auth token is an outage: WriteError (not a row fault), without the token, nothing lands", async () => {
    const s = setup();
    const wrong = "wrong-Token-do-not-log";
    const error = await writeError(s.writer({ url: s.server.url, auth_token: wrong }).writeBatch([insert(1)]));
    expect(error.code).toBe("E_WRITE");
    expect(error.message).toContain("401");
    expect(fullText(error)).not.toContain(wrong);
    expect(s.ids()).toEqual([]);
  });

  test("a token given in the URL (?authToken=) is sent and masked in errors", async () => {
    const s = setup();
    expect(await s.writer({ url: `${s.server.url}?authToken=${TOKEN}` }).writeBatch([insert(1)])).toEqual([
      { ok: true, rowsAffected: 1 },
    ]);
    const wrong = "url-Token-do-not-log";
    const error = await writeError(s.writer({ url: `${s.server.url}?authToken=${wrong}` }).writeBatch([insert(2)]));
    expect(fullText(error)).not.toContain(wrong);
    expect(s.ids()).toEqual([1]);
  });

  test("a libsql:// URL with ?tls=0 speaks the same protocol (the form Turso URLs take, minus TLS)", async () => {
    const s = setup();
    const writer = s.writer({ url: `libsql://127.0.0.1:${s.server.port}?tls=0`, auth_token: TOKEN });
    expect(await writer.writeBatch([insert(1), insert(2)])).toEqual([
      { ok: true, rowsAffected: 1 },
      { ok: true, rowsAffected: 1 },
    ]);
    expect(s.ids()).toEqual([1, 2]);
  });

  test("a stopped server is an outage: WriteError, nothing lands", async () => {
    const s = setup();
    const writer = s.writer();
    expect(await writer.writeBatch([insert(1)])).toEqual([{ ok: true, rowsAffected: 1 }]);
    await s.server.stop();
    const error = await writeError(writer.writeBatch([insert(2)]));
    expect(fullText(error)).not.toContain(TOKEN);
    expect(s.ids()).toEqual([1]);
  });

  test("HTTP 503 is an outage, and the same writer delivers once the server answers again", async () => {
    const s = setup();
    const writer = s.writer();
    s.server.refuse(503);
    const error = await writeError(writer.writeBatch([insert(1)]));
    expect(error.message).toContain("503");
    s.server.refuse(null);
    expect(await writer.writeBatch([insert(1)])).toEqual([{ ok: true, rowsAffected: 1 }]);
    expect(s.ids()).toEqual([1]);
  });

  test("a batch the server holds past batch_timeout throws WriteError; released late, it commits (redelivery absorbs it)", async () => {
    const s = setup();
    const writer = s.writer({ url: s.server.url, auth_token: TOKEN, batch_timeout: 0.3 });
    const release = s.server.hold();
    const error = await writeError(writer.writeBatch([insert(1)]));
    expect(error.message).toContain("timed out");
    expect(s.ids()).toEqual([]);
    release();
    // The client cannot cancel the request in flight: it commits when the server gets to it.
    expect(await writer.writeBatch([insert(2)])).toEqual([{ ok: true, rowsAffected: 1 }]);
    expect(s.ids()).toEqual([1, 2]);
  });

  test("a wrong argument count is a row fault with sqld's code; a text without a statement is refused before it is sent", async () => {
    const s = setup();
    const results = await s.writer().writeBatch([
      { ...insert(1), args: [1, 2] },
      { sql: "-- nothing to run", args: [], namespace: "u", seq: 1 },
      { ...insert(3), namespace: "v" },
    ]);
    expect(results.map((r) => (r.ok ? "ok" : (r as { errorClass?: string }).errorClass))).toEqual([
      "ARGS_INVALID",
      "E_UNSUPPORTED_STATEMENT",
      "ok",
    ]);
    expect(s.ids()).toEqual([3]);
  });

  test("a failed batch rolls back on the server: no stream, transaction or lock is left behind", async () => {
    const s = setup();
    const writer = s.writer();
    const results = await writer.writeBatch([insert(1), insert(1), { ...insert(2), namespace: "u" }]);
    expect(results.map((r) => r.ok)).toEqual([false, false, true]);
    expect(s.server.openStreams).toBe(0);
    // Another connection can write at once: the failed pass's transaction was rolled back.
    const db = new Database(s.file);
    db.run("PRAGMA busy_timeout = 0");
    db.run("INSERT INTO t (id) VALUES (3)");
    db.close();
    expect(s.ids()).toEqual([2, 3]);
  });
});

test("the drain treats a revoked token as a misconfigured target: nothing charged or dead-lettered, said once; with a valid token again every row lands once", async () => {
  const s = setup();
  const dir = tempDirCleanedBy(cleanups);
  const connection = { url: s.server.url, auth_token: TOKEN };
  const config = oneApp(
    dir.file("outbox"),
    { r: { writer: "libsql", connection, tables: ["t"] } },
    { maxAttempts: 1, backoffUnitSeconds: 0.01 },
  );
  const log = memoryLogger();
  const svc = new OutboxSyncService(config, { "app.r": createWriter("libsql", connection) }, { logger: log });
  cleanups.push(() => svc.stop(2000));
  await svc.runOnce(); // setup: the ledger
  const producer = new SQLMiddleware({ dbDir: dir.file("outbox") });
  for (let id = 1; id <= 5; id++) producer.push("t", "INSERT INTO t (id, note) VALUES (?, ?)", [id, "x"]);
  s.server.setToken("rotated-token");
  for (let i = 0; i < 3; i++) expect((await svc.runOnce()).outages).toEqual(["app.r"]);
  const queue = new Outbox(dir.file("outbox/t.db"), "t");
  cleanups.push(() => queue.close());
  expect(queue.pendingCount()).toBe(5);
  expect(queue.head()?.attempts ?? 0).toBe(0); // max_attempts = 1: one charged attempt would dead-letter it
  expect(queue.deadCount()).toBe(0);
  expect(log.has(/401/)).toBe(true);
  expect(svc.targets()[0]!.reachability.state).toBe("misconfigured");
  expect(log.lines.filter((l) => /^error .*is misconfigured/.test(l))).toHaveLength(1); // not once per retry
  expect(log.lines.join("\n")).not.toContain(TOKEN);
  s.server.setToken(TOKEN);
  await waitFor(async () => (await svc.runOnce(), svc.totalPending() === 0), "delivery after the token is valid again");
  expect(s.ids()).toEqual([1, 2, 3, 4, 5]);
  expect(queue.deadCount()).toBe(0);
});

describe.each(["file", "http"])("libsql writer (%s) argument and result types", (mode) => {
  function open() {
    const s = setup();
    return { s, writer: mode === "http" ? s.writer() : s.writer({ url: `file:${s.file}` }) };
  }

  test("an integer argument lands as INTEGER in TEXT and untyped columns, as with the sqlite writer (not REAL 42.0)", async () => {
    const { s, writer } = open();
    await writer.writeBatch([
      { sql: "INSERT INTO t (id, note, loose) VALUES (?, ?, ?)", args: [1, 42, 42], namespace: "t", seq: 1 },
    ]);
    const db = new Database(s.file, { readonly: true });
    expect(db.query("SELECT note, typeof(note), loose, typeof(loose) FROM t").values()).toEqual([
      ["42", "text", 42, "integer"],
    ]);
    db.close();
    // Over HTTP, what sqld would store as REAL is a `float` argument with an integral value.
    expect(s.server.integralFloatArgs).toBe(0);
  });

  test("an integer outside the 64-bit range or a non-finite number is that row's fault (ERR_OUT_OF_RANGE), not an outage", async () => {
    const { s, writer } = open();
    const results = await writer.writeBatch([
      insert(1),
      { ...insert(2), args: [2n ** 70n] },
      { ...insert(3), namespace: "u" },
      { ...insert(4), args: [Number.NaN] },
      { ...insert(5), namespace: "v", args: [Number.POSITIVE_INFINITY] },
    ]);
    expect(
      results.map((r) => (r.ok ? "ok" : r.skipped ? "skipped" : (r as { errorClass?: string }).errorClass)),
    ).toEqual(["skipped", "ERR_OUT_OF_RANGE", "ok", "skipped", "ERR_OUT_OF_RANGE"]);
    expect(s.ids()).toEqual([3]);
  });

  test("a float argument stays REAL and a SELECT returns BLOBs as Uint8Array", async () => {
    const { writer } = open();
    const bytes = new Uint8Array([0, 255, 7]);
    await writer.writeBatch([
      { sql: "INSERT INTO t (id, loose, bytes) VALUES (?, ?, ?)", args: [1, 2.5, bytes], namespace: "t", seq: 1 },
    ]);
    const [result] = await writer.writeBatch([
      { sql: "SELECT loose, typeof(loose), bytes FROM t", args: [], namespace: "t", seq: 0 },
    ]);
    expect(result).toEqual({ ok: true, rows: [[2.5, "real", bytes]] });
  });
});

describe("hrana test server (protocol fidelity the writer relies on)", () => {
  test("affected_row_count counts the statement's own rows, not its triggers', and is 0 for DDL and SELECT", async () => {
    const s = setup();
    const db = new Database(s.file);
    db.run("CREATE TABLE audit (id INTEGER)");
    db.run(
      "CREATE TRIGGER t_audit AFTER INSERT ON t BEGIN INSERT INTO audit VALUES (NEW.id); INSERT INTO audit VALUES (NEW.id); END",
    );
    db.close();
    const results = await s
      .writer()
      .writeBatch([
        insert(1),
        { sql: "UPDATE t SET note = 'x' WHERE id > 100", args: [], namespace: "t", seq: 2 },
        { sql: "CREATE TABLE later (id INTEGER)", args: [], namespace: "later", seq: 1 },
        { sql: "SELECT count(*) FROM audit", args: [], namespace: "audit", seq: 1 },
      ]);
    expect(results).toEqual([
      { ok: true, rowsAffected: 1 },
      { ok: true, rowsAffected: 0 },
      { ok: true, rowsAffected: 0 },
      { ok: true, rows: [[2n]] },
    ]);
  });

  test("an interactive transaction keeps its stream across requests by baton; a used baton is refused", async () => {
    const s = setup();
    const { createClient } = await import("@libsql/client");
    const client = createClient({ url: s.server.url, authToken: TOKEN });
    cleanups.push(() => client.close());
    const tx = await client.transaction("write");
    await tx.execute("INSERT INTO t (id) VALUES (1)");
    expect(s.server.openStreams).toBe(1);
    await tx.execute("INSERT INTO t (id) VALUES (2)");
    expect(s.ids()).toEqual([]); // not committed yet: another connection sees nothing
    await tx.commit();
    expect(s.ids()).toEqual([1, 2]);
    expect(s.server.openStreams).toBe(0);

    const post = (body: unknown) =>
      fetch(`${s.server.url}/v2/pipeline`, {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}` },
        body: JSON.stringify(body),
      });
    const first = (await (await post({ requests: [{ type: "execute", stmt: { sql: "SELECT 1" } }] })).json()) as {
      baton: string;
    };
    expect(first.baton).toBeString();
    expect((await post({ baton: first.baton, requests: [{ type: "close" }] })).status).toBe(200);
    expect((await post({ baton: first.baton, requests: [{ type: "close" }] })).status).toBe(400);
  });

  test("a stream left idle past its expiry is closed: its transaction rolls back, its lock is released, its baton gets STREAM_EXPIRED", async () => {
    const s = setup(100);
    const { createClient } = await import("@libsql/client");
    const client = createClient({ url: s.server.url, authToken: TOKEN });
    cleanups.push(() => client.close());
    const tx = await client.transaction("write");
    await tx.execute("INSERT INTO t (id) VALUES (1)");
    expect(s.server.openStreams).toBe(1);
    await waitFor(() => s.server.openStreams === 0, "the idle stream to expire");
    await expect(tx.execute("INSERT INTO t (id) VALUES (2)")).rejects.toMatchObject({ code: "STREAM_EXPIRED" });
    const db = new Database(s.file);
    db.run("PRAGMA busy_timeout = 0");
    db.run("INSERT INTO t (id) VALUES (3)");
    db.close();
    expect(s.ids()).toEqual([3]);
  });
});
