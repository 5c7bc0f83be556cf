import { Database } from "bun:sqlite";
import { afterAll, beforeAll, expect, test } from "bun:test";
import { UnsupportedStatementError } from "../src/errors.ts";
import { injectOutboxSeq } from "../src/sql/rewrite.ts";
import type { BindValue, Dialect } from "../src/vocabulary.ts";
import { type GeneratedStatement, rng, StatementGenerator } from "./support/sql-gen.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";

// Seeded so a failure reproduces: SQLOUTBOX_FUZZ_SEED / SQLOUTBOX_FUZZ_CASES override. The default
// run is small enough for every `bun test`; CI runs the 100k cases SPEC §5 asks for
// (SQLOUTBOX_FUZZ_CASES=100000).
const SEED = Number(process.env.SQLOUTBOX_FUZZ_SEED ?? 20261130);
const CASES = Number(process.env.SQLOUTBOX_FUZZ_CASES ?? 5_000);

let tmp: TempDir;
let db: Database;

const COLS =
  "id INTEGER PRIMARY KEY, a INTEGER, b TEXT, c REAL CHECK (c IS NULL OR c > -1e9), d BLOB, e TEXT NOT NULL DEFAULT 'dflt', outbox_seq INTEGER NOT NULL DEFAULT 0";

beforeAll(() => {
  tmp = makeTempDir();
  db = new Database(tmp.file("fuzz.db"));
  db.run("PRAGMA journal_mode = WAL");
  for (const t of ["t", "u"]) {
    db.run(`CREATE TABLE ${t} (${COLS})`);
    db.run(`CREATE UNIQUE INDEX idx_${t}_outbox_seq ON ${t} (outbox_seq) WHERE outbox_seq != 0`);
  }
  // Lets the MySQL INSERT … SELECT … FROM DUAL form run on SQLite too.
  db.run("CREATE TABLE dual (x)");
  db.run("INSERT INTO dual VALUES (1)");
  const ins = db.prepare("INSERT INTO t (id, a, b, c, d, e, outbox_seq) VALUES (?, ?, ?, ?, ?, ?, ?)");
  for (let i = 1; i <= 5; i++)
    ins.run(i, i * 10, i % 2 ? null : `b${i}`, i / 2, new Uint8Array([i]), `e${i}`, i % 2 ? 0 : i);
  ins.finalize();
  db.run("INSERT INTO u (id, a, b, e) VALUES (1, 1, 'one', 'e1')");
});

afterAll(() => {
  db.close();
  tmp.cleanup();
});

interface Outcome {
  error: string | null;
  changes: number;
  rows: unknown[][];
}

function snapshot(table: string): unknown[][] {
  const stmt = db.prepare(`SELECT id, a, b, c, d, e, outbox_seq FROM ${table} ORDER BY id`);
  const rows = stmt.values() as unknown[][];
  stmt.finalize();
  return rows;
}

function execute(sql: string, args: readonly BindValue[], table: string): Outcome {
  try {
    const stmt = db.prepare(sql);
    try {
      const { changes } = stmt.run(...(args as BindValue[]));
      return { error: null, changes, rows: snapshot(table) };
    } finally {
      stmt.finalize();
    }
  } catch (e) {
    return { error: (e as Error).message, changes: 0, rows: [] };
  }
}

/** Rows of `rewritten` with outbox_seq = seq put back to what the row had before (or 0 when new). */
function unseq(rows: unknown[][], base: Map<unknown, unknown>, seq: number): { rows: unknown[][]; stamped: number } {
  let stamped = 0;
  const out = rows.map((r) => {
    if (r[6] !== seq) return r;
    stamped++;
    return [...r.slice(0, 6), base.get(r[0]) ?? 0];
  });
  return { rows: out, stamped };
}

/** Bind count as the engine sees it, cross-checked against the placeholders in the text. */
function bindCountOk(sql: string, args: readonly BindValue[], dialect: Dialect, paramsCount: number): boolean {
  if (paramsCount !== args.length) return false;
  if (dialect !== "postgres") return true;
  const nums = [...sql.matchAll(/\$(\d+)/g)].map((m) => Number(m[1]));
  return nums.length === args.length && nums.every((n, i) => n === i + 1);
}

