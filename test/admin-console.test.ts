// The operator console as its user meets it: the COMPILED binary serves it, a real browser
// (Debian's chromium, headless, driven by puppeteer-core; nothing downloaded) loads it, watches a
// held table's depth grow as rows are pushed, finds the read-only page offering no action, signs
// in with the write token, opens a dead letter and replays it, and the row lands in PostgreSQL.
// Screenshots are saved under .tmp/admin-console/ (gitignored), their paths printed.
import { Database } from "bun:sqlite";
import { afterAll, beforeAll, expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import puppeteer, { type Browser, type Page } from "puppeteer-core";
import { buildBinary } from "../build.ts";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { cleanupsAfterEach } from "./support/cleanups.ts";
import { cleanEnv, REPO } from "./support/cli.ts";
import { openRemote } from "./support/remote.ts";
import { describeSlow, SLOW } from "./support/slow.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";
import { waitFor } from "./support/wait.ts";

// The page's side of page.evaluate and waitForFunction: what those callbacks touch, typed here
// (this tree's tsconfig has Bun's types, not the DOM's; the callbacks run in the browser).
interface PageNode {
  textContent: string | null;
  offsetParent: unknown;
  cellIndex: number;
  hidden: boolean;
}
declare const document: {
  querySelector(selector: string): PageNode | null;
  querySelectorAll(selector: string): Iterable<PageNode>;
  documentElement: { scrollWidth: number };
};
declare const window: { innerWidth: number; getComputedStyle(node: PageNode): { textAlign: string } };

const CHROMIUM = process.env.SQLOUTBOX_CHROMIUM ?? "/usr/bin/chromium";
const WRITE = "console-write-token-0123456789";
const SHOTS = path.join(REPO, ".tmp", "admin-console");

const cleanups = cleanupsAfterEach();
let tmp: TempDir;
let binary: string;
let browser: Browser | undefined;

beforeAll(async () => {
  if (!SLOW) return;
  tmp = makeTempDir("sqloutbox-console-");
  binary = path.join(tmp.path, "bin", "sqloutbox");
  await buildBinary(binary);
  fs.mkdirSync(SHOTS, { recursive: true });
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    // Offline and quiet: no sandbox (root in CI), no GPU, nothing fetched in the background.
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      `--user-data-dir=${tmp.file("chromium-profile")}`,
    ],
  });
}, 120_000);
afterAll(async () => {
  await browser?.close();
  tmp?.cleanup();
});

async function shot(page: Page, name: string): Promise<void> {
  const file = path.join(SHOTS, `${name}.png`);
  await page.screenshot({ path: file as `${string}.png`, fullPage: true });
  console.log(`screenshot: ${file}`);
}

/** The text of the cell `label` of the row of table `name` (app/namespace). */
function tableCell(page: Page, name: string, label: string): Promise<string | null> {
  return page.evaluate(
    (n, l) => document.querySelector(`tr[data-table="${n}"] td[data-label="${l}"]`)?.textContent ?? null,
    name,
    label,
  );
}

/**
 * Every column of the page's tables whose header does not align as its values do: `table: header
 * (th align, td align)`. A number right-aligned under a left-aligned header reads as the next
 * column's.
 */
function misaligned(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const out: string[] = [];
    for (const th of document.querySelectorAll("table thead th")) {
      const td = [...document.querySelectorAll("table tbody td")].find(
        (c) =>
          (c as unknown as { closest(s: string): unknown }).closest("table") ===
            (th as unknown as { closest(s: string): unknown }).closest("table") && c.cellIndex === th.cellIndex,
      );
      if (!td || th.hidden) continue;
      const [a, b] = [window.getComputedStyle(th).textAlign, window.getComputedStyle(td).textAlign];
      const norm = (x: string) => (x === "start" ? "left" : x === "end" ? "right" : x);
      if (norm(a) !== norm(b)) out.push(`${th.textContent} (${a}, ${b})`);
    }
    return out;
  });
}

/** The visible action buttons of the page. */
function visibleActions(page: Page): Promise<string[]> {
  return page.evaluate(() =>
    [...document.querySelectorAll("button.act")].filter((b) => b.offsetParent !== null).map((b) => b.textContent ?? ""),
  );
}

/** The compiled binary's `runservice` in `dir` (its outbox.toml), once it serves the console: its URL, its log, and a stop. */
async function serveConsole(dir: string): Promise<{ url: string; log(): string; stop(): Promise<void> }> {
  const proc = Bun.spawn([binary, "runservice"], {
    cwd: dir,
    env: cleanEnv({ SQLOUTBOX_WRITE_TOKEN: WRITE }),
    stdout: "pipe",
    stderr: "pipe",
  });
  let log = "";
  const pump = (async () => {
    for await (const chunk of proc.stderr) log += new TextDecoder().decode(chunk);
  })();
  const stop = async () => {
    proc.kill("SIGTERM");
    await proc.exited;
    await pump.catch(() => {});
  };
  let url = "";
  try {
    await waitFor(
      () => (url = /serving the admin API and the console on (http:\/\/\S+)/.exec(log)?.[1] ?? "") !== "",
      () => `the console to be served:\n${log}`,
    );
  } catch (error) {
    await stop();
    throw error;
  }
  return { url, log: () => log, stop };
}

