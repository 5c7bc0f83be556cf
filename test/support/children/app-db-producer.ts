// An application process whose state lives in its own bun:sqlite database: each transaction
// credits an account and pushes the event for it, in one local transaction, as fast as it can
// until `stopFile` exists; then prints "done <transactions> <errors>" and the first error.
// argv: JSON { file, stopFile }.
import { Database } from "bun:sqlite";
import fs from "node:fs";
import { SQLMiddleware } from "../../../src/outbox/middleware.ts";

const spec = JSON.parse(process.argv[2]!) as { file: string; stopFile: string };
const db = new Database(spec.file);
db.run("PRAGMA busy_timeout = 5000");
const outbox = new SQLMiddleware({ database: db, source: "app" });
let n = 0;
let errors = 0;
let first = "";
while (!fs.existsSync(spec.stopFile)) {
  try {
    outbox.transaction(() => {
      db.run("UPDATE accounts SET balance = balance + 1 WHERE id = 1");
      outbox.push("credits", "INSERT INTO credits (n) VALUES (?)", [n]);
    });
    n += 1;
  } catch (error) {
    errors += 1;
    first ||= String(error);
  }
  if (n % 200 === 0) await Bun.sleep(0); // let the stop file be seen
}
process.stdout.write(`done ${n} ${errors} ${first}\n`);