test(`never a wrong rewrite: ${CASES} generated statements checked against SQLite (seed ${SEED})`, () => {
  const gen = new StatementGenerator(rng(SEED));
  const baseSeq = new Map<string, Map<unknown, unknown>>();
  for (const t of ["t", "u"]) baseSeq.set(t, new Map(snapshot(t).map((r) => [r[0], r[6]])));
  const failures: string[] = [];
  const stats = { accepted: 0, rejected: 0, originalErrors: 0, forms: 0 };
  const fail = (g: GeneratedStatement, i: number, what: string) => {
    if (failures.length < 5)
      failures.push(
        `case ${i}: ${what}\n  sql: ${JSON.stringify(g.sql)}\n  args: ${JSON.stringify(g.args, (_k, v) => (typeof v === "bigint" ? `${v}n` : v))}`,
      );
  };

  for (let i = 0; i < CASES && failures.length < 5; i++) {
    const g = gen.next();
    const seq = 1000 + i;
    if (g.rejectReason !== undefined) {
      stats.rejected++;
      for (const d of ["sqlite", "postgres", "mysql"] as const) {
        if (d === "postgres" && (g.quote === "bracket" || g.quote === "backtick")) continue;
        if (d === "mysql" && (g.quote === "bracket" || g.quote === "double")) continue;
        try {
          const out = injectOutboxSeq(g.sql, g.args, seq, d);
          fail(g, i, `${d}: accepted a statement that must be rejected (${g.rejectReason}): ${out.sql}`);
        } catch (e) {
          if (!(e instanceof UnsupportedStatementError)) fail(g, i, `${d}: threw ${String(e)}`);
          else if (d === "sqlite" && !e.reason.includes(g.rejectReason))
            fail(g, i, `reason "${e.reason}" does not mention "${g.rejectReason}"`);
        }
      }
      continue;
    }
    stats.accepted++;
    db.run("BEGIN");
    const original = execute(g.sql, g.args, g.table);
    db.run("ROLLBACK");
    if (original.error !== null) stats.originalErrors++;
    const base = baseSeq.get(g.table)!;

    const forms: Dialect[] = ["sqlite"];
    if (g.quote !== "bracket" && g.quote !== "backtick") forms.push("postgres");
    if (g.quote !== "bracket" && g.quote !== "double") forms.push("mysql");
    for (const d of forms) {
      let out: { sql: string; args: BindValue[] };
      try {
        out = injectOutboxSeq(g.sql, g.args, seq, d);
      } catch (e) {
        // mysql alone refuses subqueries and DEFAULT in VALUES (its rewrite is an INSERT … SELECT).
        if (!(d === "mysql" && e instanceof UnsupportedStatementError && e.reason.includes("not supported on mysql"))) {
          fail(g, i, `${d}: rejected an accepted statement: ${String(e)}`);
        }
        continue;
      }
      stats.forms++;
      db.run("BEGIN");
      try {
        let paramsCount = -1;
        try {
          const stmt = db.prepare(out.sql);
          paramsCount = stmt.paramsCount;
          stmt.finalize();
        } catch {
          // a syntax error shows up below as an outcome mismatch
        }
        if (original.error === null && !bindCountOk(out.sql, out.args, d, paramsCount)) {
          fail(g, i, `${d}: bind count ${paramsCount} != ${out.args.length} args: ${out.sql}`);
          continue;
        }
        const first = execute(out.sql, out.args, g.table);
        if (first.error !== original.error) {
          fail(
            g,
            i,
            `${d}: error ${JSON.stringify(first.error)} but the original gave ${JSON.stringify(original.error)}: ${out.sql}`,
          );
          continue;
        }
        if (original.error !== null) continue;
        const { rows, stamped } = unseq(first.rows, base, seq);
        if (
          first.changes !== original.changes ||
          stamped !== original.changes ||
          !Bun.deepEquals(rows, original.rows)
        ) {
          fail(
            g,
            i,
            `${d}: rewritten result differs (changes ${first.changes} vs ${original.changes}, stamped ${stamped}): ${out.sql}`,
          );
          continue;
        }
        // Redelivery: the same rewritten statement again changes nothing.
        const again = execute(out.sql, out.args, g.table);
        if (again.error !== null || again.changes !== 0 || !Bun.deepEquals(again.rows, first.rows)) {
          fail(g, i, `${d}: redelivery was not absorbed (${again.error ?? `changes ${again.changes}`}): ${out.sql}`);
          continue;
        }
        // Out of order: an UPDATE older than the one applied changes nothing either.
        if (g.kind === "update" && i % 4 === 0) {
          const older = injectOutboxSeq(g.sql, g.args, seq - 1, d);
          const stale = execute(older.sql, older.args, g.table);
          if (stale.error !== null || stale.changes !== 0)
            fail(g, i, `${d}: an older UPDATE was applied after a newer one: ${older.sql}`);
        }
      } finally {
        db.run("ROLLBACK");
      }
    }
  }
  console.log(`sql fuzz: ${JSON.stringify(stats)}`);
  expect(failures).toEqual([]);
  // The generator must actually exercise both sides and the engine's own errors.
  expect(stats.accepted).toBeGreaterThan(CASES * 0.6);
  expect(stats.rejected).toBeGreaterThan(CASES * 0.15);
  expect(stats.originalErrors).toBeGreaterThan(0);
}, 120_000);

