// The admin API (/api/v1) served in process over real queue files: every endpoint, the `expect`
// guard, and the hostile requests that must get a 4xx and change nothing. The page and the
// compiled binary are driven by a real browser in test/admin-console.test.ts.
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import client from "prom-client";
import { collectStatus, collectTenantStatus } from "../src/cli/status-report.ts";
import { parseConfigDocument, parseConfigToml } from "../src/config/parse.ts";
import { ConfigError } from "../src/errors.ts";
import type { Logger } from "../src/logger.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { layoutOf } from "../src/config/layout.ts";
import type { AdminApp } from "../src/ops/admin/locations.ts";
import { MAX_BODY_BYTES } from "../src/ops/admin/requests.ts";
import { serveAdmin, type AdminServer } from "../src/ops/admin/server.ts";
import { BIN, cleanEnv, run } from "./support/cli.ts";
import { hashTree } from "./support/dir-hash.ts";
import { errorOf } from "./support/errors.ts";
import { drainSide } from "./support/queue.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";

const READ = "read-token-0123456789abcdef";
const WRITE = "write-token-0123456789abcdef";
/** A credential that reaches an error message (a driver quoting its DSN): never in an answer. */
const SECRET = "hunter2-the-db-password";

let tmp: TempDir;
let server: AdminServer;
let outboxes: Outbox[];
let lines: string[];
let kicks: number;
let registry: client.Registry;

const logger: Logger = {
  debug: (m) => lines.push(m),
  info: (m) => lines.push(m),
  warn: (m) => lines.push(m),
  error: (m) => lines.push(m),
};

/** Serves the admin API over the apps `shop` (a db_dir) and `bill` (a db_file), with `tokens`. */
function start(tokens: { readToken?: string | null; writeToken?: string | null } = {}): AdminServer {
  const apps: AdminApp[] = layoutOf({
    apps: [
      { name: "shop", dbDir: tmp.file("shop"), dbFile: null, maxPending: null },
      { name: "bill", dbDir: tmp.path, dbFile: tmp.file("bill.sqlite"), maxPending: null },
    ] as never,
  });
  const locations = {
    dirs: apps.map((a) => ({ app: a.name, dbDir: a.dbDir, dbFile: a.dbFile, maxPending: null })),
    secrets: [SECRET],
    configFile: null,
  };
  server = serveAdmin({
    address: { hostname: "127.0.0.1", port: 0 },
    tokens: {
      readToken: tokens.readToken ?? null,
      writeToken: tokens.writeToken === undefined ? WRITE : tokens.writeToken,
    },
    apps,
    status: () => collectStatus(locations),
    tenant: (tenant) => collectTenantStatus(locations, tenant),
    retryNow: () => {
      kicks += 1;
    },
    logger,
    mask: (text) => text.replaceAll(SECRET, "***"),
    version: "9.9.9",
    registry,
  });
  return server;
}

beforeEach(() => {
  tmp = makeTempDir("sqloutbox-admin-");
  fs.mkdirSync(tmp.file("shop"));
  outboxes = [];
  lines = [];
  kicks = 0;
  registry = new client.Registry();
});
afterEach(async () => {
  await server?.stop();
  for (const ob of outboxes) ob.close();
  tmp.cleanup();
});

function queue(table: string, app: "shop" | "bill" = "shop"): Outbox {
  const ob =
    app === "shop" ? new Outbox(tmp.file(`shop/${table}.db`), table) : new Outbox(tmp.file("bill.sqlite"), table);
  outboxes.push(ob);
  return ob;
}

/** `count` rows of `ob`, each dead-lettered at once (reason skipped, or `error` as max_attempts): their seqs. */
function letters(ob: Outbox, count: number, error?: string): number[] {
  return Array.from({ length: count }, (_, i) => {
    const seq = ob.enqueue(`INSERT INTO ${ob.namespace} (id, note) VALUES (?, ?)`, JSON.stringify([i, "x"]));
    if (error === undefined) ob.skipHead(seq);
    else ob.deadLetter(seq, "max_attempts", error, "23502");
    return seq;
  });
}

/** What the queue files hold (their -shm is the readers' shared index, which a read rewrites). */
function contents(dir: string): Record<string, string> {
  return Object.fromEntries(Object.entries(hashTree(dir)).filter(([file]) => !file.endsWith("-shm")));
}

