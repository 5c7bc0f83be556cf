// The console's guarded actions on dead letters, in the library: a counted selection is replayed or
// given up in one transaction only while it is still exactly what was counted.
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { NotFoundError, SelectionChangedError } from "../src/errors.ts";
import { findDeadLetterRefs } from "../src/outbox/dead-letters.ts";
import { actOnSelection, type SelectionReport, withDeadSelection } from "../src/outbox/dead-selection.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { errorOf } from "./support/errors.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";

let tmp: TempDir;
let ob: Outbox;
beforeEach(() => {
  tmp = makeTempDir("sqloutbox-selection-");
  ob = new Outbox(tmp.file("orders.db"), "orders");
});
afterEach(() => {
  ob.close();
  tmp.cleanup();
});

/** `count` rows pushed one by one, each skipped to the dead letters at once: their seqs. */
function letters(count: number): number[] {
  return Array.from({ length: count }, (_, i) => {
    const seq = ob.enqueue("INSERT INTO orders (id) VALUES (?)", `[${i}]`);
    ob.skipHead(seq);
    return seq;
  });
}

describe("DeadSelection", () => {
  test("replays a selection that is still what was counted", () => {
    const seqs = letters(3);
    const done = withDeadSelection(ob.path, "orders", (s) => s.replay(seqs, { reason: "skipped" }));
    expect(done.replayed.map((r) => r.seq)).toEqual(seqs);
    expect(ob.fetchUnsynced(10)).toHaveLength(3);
  });

  test("refuses a selection a letter joined since it was counted, and replays nothing", () => {
    const counted = letters(2);
    letters(1);
    const err = errorOf(() => withDeadSelection(ob.path, "orders", (s) => s.replay(counted, {})));
    expect(err).toBeInstanceOf(SelectionChangedError);
    expect(err).toMatchObject({ code: "E_CONFLICT", namespace: "orders", file: ob.path });
    expect((err as Error).message).toContain("2 then, 3 now");
    expect(ob.fetchUnsynced(10)).toHaveLength(0);
    expect(ob.listDead().every((l) => l.replayedAt === null)).toBe(true);
  });

  test("refuses a selection a letter of which was replayed meanwhile", () => {
    const seqs = letters(2);
    ob.replayDead(seqs[0]!);
    const err = errorOf(() => withDeadSelection(ob.path, "orders", (s) => s.discard(seqs, {})));
    expect(err).toBeInstanceOf(SelectionChangedError);
    expect(ob.getDead(seqs[1]!)!.replayedAt).toBeNull();
  });

  test("discards letters: handled, never replayed, still in the log", () => {
    const seqs = letters(2);
    const done = withDeadSelection(ob.path, "orders", (s) => s.discard([seqs[0]!]));
    expect(done).toEqual({ discarded: [{ seq: seqs[0]!, namespace: "orders" }], unchanged: [] });
    expect(ob.deadCount()).toBe(1);
    const given = ob.getDead(seqs[0]!)!;
    expect(given.replayedAt).not.toBeNull();
    expect(given.replayedAsSeq).toBeNull();
    expect(errorOf(() => ob.replayDead(seqs[0]!)).message).toContain("was discarded at");
    const again = withDeadSelection(ob.path, "orders", (s) => s.discard([seqs[0]!]));
    expect(again).toEqual({ discarded: [], unchanged: [{ seq: seqs[0]!, namespace: "orders", replayedAsSeq: null }] });
  });

  test("discards a letter with its whole group", () => {
    const [first] = ob.enqueueBatch([
      { tag: "INSERT INTO orders (id) VALUES (?)", payload: "[1]" },
      { tag: "INSERT INTO orders (id) VALUES (?)", payload: "[2]" },
    ]);
    ob.skipHead(first!);
    const done = withDeadSelection(ob.path, "orders", (s) => s.discard([first!]));
    expect(done.discarded.map((s) => s.seq)).toEqual([first!, first! + 1]);
    expect(ob.deadCount()).toBe(0);
  });

  test("a seq that is no dead letter changes nothing", () => {
    const seqs = letters(1);
    const err = errorOf(() => withDeadSelection(ob.path, "orders", (s) => s.discard([...seqs, 99])));
    expect(err).toBeInstanceOf(NotFoundError);
    expect(ob.deadCount()).toBe(1);
  });

  test("never creates a file", () => {
    expect(() => withDeadSelection(tmp.file("nothing.db"), "nothing", () => 0)).toThrow();
    expect(Bun.file(tmp.file("nothing.db")).size).toBe(0);
  });
});

