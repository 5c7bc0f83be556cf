// A drain with more tables than its open-file limit allows: the files it cannot open hold their
// own tables, visibly in status and /metrics, and every table it opened keeps delivering (before,
// the queue files took every descriptor and the target's connection failed: nothing was delivered).
import { Database } from "bun:sqlite";
import { expect, test } from "bun:test";
import fs from "node:fs";
import { runInProcess } from "./support/cli.ts";
import { startCliDrain } from "./support/cli-drain.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";
import { seed } from "./support/queue.ts";

const cleanups = cleanupsAfterEach();
const TABLES = Array.from({ length: 100 }, (_, i) => `t${i}`);
/** Room for some of the 100 queue files (3 descriptors each) after Bun's own and the reserve, not for all. */
const OPEN_FILES = 256;

test("under an open-file limit too low for every table, the tables it cannot open are held (status, /metrics) and the others deliver", async () => {
  const dir = tempDirCleanedBy(cleanups);
  const remote = new Database(dir.file("remote.db"), { create: true });
  remote.run("PRAGMA journal_mode = WAL");
  for (const t of TABLES) remote.run(`CREATE TABLE ${t} (id INTEGER)`);
  for (const t of TABLES) seed(dir.file("queue"), t, 1);
  const config = dir.file("outbox.toml");
  fs.writeFileSync(
    config,
    `[app.shop]
db_dir = "queue"
flush_interval = 0.05
table_flush_threshold = 1

[app.shop.db.local]
writer = "sqlite"
tables = [${TABLES.map((t) => `"${t}"`).join(", ")}]

[app.shop.db.local.connection]
path = "remote.db"
`,
  );
  const drain = await startCliDrain(config, {}, { openFiles: OPEN_FILES });
  cleanups.push(() => drain.stop());
  const sum = (samples: Array<{ value: number }>) => samples.reduce((n, s) => n + s.value, 0);
  const scrape = await drain.until(
    (s) => {
      const held = sum(s.all("sqloutbox_table_held", { reason: "file" }));
      return held > 0 && sum(s.all("sqloutbox_delivered_rows_total")) === TABLES.length - held;
    },
    "every table the drain opened to deliver its row, the rest held (file)",
    20_000,
  );
  const held = sum(scrape.all("sqloutbox_table_held", { reason: "file" }));
  expect(held).toBeLessThan(TABLES.length);
  const landed = TABLES.reduce(
    (n, t) => n + remote.query<{ n: number }, []>(`SELECT count(*) AS n FROM ${t}`).get()!.n,
    0,
  );
  remote.close();
  expect(landed).toBe(TABLES.length - held);

  // status reads the drain's state file, which the reserve left room to write.
  let status:
    | { totals: { held: number }; namespaces: Array<{ held: { reason: string; message: string } | null }> }
    | undefined;
  for (let i = 0; i < 50 && status?.totals.held !== held; i++) {
    status = JSON.parse((await runInProcess(["status", "--config", config, "--json"])).stdout);
    if (status!.totals.held !== held) await Bun.sleep(100);
  }
  expect(status!.totals.held).toBe(held);
  const message = status!.namespaces.find((n) => n.held)!.held!;
  expect(message.reason).toBe("file");
  expect(message.message).toMatch(
    new RegExp(`open-file limit \\(${OPEN_FILES}, \`ulimit -n\`; systemd: LimitNOFILE=\\).*Raise it`),
  );
  expect(await drain.stop()).toBe(0);
}, 30_000);