async function call(
  method: string,
  route: string,
  options: { token?: string; body?: unknown; raw?: string; headers?: Record<string, string> } = {},
  // biome-ignore lint/suspicious/noExplicitAny: the tests read answers' fields as the JSON they are
): Promise<{ status: number; body: any; text: string; headers: Headers }> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  if (options.body !== undefined || options.raw !== undefined) headers["content-type"] ??= "application/json";
  const res = await fetch(`${server.url}${route}`, {
    method,
    headers,
    body: options.raw ?? (options.body === undefined ? undefined : JSON.stringify(options.body)),
  });
  const text = await res.text();
  let body: unknown = null;
  try {
    body = JSON.parse(text);
  } catch {}
  return { status: res.status, body, text, headers: res.headers };
}

describe("reading", () => {
  test("a loopback caller reads without a token when no read token is set, and may not act", async () => {
    start();
    expect((await call("GET", "/api/v1/access")).body).toEqual({
      who: "loopback",
      access: "read",
      can_act: false,
      write_configured: true,
      version: "9.9.9",
    });
    expect((await call("GET", "/api/v1/access", { token: WRITE })).body).toMatchObject({
      who: "write token",
      can_act: true,
    });
  });

  test("status is the status --json document, with credentials masked", async () => {
    const ob = queue("orders");
    letters(ob, 1, `connect to postgres://u:${SECRET}@db failed`);
    ob.enqueue("INSERT INTO orders (id) VALUES (?)", "[1]");
    start();
    const r = await call("GET", "/api/v1/status");
    expect(r.status).toBe(200);
    expect(r.headers.get("cache-control")).toBe("no-store");
    expect(r.body.totals).toMatchObject({ depth: 1, deadLetters: 1 });
    expect(r.body.namespaces.map((n: { app: string; namespace: string }) => `${n.app}/${n.namespace}`)).toEqual([
      "shop/orders",
    ]);
    expect((await call("GET", "/api/v1/dead-letters")).text).not.toContain(SECRET);
  });

  test("lists dead letters newest first, paged by cursor, with the total the filter selects", async () => {
    const orders = queue("orders");
    const seqs = letters(orders, 5);
    letters(queue("payments"), 2, "23502: null value in column note");
    letters(queue("invoices", "bill"), 1);
    start();
    const all = await call("GET", "/api/v1/dead-letters?limit=3");
    expect(all.body.total).toBe(8);
    expect(all.body.letters).toHaveLength(3);
    const rest = await call("GET", `/api/v1/dead-letters?limit=10&cursor=${all.body.next_cursor}`);
    expect(rest.body.next_cursor).toBeNull();
    const ids = [...all.body.letters, ...rest.body.letters].map((l: { id: string }) => l.id);
    expect(new Set(ids).size).toBe(8);
    expect(ids).toContain("bill/invoices/1");
    const shopOrders = await call("GET", "/api/v1/dead-letters?app=shop&namespace=orders");
    expect(shopOrders.body.letters.map((l: { seq: number }) => l.seq)).toEqual([...seqs].reverse());
    expect((await call("GET", "/api/v1/dead-letters?error=NULL%20VALUE")).body.total).toBe(2);
    expect((await call("GET", "/api/v1/dead-letters?reason=skipped&app=shop")).body.total).toBe(5);
    const later = new Date(Date.now() + 60_000).toISOString();
    expect((await call("GET", `/api/v1/dead-letters?since=${later}`)).body.total).toBe(0);
    expect((await call("GET", `/api/v1/dead-letters?until=${later}`)).body.total).toBe(8);
    // By key: the letters pushed with it (none here had one; one more does).
    const keyed = orders.enqueue("INSERT INTO orders (id) VALUES (?)", "[9]", "", {
      traceparent: null,
      tracestate: null,
      key: "customer-7",
    });
    orders.skipHead(keyed);
    expect((await call("GET", "/api/v1/dead-letters?key=customer-7")).body.total).toBe(1);
    expect((await call("GET", "/api/v1/dead-letters?key=customer-8")).body.total).toBe(0);
    const letter = shopOrders.body.letters[0];
    expect(letter).toMatchObject({
      id: `shop/orders/${seqs[4]}`,
      state: "dead",
      reason: "skipped",
      sql: "INSERT INTO orders (id, note) VALUES (?, ?)",
      args: [4, "x"],
    });
  });

  test("shows one letter in full with every letter of its group", async () => {
    const ob = queue("orders");
    const [first] = ob.enqueueBatch([
      { tag: "INSERT INTO orders (id) VALUES (?)", payload: "[1]" },
      { tag: "INSERT INTO orders (id) VALUES (?)", payload: "[2]" },
    ]);
    ob.skipHead(first!);
    start();
    const r = await call("GET", `/api/v1/dead-letters/shop/orders/${first! + 1}`);
    expect(r.status).toBe(200);
    expect(r.body.letter).toMatchObject({ seq: first! + 1, group: first, args: [2] });
    expect(r.body.group.map((l: { id: string }) => l.id)).toEqual([
      `shop/orders/${first}`,
      `shop/orders/${first! + 1}`,
    ]);
    expect((await call("GET", "/api/v1/dead-letters/shop/orders/999")).status).toBe(404);
    expect((await call("GET", "/api/v1/dead-letters/nope/orders/1")).status).toBe(404);
  });
});

