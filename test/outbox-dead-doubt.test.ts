// Dead letters the remote may have applied, in the queue file: a skip of a row that was ever sent
// is in doubt, a letter in doubt or applied is never replayed blindly (force: in doubt only), a
// group is settled whole, a row skipped between the drain's read and its send is caught in the
// send's own transaction, and files written before letters said so read and migrate cleanly.
import { Database } from "bun:sqlite";
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { NotFoundError, ReplayRefusedError } from "../src/errors.ts";
import { findDeadLetters } from "../src/outbox/dead-letters.ts";
import { actOnSelection } from "../src/outbox/dead-selection.ts";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { hashTree } from "./support/dir-hash.ts";
import { errorOf } from "./support/errors.ts";
import { drainSide } from "./support/queue.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";

let tmp: TempDir;
const open: Outbox[] = [];
beforeEach(() => {
  tmp = makeTempDir("sqloutbox-doubt-");
});
afterEach(() => {
  for (const ob of open.splice(0)) ob.close();
  closeSharedOutboxes();
  tmp.cleanup();
});

/** `orders` in its own file with `count` rows, one at a time (each its own group). */
function orders(count: number): { ob: Outbox; seqs: number[] } {
  const ob = new Outbox(tmp.file("orders.db"), "orders");
  open.push(ob);
  const seqs = Array.from({ length: count }, (_, i) => ob.enqueue("INSERT INTO orders (id) VALUES (?)", `[${i + 1}]`));
  return { ob, seqs };
}

/** What the drain does before it sends the rows `seqs`: the head charged, the sent mark raised to the last. */
function send(ob: Outbox, seqs: number[]): void {
  drainSide(ob).recordAttempt(seqs[0]!, new Date(), seqs.at(-1)!, seqs);
}

describe("a letter's remote", () => {
  test("a head skipped before it was ever sent is not applied, and replays", () => {
    const { ob, seqs } = orders(2);
    ob.skipHead(seqs[0]!);
    expect(ob.getDead(seqs[0]!)!.remote).toBe("not applied");
    expect(ob.replayDead(seqs[0]!)).toBe(3);
  });

  test("a head skipped once sent is in doubt: its replay is refused, saying which, why and what to do, and nothing is replayed", () => {
    const { ob, seqs } = orders(3);
    send(ob, seqs.slice(0, 2));
    ob.skipHead(seqs[0]!);
    expect(ob.getDead(seqs[0]!)!.remote).toBe("in doubt");
    const error = errorOf<ReplayRefusedError>(() => ob.replayDead(seqs[0]!));
    expect(error).toBeInstanceOf(ReplayRefusedError);
    expect(error).toMatchObject({
      code: "E_REPLAY_REFUSED",
      namespace: "orders",
      seq: seqs[0],
      remote: "in doubt",
      file: ob.path,
    });
    expect(error.message).toContain(`dead letter ${seqs[0]} of namespace "orders"`);
    expect(error.message).toContain("got no answer");
    expect(error.message).toContain("--force");
    expect(ob.replayDeadMany([seqs[0]!])).toEqual({
      replayed: [],
      unchanged: [],
      refused: [{ seq: seqs[0]!, namespace: "orders", remote: "in doubt" }],
    });
    expect(ob.pendingCount()).toBe(2);
    expect(ob.getDead(seqs[0]!)!.replayedAt).toBeNull();
  });

  test("force replays a letter in doubt; a letter the remote applied is refused even so, and may be discarded", () => {
    const { ob, seqs } = orders(3);
    send(ob, seqs);
    ob.skipHead(seqs[0]!);
    ob.skipHead(seqs[1]!);
    expect(ob.replayDead(seqs[0]!, undefined, { force: true })).toBe(4);
    expect(drainSide(ob).settleLetters([seqs[1]!], "applied")).toBe(1);
    expect(ob.getDead(seqs[1]!)!.remote).toBe("applied");
    const error = errorOf<ReplayRefusedError>(() => ob.replayDead(seqs[1]!, undefined, { force: true }));
    expect(error).toMatchObject({ code: "E_REPLAY_REFUSED", remote: "applied" });
    expect(error.message).toContain("discard it");
    const report = actOnSelection(
      "discard",
      findDeadLetters(tmp.path, { replayed: false }).map((l) => ({ ...l, file: l.file })),
    );
    expect(report.done.map((d) => d.seq)).toEqual([seqs[1]!]);
  });

  test("the drain's settlement of a letter in doubt makes it replayable; a letter no longer in doubt is left alone", () => {
    const { ob, seqs } = orders(2);
    send(ob, seqs);
    ob.skipHead(seqs[0]!);
    expect(drainSide(ob).lettersInDoubt(0, 10)).toEqual([{ seq: seqs[0]!, laneKey: null, tenant: null }]);
    expect(drainSide(ob).settleLetters([seqs[0]!], "not applied")).toBe(1);
    expect(drainSide(ob).settleLetters([seqs[0]!], "applied")).toBe(0);
    expect(ob.getDead(seqs[0]!)!.remote).toBe("not applied");
    expect(drainSide(ob).lettersInDoubt(0, 10)).toEqual([]);
    expect(ob.replayDead(seqs[0]!)).toBe(3);
  });

  test("a selection replays what it may and refuses the rest; its dry run counts them as refused", () => {
    const { ob, seqs } = orders(3);
    send(ob, [seqs[0]!]);
    ob.skipHead(seqs[0]!);
    ob.skipHead(seqs[1]!);
    const letters = () => findDeadLetters(tmp.path, { replayed: false });
    const dry = actOnSelection("replay", letters(), { dryRun: true });
    expect(dry.done.map((d) => d.seq)).toEqual([seqs[1]!]);
    expect(dry.refusedLetters).toMatchObject([{ namespace: "orders", seq: seqs[0]!, remote: "in doubt" }]);
    expect(dry.refusedLetters[0]!.message).toContain("--force");
    const real = actOnSelection("replay", letters());
    expect(real.done.map((d) => d.seq)).toEqual(dry.done.map((d) => d.seq));
    expect(real.refusedLetters.map((l) => l.seq)).toEqual([seqs[0]!]);
    expect(ob.getDead(seqs[0]!)!.replayedAt).toBeNull();
    expect(actOnSelection("replay", letters(), { force: true }).done.map((d) => d.seq)).toEqual([seqs[0]!]);
  });
});

