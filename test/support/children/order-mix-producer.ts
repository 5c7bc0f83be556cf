// A producer process for the cross-table kill test: commits the OrderMix stream of one host
// (argv JSON: { dbFile, seed, host, hosts, stopFile, keys?, embedded? }) one transaction after
// another into its db_file until `stopFile` exists, then prints "done <transactions committed>".
// With `keys`, each statement is pushed with its key (see MixStatement), for tables with lanes;
// with `embedded`, the db_file is the application's own database (SQLMiddleware({ database })).
// With `avoidLane: [lanes, lane]`, a key that falls in that lane takes a suffix until it falls in
// another (the same key every time): the lane is left to a group the test pushes itself.
import { Database } from "bun:sqlite";
import fs from "node:fs";
import { laneOf } from "../../../src/lane-key.ts";
import { SQLMiddleware } from "../../../src/outbox/middleware.ts";
import { OrderMix } from "../order-mix.ts";

const spec = JSON.parse(process.argv[2]!) as {
  dbFile: string;
  seed: number;
  host: number;
  hosts: number;
  stopFile: string;
  keys?: boolean;
  embedded?: boolean;
  avoidLane?: [number, number];
};
const keyOf = (key: string): string => {
  if (!spec.avoidLane) return key;
  const [lanes, lane] = spec.avoidLane;
  let k = key;
  while (laneOf(k, lanes) === lane) k += "~";
  return k;
};
const source = `host-${spec.host}`;
const appDatabase = () => {
  fs.mkdirSync(spec.dbFile.slice(0, spec.dbFile.lastIndexOf("/")), { recursive: true });
  const db = new Database(spec.dbFile, { create: true });
  db.run("PRAGMA busy_timeout = 5000"); // first: switching to WAL waits out a drain reading the new file, too
  db.run("PRAGMA journal_mode = WAL");
  return db;
};
const mw = spec.embedded
  ? new SQLMiddleware({ database: appDatabase(), source })
  : new SQLMiddleware({ dbFile: spec.dbFile, source });
const mix = new OrderMix(spec.seed, spec.host, spec.hosts);
let n = 0;
while (!fs.existsSync(spec.stopFile)) {
  const tx = mix.next();
  mw.transaction(() => {
    for (const s of tx) mw.push(s.table, s.sql, s.args, spec.keys ? { key: keyOf(s.key) } : undefined);
  });
  n += 1;
  if (n % 5 === 0) await Bun.sleep(5);
}
process.stdout.write(`done ${n}\n`);
