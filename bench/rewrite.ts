// Rewrite cost per statement (10 columns), per dialect and shape, and the push-time check of an
// uncached statement text. Prints one JSON line each:
// {"bench":"rewrite","dialect":…,"shape":…,"ns_per_stmt":…}. Target: ≤ 5 µs per statement.
import { injectOutboxSeq, toDialect } from "../src/sql/rewrite.ts";
import { validateStatement } from "../src/sql/statement.ts";
import { DIALECTS } from "../src/vocabulary.ts";
import type { BindValue } from "../src/vocabulary.ts";
import { sized } from "./support/smoke.ts";

const COLS = Array.from({ length: 10 }, (_, i) => `col_${i}`);
const ARGS: BindValue[] = COLS.map((_, i) => (i % 2 ? `value ${i}` : i));
const SHAPES: Record<string, { sql: string; args: BindValue[] }> = {
  insert: { sql: `INSERT INTO orders (${COLS.join(", ")}) VALUES (${COLS.map(() => "?").join(", ")})`, args: ARGS },
  update: {
    sql: `UPDATE orders SET ${COLS.slice(1)
      .map((c) => `${c} = ?`)
      .join(", ")}, note = 'it''s ?' WHERE ${COLS[0]} = ?`,
    args: [...ARGS.slice(1), ARGS[0]!],
  },
};
const ITERATIONS = Number(process.env.BENCH_ITERATIONS ?? sized(200_000, 1_000));
const WARMUP = sized(20_000, 100);

function measure(fn: () => unknown): number {
  for (let i = 0; i < WARMUP; i++) fn(); // warm up the JIT
  let best = Infinity;
  for (let round = 0; round < 3; round++) {
    const start = Bun.nanoseconds();
    for (let i = 0; i < ITERATIONS; i++) fn();
    best = Math.min(best, (Bun.nanoseconds() - start) / ITERATIONS);
  }
  return best;
}

let seq = 1;
for (const dialect of DIALECTS) {
  for (const [shape, { sql, args }] of Object.entries(SHAPES)) {
    const ns = measure(() => injectOutboxSeq(sql, args, seq++, dialect));
    console.log(JSON.stringify({ bench: "rewrite", dialect, shape, ns_per_stmt: Math.round(ns) }));
  }
}
const pg = SHAPES.update!;
const ns = measure(() => toDialect(pg.sql, pg.args, "postgres"));
console.log(JSON.stringify({ bench: "rewrite", dialect: "postgres", shape: "toDialect", ns_per_stmt: Math.round(ns) }));
// What a producer pays the first time it pushes a text (later pushes hit its cache): every dialect's lexer.
const check = measure(() => validateStatement(pg.sql, null));
console.log(
  JSON.stringify({ bench: "rewrite", dialect: "any", shape: "validateStatement", ns_per_stmt: Math.round(check) }),
);