describe("groups", () => {
  test("a transaction across tables skipped once sent is in doubt whole: one letter's replay is refused for all, and settling one settles all", () => {
    const file = tmp.file("app.db");
    const producer = new SQLMiddleware({ dbFile: file });
    producer.transaction(() => {
      producer.push("orders", "INSERT INTO orders (id) VALUES (?)", [1]);
      producer.push("items", "INSERT INTO items (id) VALUES (?)", [1]);
    });
    const ob = new Outbox(file, "orders");
    const items = new Outbox(file, "items");
    open.push(ob, items);
    const head = ob.head()!.seq;
    const part = items.head()!.seq;
    send(ob, [head]);
    expect(ob.skipHead(head).seqs).toEqual([head, part]);
    expect(items.getDead(part)!.remote).toBe("in doubt"); // never sent itself: its group was
    expect(ob.replayDeadMany([head]).refused).toEqual([
      { seq: head, namespace: "orders", remote: "in doubt" },
      { seq: part, namespace: "items", remote: "in doubt" },
    ]);
    expect(drainSide(items).settleLetters([part], "applied")).toBe(2);
    expect(ob.getDead(head)!.remote).toBe("applied");
  });
});

describe("a row skipped between the drain's read and its send", () => {
  test("its letter turns in doubt in the send's own transaction: the batch may apply it", () => {
    const { ob, seqs } = orders(3);
    ob.skipHead(seqs[0]!); // read by the drain before, never sent: not applied so far
    expect(ob.getDead(seqs[0]!)!.remote).toBe("not applied");
    drainSide(ob).recordAttempt(seqs[1]!, new Date(), seqs[2]!, seqs);
    expect(ob.getDead(seqs[0]!)!.remote).toBe("in doubt");
    expect(ob.head()!.attempts).toBe(1);
  });

  test("one replayed meanwhile is not sent: nothing is charged, the sent mark stays", () => {
    const { ob, seqs } = orders(3);
    ob.skipHead(seqs[0]!);
    ob.replayDead(seqs[0]!);
    const error = errorOf(() => drainSide(ob).recordAttempt(seqs[1]!, new Date(), seqs[2]!, seqs));
    expect(error).toBeInstanceOf(NotFoundError);
    expect(error.message).toContain(`seq ${seqs[0]} of namespace "orders" was dead-lettered and replayed as seq 4`);
    expect(ob.head()!.attempts).toBe(0);
    expect(drainSide(ob).sentMark()).toBe(0);
  });
});

describe("files written before letters said what the remote did", () => {
  /** A file as an earlier version left it: letters (one sent and skipped), and no `remote` column. */
  function olderFile(): { file: string; seqs: number[] } {
    const { ob, seqs } = orders(3);
    send(ob, [seqs[0]!]);
    ob.skipHead(seqs[0]!);
    ob.close();
    open.splice(0);
    closeSharedOutboxes();
    const db = new Database(tmp.file("orders.db"));
    db.run("DROP INDEX idx_dead_in_doubt");
    db.run("ALTER TABLE outbox_dead_log DROP COLUMN remote");
    db.close();
    return { file: tmp.file("orders.db"), seqs };
  }

  test("are read without a change: their letters read as not applied", () => {
    const { seqs } = olderFile();
    const before = hashTree(tmp.path);
    expect(findDeadLetters(tmp.path).map((l) => [l.seq, l.remote])).toEqual([[seqs[0]!, "not applied"]]);
    expect(hashTree(tmp.path)).toEqual(before);
  });

  test("gain the column when opened for writing; their letters stay, and new ones say what they are", () => {
    const { file, seqs } = olderFile();
    const ob = new Outbox(file, "orders");
    open.push(ob);
    const db = new Database(file, { readonly: true });
    try {
      expect(db.query("SELECT name FROM pragma_table_info('outbox_dead_log') WHERE name = 'remote'").get()).toEqual({
        name: "remote",
      });
      // The drain's look for letters in doubt, after every batch, goes by an index of those only.
      expect(
        db
          .query<{ detail: string }, []>(
            "EXPLAIN QUERY PLAN SELECT seq FROM outbox_dead_log WHERE namespace = 'orders' AND seq > 0 AND seq <= 9 AND remote = 'in doubt'",
          )
          .get()!.detail,
      ).toContain("idx_dead_in_doubt");
    } finally {
      db.close();
    }
    expect(ob.getDead(seqs[0]!)!.remote).toBe("not applied");
    send(ob, [seqs[1]!]);
    ob.skipHead(seqs[1]!);
    expect(ob.getDead(seqs[1]!)!.remote).toBe("in doubt");
    expect(ob.replayDead(seqs[0]!)).toBe(4);
  });
});