describe("actOnSelection", () => {
  /** The letters a filter finds in the file, not yet replayed or discarded: what the CLI and the console select. */
  const selected = (filter: Parameters<typeof findDeadLetterRefs>[1] = {}) =>
    findDeadLetterRefs({ dbDir: tmp.path, dbFile: ob.path }, { ...filter, replayed: false });
  const seqsOf = (report: SelectionReport) => report.done.map((d) => `${d.namespace}:${d.seq}`);

  test.each(["replay", "discard"] as const)(
    "%s: the dry run counts what the real run does — a letter brings its group, each letter once",
    (action) => {
      letters(1); // seq 1 alone
      const [head] = ob.enqueueBatch(
        [1, 2, 3].map((id) => ({ tag: "INSERT INTO orders (id) VALUES (?)", payload: `[${id}]` })),
        "app",
      );
      ob.skipHead(head!);
      // The selection meets only the group's head: its members come along.
      const mark = selected().filter((l) => l.seq === 1 || l.seq === head);
      const dry = actOnSelection(action, mark, { dryRun: true });
      expect(dry.selected).toBe(2);
      expect(seqsOf(dry)).toEqual(["orders:1", "orders:2", "orders:3", "orders:4"]);
      expect(ob.deadCount()).toBe(4); // a dry run changes nothing
      const real = actOnSelection(action, mark);
      expect(seqsOf(real)).toEqual(seqsOf(dry));
      expect(real.unchanged).toEqual([]);
      expect(ob.deadCount()).toBe(0);
      if (action === "replay") expect(real.done.map((d) => d.newSeq)).toEqual([5, 6, 7, 8]);
      else expect(ob.pendingCount()).toBe(0);
    },
  );

  test("with expect, a selection that does not hold that many letters is refused and nothing changes", () => {
    letters(3);
    const report = actOnSelection("discard", selected(), { expect: 2, guard: {} });
    expect(report.refused?.code).toBe("E_CONFLICT");
    expect(report.refused?.message).toContain("holds 3 letter(s) now, not the 2 expected");
    expect([report.done, ob.deadCount()]).toEqual([[], 3]);
  });

  test("with a guard, a letter dead-lettered after the count refuses the table's transaction: it is reported, nothing changes", () => {
    const counted = selected();
    letters(2);
    const late = selected();
    expect(late).toHaveLength(2);
    const report = actOnSelection("discard", late.slice(0, 1), { guard: {} });
    expect(report.failed).toHaveLength(1);
    expect(report.failed[0]!.error).toBeInstanceOf(SelectionChangedError);
    expect([counted, report.done, ob.deadCount()]).toEqual([[], [], 2]);
  });
});

describe("dead-letter filters", () => {
  test("select by error text, case-insensitive, and by a time window", () => {
    const [a, b] = letters(2);
    ob.deadLetter(
      ob.enqueue("INSERT INTO orders (id) VALUES (?)", "[9]"),
      "max_attempts",
      "23502: NULL in note",
      "23502",
    );
    const refs = (filter: Parameters<typeof findDeadLetterRefs>[1]) =>
      findDeadLetterRefs({ dbDir: tmp.path, dbFile: ob.path }, filter).map((r) => r.seq);
    expect(refs({ error: "null IN" })).toHaveLength(1);
    expect(refs({ error: "23502" })).toHaveLength(1);
    expect(refs({ error: "100%" })).toEqual([]);
    expect(refs({ until: new Date(Date.now() + 60_000) })).toHaveLength(3);
    expect(refs({ until: new Date(Date.now() - 60_000) })).toEqual([]);
    expect(refs({ reason: "skipped" })).toEqual([a!, b!]);
  });
});
