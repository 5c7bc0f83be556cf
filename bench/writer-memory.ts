// Memory a writer keeps per statement (`bun run bench:writer-memory`): the libsql writer on a
// `file:` URL against the sqlite writer on the same kind of file, each in its own process, 1 000
// batches of 100 single-row UPDATEs after a 50-batch warm-up, RSS read after a full GC:
// {"bench":"writer-memory","writer":…,"statements":100000,"bytes_per_statement":…,"rss_mb":…}
// The README's limitation "libSQL file: URLs leak a few KB per statement" is this line.
import { Database } from "bun:sqlite";
import { createWriter } from "../src/writers/registry.ts";
import type { Statement } from "../src/writers/writer.ts";
import { makeTempDir } from "../test/support/tmp.ts";
import { sized } from "./support/smoke.ts";

const WARMUP_BATCHES = sized(50, 2);
const BATCHES = sized(1_000, 3);
const PER_BATCH = 100;

const batch = (k: number): Statement[] =>
  Array.from({ length: PER_BATCH }, (_, i) => ({
    sql: "UPDATE t SET note = ? WHERE id = ?",
    args: ["x", k * PER_BATCH + i],
    namespace: "t",
    seq: k * PER_BATCH + i + 1,
  }));

/** Child mode: one writer, one file; prints one JSON line. */
async function measure(kind: "libsql" | "sqlite", path: string): Promise<void> {
  const db = new Database(path, { create: true });
  db.run("CREATE TABLE t (id INTEGER, note TEXT)");
  db.close();
  const writer = kind === "libsql" ? createWriter("libsql", { url: `file:${path}` }) : createWriter("sqlite", { path });
  const rss = () => process.memoryUsage().rss;
  for (let k = 0; k < WARMUP_BATCHES; k++) await writer.writeBatch(batch(k));
  Bun.gc(true);
  const before = rss();
  for (let k = WARMUP_BATCHES; k < WARMUP_BATCHES + BATCHES; k++) await writer.writeBatch(batch(k));
  Bun.gc(true);
  const after = rss();
  await writer.close?.();
  const statements = BATCHES * PER_BATCH;
  console.log(
    JSON.stringify({
      bench: "writer-memory",
      writer: kind,
      statements,
      bytes_per_statement: Math.round((after - before) / statements),
      rss_mb: Math.round(after / 1048576),
    }),
  );
}

if (process.argv[2] === "--child") {
  await measure(process.argv[3] as "libsql" | "sqlite", process.argv[4]!);
} else {
  const dir = makeTempDir("sqloutbox-bench-");
  try {
    for (const kind of ["sqlite", "libsql"]) {
      const child = Bun.spawn(["bun", import.meta.path, "--child", kind, `${dir.path}/${kind}.db`], {
        stdout: "inherit",
        stderr: "inherit",
      });
      if ((await child.exited) !== 0) throw new Error(`writer-memory child for ${kind} failed`);
    }
  } finally {
    dir.cleanup();
  }
}