describe("acting on dead letters", () => {
  test("replays letters by id once: a second replay leaves them as they are", async () => {
    const ob = queue("orders");
    const seqs = letters(ob, 2);
    start();
    const ids = seqs.map((s) => `shop/orders/${s}`);
    const r = await call("POST", "/api/v1/dead-letters/replay", { token: WRITE, body: { ids } });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ action: "replay", dry_run: false, total: 2, unchanged: [] });
    expect(r.body.done.map((d: { id: string }) => d.id)).toEqual(ids);
    expect(ob.fetchUnsynced(10).map((row) => row.payload)).toEqual(['[0,"x"]', '[1,"x"]']);
    const again = await call("POST", "/api/v1/dead-letters/replay", { token: WRITE, body: { ids } });
    expect(again.body.done).toEqual([]);
    expect(again.body.unchanged.map((u: { state: string }) => u.state)).toEqual(["replayed", "replayed"]);
    expect(lines.filter((l) => l.startsWith("admin: replay by write token: 2 id(s)"))).toHaveLength(2);
    const text = await registry.metrics();
    expect(text).toContain('sqloutbox_admin_actions_total{action="replay",outcome="done"} 2');
    expect(text).toContain('sqloutbox_admin_rows_total{action="replay"} 2');
  });

  test("a letter the remote may have applied is refused, saying why, and listed with its state; force replays one in doubt, never one applied", async () => {
    const ob = queue("orders");
    const seqs = Array.from({ length: 3 }, (_, i) => ob.enqueue("INSERT INTO orders (id) VALUES (?)", `[${i}]`));
    drainSide(ob).recordAttempt(seqs[0]!, new Date(), seqs[1]!, seqs.slice(0, 2)); // sent: a batch may carry them
    for (const seq of seqs) ob.skipHead(seq);
    drainSide(ob).settleLetters([seqs[1]!], "applied");
    start();
    const listed = await call("GET", "/api/v1/dead-letters?namespace=orders");
    expect(listed.body.letters.map((l: { seq: number; remote: string }) => [l.seq, l.remote])).toEqual([
      [seqs[2], "not applied"],
      [seqs[1], "applied"],
      [seqs[0], "in doubt"],
    ]);
    const ids = seqs.map((s) => `shop/orders/${s}`);
    const r = await call("POST", "/api/v1/dead-letters/replay", { token: WRITE, body: { ids } });
    expect(r.status).toBe(200);
    expect(r.body.done.map((d: { id: string }) => d.id)).toEqual([ids[2]]);
    expect(r.body.refused_letters).toMatchObject([
      { id: ids[0], remote: "in doubt", message: expect.stringContaining("--force") },
      { id: ids[1], remote: "applied", message: expect.stringContaining("discard it") },
    ]);
    expect(lines).toContainEqual(expect.stringContaining("3 selected, 1 replayed, 2 refused (in doubt or applied)"));
    const forced = await call("POST", "/api/v1/dead-letters/replay", { token: WRITE, body: { ids, force: true } });
    expect(forced.body.done.map((d: { id: string }) => d.id)).toEqual([ids[0]]);
    expect(forced.body.refused_letters.map((l: { id: string }) => l.id)).toEqual([ids[1]]);
    expect(ob.getDead(seqs[1]!)!.replayedAt).toBeNull();
  });

  test("replays what a filter selects when it is exactly the count expected, across files", async () => {
    const orders = queue("orders");
    letters(orders, 2);
    letters(queue("payments"), 1);
    letters(queue("invoices", "bill"), 1);
    start();
    const r = await call("POST", "/api/v1/dead-letters/replay", {
      token: WRITE,
      body: { filter: { reason: "skipped" }, expect: 4 },
    });
    expect(r.status).toBe(200);
    expect(r.body.done).toHaveLength(4);
    expect(orders.deadCount()).toBe(0);
    expect(orders.pendingCount()).toBe(2);
  });

  test("a letter added between the count and the replay: 409 and nothing is replayed", async () => {
    const ob = queue("orders");
    letters(ob, 2);
    start();
    const seen = (await call("GET", "/api/v1/dead-letters?namespace=orders")).body.total;
    letters(ob, 1); // the drain dead-letters another while the operator reads
    const before = contents(tmp.file("shop"));
    const r = await call("POST", "/api/v1/dead-letters/replay", {
      token: WRITE,
      body: { filter: { namespace: "orders" }, expect: seen },
    });
    expect(r.status).toBe(409);
    expect(r.body.error).toMatchObject({ code: "E_CONFLICT" });
    expect(r.body.error.message).toContain("holds 3 letter(s) now, not the 2 expected");
    expect(r.body.report.done).toEqual([]);
    expect(contents(tmp.file("shop"))).toEqual(before);
    expect(ob.pendingCount()).toBe(0);
    expect(lines.some((l) => l.includes("refused"))).toBe(true);
    expect(await registry.metrics()).toContain('sqloutbox_admin_actions_total{action="replay",outcome="refused"} 1');
  });

  test("a dry run says what it would do and changes nothing", async () => {
    const ob = queue("orders");
    const seqs = letters(ob, 2);
    start();
    const before = contents(tmp.file("shop"));
    const r = await call("POST", "/api/v1/dead-letters/discard", {
      token: WRITE,
      body: { filter: {}, expect: 2, dry_run: true },
    });
    expect(r.body).toMatchObject({ action: "discard", dry_run: true, total: 2, expect: 2 });
    expect(r.body.done.map((d: { id: string }) => d.id)).toEqual(seqs.map((s) => `shop/orders/${s}`));
    expect(contents(tmp.file("shop"))).toEqual(before);
  });

  test("a dry run counts each letter's group, as the real run does", async () => {
    const ob = queue("orders");
    const [first] = ob.enqueueBatch(
      [1, 2, 3].map((id) => ({ tag: "INSERT INTO orders (id) VALUES (?)", payload: `[${id}]` })),
    );
    ob.skipHead(first!);
    start();
    const ids = [`shop/orders/${first}`];
    const dry = await call("POST", "/api/v1/dead-letters/replay", { token: WRITE, body: { ids, dry_run: true } });
    const real = await call("POST", "/api/v1/dead-letters/replay", { token: WRITE, body: { ids } });
    const done = (r: { body: { done: Array<{ id: string }> } }) => r.body.done.map((d) => d.id);
    expect(done(dry)).toEqual([0, 1, 2].map((i) => `shop/orders/${first! + i}`));
    expect(done(real)).toEqual(done(dry));
    expect(real.body.unchanged).toEqual([]);
  });

  test("discards letters: no longer dead letters, listed as discarded, never replayed", async () => {
    const ob = queue("orders");
    const [a, b] = letters(ob, 2);
    start();
    const r = await call("POST", "/api/v1/dead-letters/discard", { token: WRITE, body: { ids: [`shop/orders/${a}`] } });
    expect(r.body.done).toEqual([{ id: `shop/orders/${a}` }]);
    expect(ob.deadCount()).toBe(1);
    expect(ob.pendingCount()).toBe(0);
    const listed = await call("GET", "/api/v1/dead-letters?state=discarded");
    expect(listed.body.letters.map((l: { seq: number; state: string }) => [l.seq, l.state])).toEqual([
      [a, "discarded"],
    ]);
    expect((await call("GET", "/api/v1/dead-letters")).body.letters.map((l: { seq: number }) => l.seq)).toEqual([b]);
    const again = await call("POST", "/api/v1/dead-letters/replay", {
      token: WRITE,
      body: { ids: [`shop/orders/${a}`] },
    });
    expect(again.body.unchanged).toEqual([{ id: `shop/orders/${a}`, state: "discarded", replayed_as_seq: null }]);
    const byFilter = await call("POST", "/api/v1/dead-letters/discard", {
      token: WRITE,
      body: { filter: { app: "shop" }, expect: 1 },
    });
    expect(byFilter.body.done).toEqual([{ id: `shop/orders/${b}` }]);
    expect(ob.deadCount()).toBe(0);
    expect(await registry.metrics()).toContain('sqloutbox_admin_rows_total{action="discard"} 2');
  });

  test("v1's earlier words still work: POST /dead-letters/skip discards, ?state=skipped lists the discarded", async () => {
    const ob = queue("orders");
    const [a] = letters(ob, 2);
    start();
    const r = await call("POST", "/api/v1/dead-letters/skip", { token: WRITE, body: { ids: [`shop/orders/${a}`] } });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ action: "discard", done: [{ id: `shop/orders/${a}` }] });
    expect(ob.getDead(a!)).toMatchObject({ replayedAsSeq: null, replayedAt: expect.any(String) });
    expect(
      (await call("GET", "/api/v1/dead-letters?state=skipped")).body.letters.map((l: { seq: number }) => l.seq),
    ).toEqual([a]);
  });

  test("an id that is no dead letter: 404 and nothing changes", async () => {
    const ob = queue("orders");
    const [seq] = letters(ob, 1);
    start();
    const r = await call("POST", "/api/v1/dead-letters/replay", {
      token: WRITE,
      body: { ids: [`shop/orders/${seq}`, "shop/orders/77"] },
    });
    expect(r.status).toBe(404);
    expect(ob.deadCount()).toBe(1);
  });
});

