// A producer process for the cross-table kill test: commits the OrderMix stream of one host
// (argv JSON: { dbFile, seed, host, hosts, stopFile, keys? }) one transaction after another into its
// db_file until `stopFile` exists, then prints "done <transactions committed>". With `keys`, each
// statement is pushed with its key (see MixStatement), for tables with lanes.
import fs from "node:fs";
import { SQLMiddleware } from "../../../src/outbox/middleware.ts";
import { OrderMix } from "../order-mix.ts";

const spec = JSON.parse(process.argv[2]!) as {
  dbFile: string;
  seed: number;
  host: number;
  hosts: number;
  stopFile: string;
  keys?: boolean;
};
const mw = new SQLMiddleware({ dbFile: spec.dbFile, source: `host-${spec.host}` });
const mix = new OrderMix(spec.seed, spec.host, spec.hosts);
let n = 0;
while (!fs.existsSync(spec.stopFile)) {
  const tx = mix.next();
  mw.transaction(() => {
    for (const s of tx) mw.push(s.table, s.sql, s.args, spec.keys ? { key: s.key } : undefined);
  });
  n += 1;
  if (n % 5 === 0) await Bun.sleep(5);
}
process.stdout.write(`done ${n}\n`);