/** A new page on the console at `url`, with every failed request and page error collected in `failed`. */
async function openConsole(url: string): Promise<{ page: Page; failed: string[] }> {
  const page = await browser!.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  const failed: string[] = [];
  page.on("requestfailed", (r) => failed.push(r.url()));
  page.on("pageerror", (e) => failed.push(String(e)));
  await page.goto(url, { waitUntil: "networkidle0" });
  return { page, failed };
}

describeSlow("the operator console", "build the binary and drive the console in chromium", () => {
  test("shows a table's depth live, offers no action read-only, and replays a dead letter into PostgreSQL", async () => {
    const remote = await openRemote("postgres", { cleanups });
    await remote.exec("CREATE TABLE orders (id INTEGER PRIMARY KEY, note TEXT NOT NULL)");
    const dir = tmp.file("drain");
    fs.mkdirSync(dir);
    // "events" has no table in PostgreSQL: the drain holds it (a remote schema fault), so its rows wait and its depth grows.
    fs.writeFileSync(
      path.join(dir, "outbox.toml"),
      `[admin]\naddr = "127.0.0.1:0"\nwrite_token = "\${SQLOUTBOX_WRITE_TOKEN}"\n\n[app.shop]\ndb_dir = "queue"\nflush_interval = 0.05\ntable_flush_threshold = 1\nmax_attempts = 1\n\n[app.shop.db.pg]\nwriter = "postgres"\ntables = [{ name = "orders", lanes = 4 }, "events"]\n[app.shop.db.pg.connection]\nurl = "${remote.url}"\n`,
    );
    const drain = await serveConsole(dir);
    const producer = new SQLMiddleware({ dbDir: path.join(dir, "queue") });
    try {
      const { url } = drain;
      const { page, failed } = await openConsole(url);
      await page.waitForSelector('tr[data-table="shop/events"]');

      // Live: the held table's depth follows the pushes, read every 2 s.
      producer.push("events", "INSERT INTO events (id) VALUES (?)", [1]);
      await page.waitForFunction(() => document.querySelector('tr[data-table="shop/events"] td[data-depth="1"]'), {
        timeout: 10_000,
      });
      producer.pushMany("events", [
        ["INSERT INTO events (id) VALUES (?)", [2]],
        ["INSERT INTO events (id) VALUES (?)", [3]],
      ]);
      await page.waitForFunction(() => document.querySelector('tr[data-table="shop/events"] td[data-depth="3"]'), {
        timeout: 10_000,
      });
      expect(await tableCell(page, "shop/events", "Held")).toContain("remote schema");

      // A row the remote refuses (NOT NULL) is dead-lettered at once (max_attempts = 1) and listed.
      producer.push("orders", "INSERT INTO orders (id, note) VALUES (?, ?)", [7, null]);
      await page.waitForSelector('a[data-letter="shop/orders/1"]', { timeout: 15_000 });
      // Every number stands under its own header: numeric headers align right with their values.
      expect(await misaligned(page)).toEqual([]);

      // Read-only (loopback, no token): everything shown, no action offered.
      expect(await page.$eval("#who", (e) => e.textContent)).toContain("read-only");
      expect(await visibleActions(page)).toEqual([]);
      await shot(page, "1-read-only");

      // Signed in with the write token: the actions appear.
      await page.type("#token", WRITE);
      await page.click("#sign-in button[type=submit]");
      await page.waitForFunction(() => document.querySelector("#who")?.textContent?.includes("may act"));
      await page.waitForSelector("#kick:not([hidden])");

      // The letter's detail: its statement, its arguments, its error.
      // Found and clicked in one step in the page: the list is drawn anew on every refresh, and a
      // button found first may be replaced before puppeteer's click reaches it ("detached").
      await page.$eval('a[data-letter="shop/orders/1"]', (b) => (b as unknown as { click(): void }).click());
      await page.waitForSelector("#detail:not([hidden])");
      expect(await page.$eval("#detail-sql", (e) => e.textContent)).toBe("INSERT INTO orders (id, note) VALUES (?, ?)");
      expect(JSON.parse((await page.$eval("#detail-args", (e) => e.textContent)) ?? "")).toEqual([7, null]);
      expect(await page.$eval("#detail-error", (e) => e.textContent)).toContain("23502");
      await shot(page, "2-dead-letter");

      // The remote is fixed; the replay asks first, with the count, then the row lands.
      await remote.exec("ALTER TABLE orders ALTER COLUMN note DROP NOT NULL");
      await page.click("#detail-replay");
      await page.waitForSelector("#confirm[open]");
      expect(await page.$eval("#confirm-text", (e) => e.textContent)).toContain("Replay 1 dead letter?");
      await shot(page, "3-confirm");
      await page.click("#confirm-ok");
      await waitFor(
        async () => (await remote.ints("SELECT count(*) FROM orders WHERE id = 7"))[0]![0] === 1,
        "the replayed row in PostgreSQL",
      );
      await page.waitForFunction(() => document.querySelector("#message")?.textContent?.includes("Replayed 1"));
      // The fleet: this host's ledger rows of orders (4 lanes), as the drain reads them back.
      await page.waitForSelector('#fleet:not([hidden]) tr[data-fleet^="shop.pg/orders/"]', { timeout: 15_000 });
      const fleet = await page.$eval('tr[data-fleet^="shop.pg/orders/"]', (tr) =>
        [...tr.querySelectorAll("td")].map((td) => td.textContent),
      );
      expect(fleet[2]).toContain("(this host)");
      expect(fleet[5]).toMatch(/^\d+ lanes?; slowest orders(#\d+)? at \d+, moved /);
      expect(drain.log()).toContain("admin: replay by write token: 1 id(s)");
      expect(drain.log()).not.toContain(WRITE);
      await shot(page, "4-replayed");

      // Each letter has a URL of its own: opened in a fresh tab, it shows that letter; its detail
      // offers to discard it, which gives it up for good (never delivered) and lists it as discarded.
      await remote.exec("UPDATE orders SET note = '' WHERE note IS NULL");
      await remote.exec("ALTER TABLE orders ALTER COLUMN note SET NOT NULL");
      producer.push("orders", "INSERT INTO orders (id, note) VALUES (?, ?)", [10, null]);
      await page.waitForSelector('a[data-letter="shop/orders/3"]', { timeout: 15_000 });
      expect(await page.$eval('a[data-letter="shop/orders/3"]', (a) => a.getAttribute("href"))).toBe(
        "#letter/shop/orders/3",
      );
      const tab = await browser!.newPage();
      await tab.setViewport({ width: 1280, height: 900 });
      tab.on("pageerror", (e) => failed.push(String(e)));
      await tab.goto(`${url}#letter/shop/orders/3`, { waitUntil: "networkidle0" });
      await tab.waitForSelector("#detail:not([hidden])");
      expect(JSON.parse((await tab.$eval("#detail-args", (e) => e.textContent)) ?? "")).toEqual([10, null]);
      await tab.close();
      // A tab in the background gets no animation frames, which puppeteer's waits poll on.
      await page.bringToFront();
      await page.goto(`${url}#letter/shop/orders/3`, { waitUntil: "networkidle0" });
      await page.waitForSelector("#detail:not([hidden])");
      await page.waitForSelector("#detail-discard:not([disabled])");
      await page.click("#detail-discard");
      await page.waitForSelector("#confirm[open]");
      expect(await page.$eval("#confirm-text", (e) => e.textContent)).toContain("Discard 1 dead letter?");
      await page.click("#confirm-ok");
      await page.waitForFunction(() => document.querySelector("#message")?.textContent?.includes("Discarded 1"));
      expect(drain.log()).toContain("admin: discard by write token: 1 id(s)");
      await shot(page, "5-discarded");

      // A phone-sized screen: the tables become cards, nothing wider than the screen.
      await page.setViewport({ width: 375, height: 800, isMobile: true });
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      expect(overflow).toBeLessThanOrEqual(0);
      await shot(page, "6-phone");
      expect(failed).toEqual([]);
      await page.close();
    } finally {
      closeSharedOutboxes();
      await drain.stop();
    }
  }, 90_000);

  test("shows a tenant template's held tenants (the first five), finds one by name, and retries it: its rows land", async () => {
    const dir = tmp.file("tenants");
    fs.mkdirSync(path.join(dir, "remote"), { recursive: true });
    // A tenant's database is remote/{tenant}/db.sqlite: one whose directory is missing cannot be opened, and is held.
    fs.writeFileSync(
      path.join(dir, "outbox.toml"),
      `[admin]\naddr = "127.0.0.1:0"\nwrite_token = "\${SQLOUTBOX_WRITE_TOKEN}"\n\n[app.saas]\ndb_dir = "queue"\nflush_interval = 0.05\ntable_flush_threshold = 1\noutage_backoff_cap_minutes = 1\n\n[app.saas.db.tenants]\nwriter = "sqlite"\ntables = ["ev"]\n[app.saas.db.tenants.connection]\npath = "remote/{tenant}/db.sqlite"\n`,
    );
    const producer = new SQLMiddleware({ dbDir: path.join(dir, "queue") });
    for (const t of ["g1", "g2", "g3", "g4", "g5", "g6", "g7"])
      for (let n = 1; n <= 2; n++) producer.push("ev", "INSERT INTO ev (k, n) VALUES (?, ?)", [t, n], { tenant: t });
    closeSharedOutboxes();
    const drain = await serveConsole(dir);
    // Rows in g7's database; none while it cannot be read (the drain is writing it).
    const landed = () => {
      const file = path.join(dir, "remote/g7/db.sqlite");
      if (!fs.existsSync(file)) return 0;
      let db: Database | undefined;
      try {
        db = new Database(file, { readonly: true });
        return db.query<{ n: number }, []>("SELECT count(*) AS n FROM ev").get()!.n;
      } catch {
        return 0;
      } finally {
        db?.close();
      }
    };
    try {
      const { url } = drain;
      const { page, failed } = await openConsole(url);

      // Seven held, five listed, the rest counted: the page stays short whatever the tenants.
      await page.waitForFunction(
        () => document.querySelector('[data-template="saas.tenants"] h3')?.textContent?.includes("7 held"),
        {
          timeout: 20_000,
        },
      );
      const listed = await page.evaluate(() =>
        [...document.querySelectorAll("#tenant-templates tr[data-tenant]")].map((r) => r.textContent ?? ""),
      );
      expect(listed.map((r) => r.slice(0, 2))).toEqual(["g1", "g2", "g3", "g4", "g5"]);
      expect(listed[0]).toMatch(/outage|misconfigured/);
      expect(await page.$eval("#tenant-templates", (e) => e.textContent)).toContain("and 2 more held");

      // Found by name: its hold and its rows per table.
      await page.type("#tenant-name", "g7");
      await page.click("#tenant-search button[type=submit]");
      await page.waitForSelector('#tenant-detail:not([hidden]) tr[data-tenant-table="saas/ev"]');
      expect(await page.$eval('tr[data-tenant-table="saas/ev"] td[data-label="Pending"]', (e) => e.textContent)).toBe(
        "2",
      );
      expect(await page.$eval("#tenant-holds", (e) => e.textContent)).toMatch(
        /g7 at saas\.tenants: held \((outage|misconfigured)\)/,
      );
      expect(await misaligned(page)).toEqual([]);
      expect(await visibleActions(page)).toEqual([]); // read-only: no retry offered
      await shot(page, "7-tenants");

      // Its database comes back while its backoff still has a while to run: the retry sends its rows now.
      const heldUntil = async () => {
        const status = (await (await fetch(new URL("/api/v1/status", url))).json()) as {
          tenants: Array<{ backlog: unknown; held: { tenants: Array<{ tenant: string; until: string }> } | null }>;
        };
        // Polled by the console in the drain's own process: without the backlog, a scan of the queue.
        expect(status.tenants[0]?.backlog).toBeNull();
        const g7 = status.tenants[0]?.held?.tenants.find((h) => h.tenant === "g7");
        return g7 ? Date.parse(g7.until) - Date.now() : 0;
      };
      await waitFor(async () => (await heldUntil()) > 8_000, "g7's backoff to grow past 8 s", 60_000);
      fs.mkdirSync(path.join(dir, "remote/g7"));
      const db = new Database(path.join(dir, "remote/g7/db.sqlite"), { create: true });
      db.run("CREATE TABLE ev (k TEXT NOT NULL, n INTEGER NOT NULL)");
      db.close();
      await page.type("#token", WRITE);
      await page.click("#sign-in button[type=submit]");
      await page.waitForSelector("#tenant-retry:not([hidden])");
      // Landing before its backoff would have ended is what shows the retry sent it.
      const backoffLeft = await heldUntil();
      expect(backoffLeft).toBeGreaterThan(3_000);
      const clicked = Date.now();
      // Clicked in the page, not at its coordinates: the refresh after signing in may still move the layout.
      await page.$eval("#tenant-retry", (b) => (b as unknown as { click(): void }).click());
      await page.waitForSelector("#confirm[open]");
      expect(await page.$eval("#confirm-text", (e) => e.textContent)).toContain("Retry tenant g7 now?");
      await page.click("#confirm-ok");
      await page.waitForFunction(() =>
        document.querySelector("#message")?.textContent?.includes("Tenant g7 is tried again"),
      );
      await waitFor(() => landed() === 2, "g7's rows in its database", backoffLeft);
      expect(Date.now() - clicked).toBeLessThan(backoffLeft);
      expect(drain.log()).toContain("admin: retry by write token");
      await shot(page, "8-tenant-retried");
      expect(failed).toEqual([]);
      await page.close();
    } finally {
      await drain.stop();
    }
  }, 120_000);
});