describe("acting on tables", () => {
  test("retry ends a backed-off head's backoff, in place", async () => {
    const ob = queue("orders");
    const seq = ob.enqueue("INSERT INTO orders (id) VALUES (?)", "[1]");
    drainSide(ob).recordAttempt(seq);
    drainSide(ob).recordFailure(seq, "23503: foreign key", "23503", new Date(Date.now() + 3_600_000));
    start();
    const r = await call("POST", "/api/v1/tables/shop/orders/retry", { token: WRITE, body: {} });
    expect(r.status).toBe(200);
    expect(r.body.head).toMatchObject({ id: `shop/orders/${seq}`, seq, attempts: 1 });
    expect(ob.health().nextAttemptAt).toBeNull();
    const none = await call("POST", "/api/v1/tables/shop/orders/retry", { token: WRITE });
    expect(none.body.head).toBeNull();
    // Per lane: the key's head only. Another key's backoff stays.
    const k1 = ob.enqueue("INSERT INTO orders (id) VALUES (?)", "[2]", "", {
      traceparent: null,
      tracestate: null,
      key: "k1",
    });
    const k2 = ob.enqueue("INSERT INTO orders (id) VALUES (?)", "[3]", "", {
      traceparent: null,
      tracestate: null,
      key: "k2",
    });
    for (const s of [k1, k2]) drainSide(ob).recordFailure(s, "boom", "E", new Date(Date.now() + 3_600_000));
    const byKey = await call("POST", "/api/v1/tables/shop/orders/retry", { token: WRITE, body: { key: "k1" } });
    expect(byKey.status).toBe(200);
    expect(byKey.body.head).toMatchObject({ seq: k1 });
    expect(ob.fetchUnsynced(10).map((r) => [r.seq, r.nextAttemptAt === null])).toEqual([
      [seq, true],
      [k1, true],
      [k2, false],
    ]);
    expect((await call("POST", "/api/v1/tables/shop/orders/retry", { token: WRITE, body: { key: 1.5 } })).status).toBe(
      400,
    );
    expect((await call("POST", "/api/v1/tables/shop/nothing/retry", { token: WRITE })).status).toBe(404);
  });

  test("skip moves the head the operator saw to the dead letters; another seq is a 409", async () => {
    const ob = queue("orders");
    const head = ob.enqueue("INSERT INTO orders (id) VALUES (?)", "[1]");
    ob.enqueue("INSERT INTO orders (id) VALUES (?)", "[2]");
    start();
    const wrong = await call("POST", "/api/v1/tables/shop/orders/skip", { token: WRITE, body: { seq: head + 1 } });
    expect(wrong.status).toBe(409);
    expect(ob.pendingCount()).toBe(2);
    const r = await call("POST", "/api/v1/tables/shop/orders/skip", { token: WRITE, body: { seq: head } });
    expect(r.body).toEqual({ action: "skip", app: "shop", namespace: "orders", seq: head, moved: [head], also_in: [] });
    expect(ob.deadCount()).toBe(1);
    expect(await registry.metrics()).toContain('sqloutbox_admin_actions_total{action="skip_head",outcome="refused"} 1');
  });

  test("kick retries every backed-off head and the drain's backoffs", async () => {
    const ob = queue("orders");
    const seq = ob.enqueue("INSERT INTO orders (id) VALUES (?)", "[1]");
    drainSide(ob).recordAttempt(seq);
    drainSide(ob).recordFailure(seq, "boom", "E", new Date(Date.now() + 3_600_000));
    start();
    const r = await call("POST", "/api/v1/kick", { token: WRITE });
    expect(r.body.heads.map((h: { id: string }) => h.id)).toEqual([`shop/orders/${seq}`]);
    expect(kicks).toBe(1);
    expect(ob.health().nextAttemptAt).toBeNull();
  });
});

