import type { ReservedSQL } from "bun";
import { BunSqlWriter, type PassTools, type Settled, settle, startStatement } from "./bun-sql.ts";
import { classifyPostgres } from "./classify.ts";
import { errorText, type Outcome, type PassResult } from "./isolate.ts";
import { describeServer, serverKeys, validateServer } from "./server-keys.ts";
import type { Statement } from "./writer.ts";
import type { WriterSpec } from "./writer-spec.ts";

/** The `postgres` writer: PostgreSQL through Bun.SQL, one pipelined transaction per batch. */
export const postgresWriter: WriterSpec = {
  dialect: "postgres",
  concurrent: true,
  keys: serverKeys(5432),
  validate: (connection) => validateServer(connection, ["postgres", "postgresql"]),
  describe: (connection) => describeServer(connection, "postgres"),
  create: (connection) => new BunSqlWriter("postgres", connection, classifyPostgres, postgresPass),
};

/**
 * How many bytes of queries Bun's PostgreSQL client writes in one event-loop turn before it stops
 * and waits to hear from the server (its MAX_PIPELINE_SIZE; measured with Bun 1.4.4: a pass of
 * ~121 KB still went whole, one of ~129 KB waited a round trip). Counted low, so `resume` may ask
 * once too often, never too seldom.
 */
const PIPELINE_TURN_BYTES = 64 * 1024;

type Began = Array<[string, Promise<Settled<unknown>>]>;

/**
 * One round trip: BEGIN, the string setting, every statement and COMMIT are sent at once. A
 * statement the server fails aborts its transaction, so the COMMIT behind it ends the transaction
 * with ROLLBACK (its answer's tag, checked) and nothing of the batch lands; the re-run without the
 * failed namespace is `runIsolated`'s. A statement Bun refuses itself never reaches the server and
 * would not abort it — a blind COMMIT would then commit the rest of its namespace. Bun refuses when
 * a query starts (more than 65 535 parameters, a value it cannot type), synchronously inside
 * `then`, so each statement is started, then looked at (`Bun.peek`), before the last message is
 * chosen: COMMIT when none was refused, ROLLBACK otherwise. When it binds later, Bun declares each
 * parameter's type from the value itself (text and NULL left to the server), so nothing is left to
 * refuse but memory. The setting is per transaction, not per connection, so a row's `set_config`
 * cannot outlive its batch; pipelined, it costs no round trip. A COMMIT refused for a row-fault
 * SQLSTATE (a deferred constraint) is reported as `commitError`; a `checking` pass then starts
 * with SET CONSTRAINTS ALL IMMEDIATE so the offending statement fails itself.
 */
export async function postgresPass(
  reserved: ReservedSQL,
  stmts: Statement[],
  checking: boolean,
  tools: PassTools,
): Promise<PassResult> {
  // Tagged, not `unsafe`: Bun sends a text without parameters given to `unsafe` as a simple
  // query, which it does not pipeline — BEGIN would cost a round trip of its own.
  const began: Began = [
    ["BEGIN", settle(reserved`BEGIN`)],
    ["SET", settle(reserved`SET LOCAL standard_conforming_strings = on`)],
  ];
  if (checking) began.push(["SET CONSTRAINTS", settle(reserved`SET CONSTRAINTS ALL IMMEDIATE`)]);
  const running = stmts.map((s) => startStatement(reserved, s, "postgres"));
  const refused = running.some((r) => Bun.peek.status(r.query) === "rejected");
  const end = settle(refused ? reserved`ROLLBACK` : reserved`COMMIT`);
  tools.ended(); // every message is out: a pass behind this one on the connection may follow at once
  const resumed = resume(reserved, stmts);
  try {
    return await outcome(
      stmts,
      began,
      running.map((r) => r.outcome),
      refused,
      end,
      tools,
    );
  } finally {
    await resumed;
  }
}

/** What the messages `postgresPass` sent came to: see there. */
async function outcome(
  stmts: Statement[],
  began: Began,
  running: Array<Promise<Outcome>>,
  refused: boolean,
  end: Promise<Settled<unknown>>,
  { classify, fail }: PassTools,
): Promise<PassResult> {
  for (const [what, done] of began) {
    const o = await done;
    if ("error" in o) throw fail(`${what} failed: ${errorText(o.error)}`, o.error);
  }
  const outcomes = await Promise.all(running);
  const ended = await end;
  if (refused) {
    if ("error" in ended) throw fail(`ROLLBACK failed: ${errorText(ended.error)}`, ended.error);
    return { outcomes, committed: false };
  }
  const allApplied = outcomes.every((o) => "result" in o);
  if ("error" in ended) {
    // PostgreSQL ends the transaction (rolled back) when COMMIT fails a deferred constraint.
    if (allApplied && classify(ended.error).kind === "row")
      return { outcomes, committed: false, commitError: ended.error };
    throw fail(`COMMIT failed: ${errorText(ended.error)}`, ended.error);
  }
  const tag = (ended.result as { command?: unknown }).command;
  if (tag === "ROLLBACK" && !allApplied) return { outcomes, committed: false };
  if (tag !== "COMMIT") throw fail(`COMMIT was answered with ${String(tag)}`, undefined);
  // Committed, so the server ran every statement it was sent; one that failed in the client
  // anyway (a row it sent back that Bun could not read, or memory) cannot be told from one never
  // sent. An outage: the drain settles the batch from the ledger, which this COMMIT moved.
  const k = outcomes.findIndex((o) => !("result" in o));
  if (k >= 0) {
    const error = (outcomes[k] as { error: unknown }).error;
    throw fail(
      `COMMIT succeeded, yet the statement of seq ${stmts[k]!.seq} failed in the client: ${errorText(error)}`,
      error,
    );
  }
  return { outcomes, committed: true };
}

/**
 * Makes Bun's PostgreSQL client send the rest of a pass at once. It writes PIPELINE_TURN_BYTES of
 * queries per event-loop turn, then waits for the server's first answer before it writes more — a
 * round trip per window — unless it is handed another query: a no-op in each following turn, one
 * per window the pass's bind messages fill, makes it go on (Bun 1.4.4, a 2 000-row pass of four
 * tables: 2 round trips → 1). The queue keeps its order, so the no-op lands behind COMMIT, in a
 * transaction of its own (were a client to put it first, inside ours: still a no-op); its answer
 * is never looked at. Awaited before the connection goes back to the pool.
 */
async function resume(reserved: ReservedSQL, stmts: Statement[]): Promise<void> {
  let bytes = 0;
  for (const s of stmts) bytes += bindBytes(s);
  const kicks: Array<Promise<unknown>> = [];
  for (let window = PIPELINE_TURN_BYTES; window < bytes; window += PIPELINE_TURN_BYTES) {
    await new Promise((next) => setImmediate(next));
    kicks.push(settle(reserved`SELECT 1`));
  }
  await Promise.all(kicks);
}

/** About how many bytes Bind and Execute of `stmt` take on the wire (a text's UTF-16 length for its UTF-8 bytes). */
function bindBytes(stmt: Statement): number {
  let n = 40;
  for (const a of stmt.args)
    n += 6 + (typeof a === "string" ? a.length : a instanceof Uint8Array ? a.byteLength : a === null ? 0 : 8);
  return n;
}