const MUTATION_CASES = Math.max(1, Math.floor(CASES / 2));
const NOISE = [
  "'",
  '"',
  "(",
  ")",
  "?",
  ";",
  "-",
  "--",
  "/*",
  "*/",
  "[",
  "]",
  "`",
  ",",
  " ",
  "\n",
  "?1",
  "WHERE",
  "VALUES",
  "''",
];

test(`never a wrong rewrite of mangled SQL: ${MUTATION_CASES} mutated statements either rejected or equivalent on SQLite`, () => {
  const r = rng(SEED ^ 0x5eed);
  const gen = new StatementGenerator(r);
  const failures: string[] = [];
  let accepted = 0;
  for (let i = 0; i < MUTATION_CASES && failures.length < 5; i++) {
    const g = gen.next();
    let sql = g.sql;
    for (let m = 1 + Math.floor(r() * 3); m > 0; m--) {
      const at = Math.floor(r() * (sql.length + 1));
      sql =
        r() < 0.3
          ? sql.slice(0, at) + sql.slice(at + 1)
          : sql.slice(0, at) + NOISE[Math.floor(r() * NOISE.length)] + sql.slice(at);
    }
    let out: { sql: string; args: BindValue[] };
    try {
      out = injectOutboxSeq(sql, g.args, 1000 + i, "sqlite");
    } catch (e) {
      if (!(e instanceof UnsupportedStatementError))
        failures.push(`case ${i}: threw ${String(e)} for ${JSON.stringify(sql)}`);
      continue;
    }
    accepted++;
    db.run("BEGIN");
    const original = execute(sql, g.args, g.table);
    db.run("ROLLBACK");
    db.run("BEGIN");
    const rewritten = execute(out.sql, out.args, g.table);
    db.run("ROLLBACK");
    const seq = 1000 + i;
    const base = new Map(snapshot(g.table).map((row) => [row[0], row[6]]));
    const restored = unseq(rewritten.rows, base, seq);
    // An UPDATE a mutation widened to several rows must fail on the unique outbox_seq (documented), not half-apply.
    const widened =
      original.error === null &&
      original.changes > 1 &&
      rewritten.error === `UNIQUE constraint failed: ${g.table}.outbox_seq`;
    const same =
      widened ||
      (original.error !== null
        ? rewritten.error !== null
        : rewritten.error === null &&
          rewritten.changes === original.changes &&
          restored.stamped === original.changes &&
          Bun.deepEquals(restored.rows, original.rows));
    if (!same)
      failures.push(
        `case ${i}: ${JSON.stringify(sql)} → ${JSON.stringify(out.sql)}: original ${original.error ?? `ok (${original.changes})`}, rewritten ${rewritten.error ?? `ok (${rewritten.changes})`}`,
      );
  }
  expect(failures).toEqual([]);
  console.log(`sql mutation fuzz: ${accepted} of ${MUTATION_CASES} mangled statements accepted and checked`);
  expect(accepted).toBeGreaterThan(MUTATION_CASES / 10);
}, 120_000);