describe("tenants", () => {
  /** acme's and globex's rows in shop's `orders`, and acme's in bill's `ledger`, each of acme's backing off. */
  function tenantRows() {
    const ctx = (tenant: string) => ({ traceparent: null, tracestate: null, tenant });
    const orders = queue("orders");
    const ledger = queue("ledger", "bill");
    const later = new Date(Date.now() + 3_600_000);
    const a = orders.enqueue("INSERT INTO orders (id) VALUES (?)", "[1]", "", ctx("acme"));
    orders.enqueue("INSERT INTO orders (id) VALUES (?)", "[2]", "", ctx("globex"));
    const b = ledger.enqueue(`INSERT INTO ledger (id, note) VALUES (?, '${SECRET}')`, "[3]", "", ctx("acme"));
    for (const [ob, seq] of [
      [orders, a],
      [ledger, b],
    ] as const) {
      drainSide(ob).recordAttempt(seq);
      drainSide(ob).recordFailure(seq, `boom ${SECRET}`, "E", later);
    }
    return { orders, ledger, a, b };
  }

  test("a tenant looked up by name: its rows per table in every app, masked, and its hold (unknown without a drain)", async () => {
    const { a, b } = tenantRows();
    start({ readToken: READ });
    const r = await call("GET", "/api/v1/tenants/acme", { token: READ });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({
      tenant: "acme",
      targets: [
        { app: "shop", target: null, held: null },
        { app: "bill", target: null, held: null },
      ],
      tables: [
        { app: "shop", namespace: "orders", pending: 1, head: { seq: a, attempts: 1 }, failing: { seq: a } },
        { app: "bill", namespace: "ledger", pending: 1, head: { seq: b } },
      ],
    });
    expect(r.text).not.toContain(SECRET);
    expect(r.body.tables[0].failing.lastError).toBe("boom ***");
    const none = await call("GET", "/api/v1/tenants/nobody", { token: READ });
    expect(none.body.tables).toEqual([]);
  });

  test("retry ends the backoff of that tenant's rows only, in every app, and the drain's holds", async () => {
    const { orders, ledger, a, b } = tenantRows();
    start();
    expect((await call("POST", "/api/v1/tenants/acme/retry", { token: READ })).status).toBe(401);
    const r = await call("POST", "/api/v1/tenants/acme/retry", { token: WRITE });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ action: "retry", tenant: "acme", unreadable: [] });
    expect(r.body.heads.map((h: { id: string }) => h.id)).toEqual([`shop/orders/${a}`, `bill/ledger/${b}`]);
    expect(kicks).toBe(1);
    expect(orders.fetchUnsynced(10).map((row) => [row.tenant, row.nextAttemptAt === null])).toEqual([
      ["acme", true],
      ["globex", true],
    ]);
    expect(ledger.head()?.nextAttemptAt).toBeNull();
    expect(lines.some((l) => l.includes("tenant acme: 2 row(s) retried"))).toBe(true);
  });

  test("a name no push accepts is a 400, and nothing is read or changed", async () => {
    tenantRows();
    start();
    for (const [method, route] of [
      ["GET", "/api/v1/tenants/..%2Fx"],
      ["GET", "/api/v1/tenants/a%20b"],
      ["POST", "/api/v1/tenants/_x/retry"],
    ] as const) {
      const r = await call(method, route, { token: WRITE, ...(method === "POST" ? { body: {} } : {}) });
      expect({ route, status: r.status }).toEqual({ route, status: 400 });
      expect(r.body.error.message).toContain("tenant: invalid tenant name");
    }
    expect(kicks).toBe(0);
  });
});

describe("hostile input gets a 4xx and changes nothing", () => {
  test.each([
    [
      "a namespace with ../ in a letter's path",
      "GET",
      "/api/v1/dead-letters/shop/..%2F..%2Fetc%2Fpasswd/1",
      undefined,
      400,
    ],
    ["a namespace with ../ in a table's path", "POST", "/api/v1/tables/shop/..%2Fshop/retry", {}, 400],
    ["a namespace with ../ in an id", "POST", "/api/v1/dead-letters/replay", { ids: ["shop/../x/1"] }, 400],
    [
      "a namespace with ../ in a filter",
      "POST",
      "/api/v1/dead-letters/replay",
      { filter: { namespace: "../x" }, expect: 0 },
      400,
    ],
    ["unknown fields", "POST", "/api/v1/dead-letters/replay", { ids: ["shop/orders/1"], everything: true }, 400],
    [
      "a force that is no boolean",
      "POST",
      "/api/v1/dead-letters/replay",
      { ids: ["shop/orders/1"], force: "yes" },
      400,
    ],
    [
      "an unknown filter field",
      "POST",
      "/api/v1/dead-letters/discard",
      { filter: { namespaces: "orders" }, expect: 1 },
      400,
    ],
    ["a filter that matches everything without expect", "POST", "/api/v1/dead-letters/replay", { filter: {} }, 400],
    [
      "a filter and ids at once",
      "POST",
      "/api/v1/dead-letters/replay",
      { ids: ["shop/orders/1"], filter: {}, expect: 1 },
      400,
    ],
    ["a negative expect", "POST", "/api/v1/dead-letters/replay", { filter: {}, expect: -1 }, 400],
    ["a seq that is no number", "POST", "/api/v1/tables/shop/orders/skip", { seq: "1; DROP TABLE" }, 400],
    ["no body where one is needed", "POST", "/api/v1/dead-letters/replay", undefined, 400],
    ["an unknown query field", "GET", "/api/v1/dead-letters?namespace=orders&drop=1", undefined, 400],
    ["a query field given twice", "GET", "/api/v1/dead-letters?namespace=a&namespace=b", undefined, 400],
    ["a cursor this API did not give", "GET", "/api/v1/dead-letters?cursor=Zm9v", undefined, 400],
    ["a time that is no time", "GET", "/api/v1/dead-letters?since=yesterday", undefined, 400],
    ["an empty key", "GET", "/api/v1/dead-letters?key=", undefined, 400],
    ["an endpoint that does not exist", "GET", "/api/v1/secrets", undefined, 404],
    ["a wrong method", "DELETE", "/api/v1/dead-letters", undefined, 405],
  ])("%s", async (_what, method, route, body, status) => {
    const ob = queue("orders");
    letters(ob, 1);
    start();
    const before = contents(tmp.path);
    const r = await call(method as string, route as string, { token: WRITE, body });
    expect(r.status).toBe(status as number);
    expect(r.body.error.message).toBeString();
    if (status === 405) expect(r.headers.get("allow")).toBe("GET");
    expect(contents(tmp.path)).toEqual(before);
  });

  test("a huge body: 413; malformed JSON: 400; another content type: 415", async () => {
    letters(queue("orders"), 1);
    start();
    const before = contents(tmp.path);
    const huge = JSON.stringify({ ids: ["shop/orders/1"], pad: "x".repeat(MAX_BODY_BYTES) });
    expect((await call("POST", "/api/v1/dead-letters/replay", { token: WRITE, raw: huge })).status).toBe(413);
    expect((await call("POST", "/api/v1/dead-letters/replay", { token: WRITE, raw: '{"ids": [' })).status).toBe(400);
    const form = await call("POST", "/api/v1/dead-letters/replay", {
      token: WRITE,
      raw: "ids=shop/orders/1",
      headers: { "content-type": "application/x-www-form-urlencoded" },
    });
    expect(form.status).toBe(415);
    expect(contents(tmp.path)).toEqual(before);
  });

  test("a wrong token is a 401, the read token on an action a 403, no token on an action a 401", async () => {
    const ob = queue("orders");
    const [seq] = letters(ob, 1);
    start({ readToken: READ });
    const body = { ids: [`shop/orders/${seq}`] };
    const wrong = await call("GET", "/api/v1/status", { token: `${READ}x` });
    expect(wrong.status).toBe(401);
    expect(wrong.headers.get("www-authenticate")).toBe('Bearer realm="sqloutbox"');
    expect((await call("GET", "/api/v1/status")).status).toBe(401); // a read token is set: loopback needs it too
    expect((await call("GET", "/api/v1/status", { token: READ })).status).toBe(200);
    expect((await call("GET", "/api/v1/status", { headers: { authorization: `Basic ${btoa("a:b")}` } })).status).toBe(
      401,
    );
    expect((await call("POST", "/api/v1/dead-letters/replay", { token: READ, body })).status).toBe(403);
    expect((await call("POST", "/api/v1/dead-letters/replay", { body })).status).toBe(401);
    expect((await call("POST", "/api/v1/kick", { token: READ })).status).toBe(403);
    expect(ob.deadCount()).toBe(1);
    expect(kicks).toBe(0);
    const text = await registry.metrics();
    expect(text).toContain('sqloutbox_admin_denied_total{status="401"} 4');
    expect(text).toContain('sqloutbox_admin_denied_total{status="403"} 2');
  });

  test("without a write token configured every action is refused: read-only", async () => {
    letters(queue("orders"), 1);
    start({ writeToken: null, readToken: READ });
    const r = await call("POST", "/api/v1/kick", { token: READ });
    expect(r.status).toBe(403);
    expect(r.body.error.message).toContain("read-only");
    expect((await call("GET", "/api/v1/access", { token: READ })).body).toMatchObject({
      can_act: false,
      write_configured: false,
    });
  });

  test("a tokenless read naming another host (a page of another site, DNS rebinding) is refused", async () => {
    start();
    expect((await call("GET", "/api/v1/status", { headers: { host: "evil.example:80" } })).status).toBe(401);
  });

  test("no token is ever logged or sent back", async () => {
    letters(queue("orders"), 2);
    start({ readToken: READ });
    const texts = [
      (await call("GET", "/api/v1/access", { token: WRITE })).text,
      (await call("GET", "/api/v1/status", { token: WRITE })).text,
      (await call("POST", "/api/v1/dead-letters/discard", { token: WRITE, body: { filter: {}, expect: 2 } })).text,
      (await call("POST", "/api/v1/kick", { token: `${WRITE}-wrong` })).text,
    ];
    for (const text of [...texts, ...lines]) {
      expect(text).not.toContain(WRITE);
      expect(text).not.toContain(READ);
    }
  });
});

describe("startup", () => {
  test("an address other hosts can reach without a read token is refused, naming the key", () => {
    const err = errorOf<ConfigError>(() =>
      serveAdmin({
        address: { hostname: "0.0.0.0", port: 0 },
        tokens: { readToken: null, writeToken: WRITE },
        apps: [],
        status: () => ({}),
        tenant: () => ({}),
        retryNow: () => {},
        logger,
        mask: (t) => t,
        version: "x",
        configFile: "/etc/sqloutbox/outbox.toml",
      }),
    );
    expect(err).toBeInstanceOf(ConfigError);
    expect(err).toMatchObject({ code: "E_CONFIG", keyPath: "admin.read_token", file: "/etc/sqloutbox/outbox.toml" });
  });

  const BASE = `[app.a]\ndb_dir = "q"\n[app.a.db.t]\nwriter_class = "./w.ts:W"\ntables = ["t"]\n`;
  test.each([
    ['addr = "0.0.0.0:9465"', "admin.read_token", "required: the admin API listens on 0.0.0.0"],
    ['addr = 9465\nwrite_token = "short"', "admin.write_token", "at least 16 characters"],
    [
      `addr = 9465\nread_token = "${READ}"\nwrite_token = "${READ}"`,
      "admin.write_token",
      "must differ from read_token",
    ],
    ["adr = 9465", "admin.adr", 'unknown key "adr"'],
  ])("[admin] %s is refused at %s", (admin, keyPath, message) => {
    const err = errorOf<ConfigError>(() => parseConfigToml(`[admin]\n${admin}\n${BASE}`, "/x/outbox.toml", {}));
    expect(err).toBeInstanceOf(ConfigError);
    expect(err.keyPath).toBe(keyPath);
    expect(err.message).toContain(message);
    expect(err.message).not.toContain(READ);
  });

  test("[admin] reads its tokens from ${VAR}s, a port alone on 127.0.0.1, and the tokens are secrets", () => {
    const { config, secrets } = parseConfigDocument(
      `[admin]\naddr = 9465\nread_token = "\${R}"\nwrite_token = "\${W}"\n${BASE}`,
      "/x/outbox.toml",
      { R: READ, W: WRITE },
    );
    expect(config.admin).toEqual({ addr: { hostname: "127.0.0.1", port: 9465 }, readToken: READ, writeToken: WRITE });
    expect(secrets).toEqual(expect.arrayContaining([READ, WRITE]));
    // Written out in the file rather than from the environment, they are secrets too.
    const literal = parseConfigDocument(
      `[admin]\nread_token = "${READ}"\nwrite_token = "${WRITE}"\n${BASE}`,
      "/x/outbox.toml",
      {},
    );
    expect(literal.secrets).toEqual(expect.arrayContaining([READ, WRITE]));
  });

  test("runservice --admin-addr on a reachable address without a read token exits 1 naming admin.read_token", async () => {
    const dir = tmp.file("cfg");
    fs.mkdirSync(dir);
    fs.writeFileSync(
      path.join(dir, "outbox.toml"),
      `[app.a]\ndb_dir = "q"\n[app.a.db.t]\nwriter = "sqlite"\ntables = ["t"]\n[app.a.db.t.connection]\npath = "r.db"\n`,
    );
    const r = await run(["runservice", "--config", "outbox.toml", "--admin-addr", "0.0.0.0:0"], {
      cmd: ["bun", BIN],
      cwd: dir,
      env: cleanEnv(),
    });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("admin.read_token");
    expect(fs.existsSync(path.join(dir, "q"))).toBe(false);
  });
});
