import { Database } from "bun:sqlite";
import { afterEach, beforeEach, test } from "bun:test";
import { Outbox, verifyFile } from "../src/index.ts";
import { drainSide, highestSeq } from "./support/queue.ts";
import { buildReferenceFile, referenceEnqueue } from "./support/reference-db.ts";
import { SLOW } from "./support/slow.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";

// Random operation sequences on one file shared by two namespaces, replayable by seed: even seeds
// on a file we create (the lean layout), odd seeds on one the reference created (the legacy
// layout). After every step the whole file must verify (every chain bridged, pending counts exact)
// apart from the reference worker's synced=1 leftovers, which are reported as such until an open
// for writing finishes them; and every row that appeared must have a seq above all the file held
// before, so a drained-empty queue never reuses one.

const NAMESPACES = ["a", "b"] as const;
const OPS = [
  "enqueue",
  "enqueue",
  "enqueue",
  "batch",
  "confirm",
  "deadLetter",
  "skip",
  "replay",
  "prune",
  "seed",
  "reopen",
  "referenceConfirm",
  "referenceEnqueue",
  "resequence",
  "failure",
] as const;

let tmp: TempDir;
let outboxes: Record<string, Outbox>;
beforeEach(() => {
  tmp = makeTempDir();
});
afterEach(() => {
  for (const ob of Object.values(outboxes)) ob.close();
  tmp.cleanup();
});

function random(seed: number): () => number {
  let s = seed;
  return () => {
    s = (s * 1103515245 + 12345) & 0x7fffffff;
    return s / 0x7fffffff;
  };
}

/** The reference's worker: marks heads synced=1 in one transaction and, unless it "crashes", logs and deletes them in another. */
function referenceConfirm(path: string, namespace: string, seqs: number[], crash: boolean): void {
  const db = new Database(path);
  try {
    db.run("PRAGMA busy_timeout = 1000");
    db.transaction(() => {
      for (const seq of seqs) db.run("UPDATE outbox_queue SET synced = 1 WHERE seq = ?", [seq]);
    })();
    if (crash) return;
    db.transaction(() => {
      for (const seq of seqs) {
        db.run("INSERT OR IGNORE INTO outbox_sync_log (seq, namespace, synced_at) VALUES (?, ?, ?)", [
          seq,
          namespace,
          new Date().toISOString(),
        ]);
        db.run("DELETE FROM outbox_queue WHERE seq = ?", [seq]);
      }
    })();
  } finally {
    db.close();
  }
}

// Two seeds (one per layout) by default; SQLOUTBOX_SLOW_TESTS=1 runs twelve, SQLOUTBOX_SEQUENCE_SEEDS any number.
const SEEDS = Number(process.env.SQLOUTBOX_SEQUENCE_SEEDS ?? (SLOW ? 12 : 2));

test.each(Array.from({ length: SEEDS }, (_, i) => i + 1))(
  "seed %d: any sequence of queue operations keeps every chain verifiable, the pending count exact and every new seq unused",
  (seed) => {
    const rnd = random(seed);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(rnd() * items.length)]!;
    const path = tmp.file("shared.db");
    if (seed % 2 === 1) buildReferenceFile(path);
    const pendingSeqs = () =>
      new Set(NAMESPACES.flatMap((ns) => outboxes[ns]!.fetchUnsynced(1_000_000).map((r) => r.seq)));
    outboxes = Object.fromEntries(
      NAMESPACES.map((ns) => [ns, new Outbox(path, ns, rnd() < 0.5 ? {} : { maxPending: 1_000 })]),
    );
    const history: string[] = [];
    for (let step = 0; step < 250; step++) {
      const ns = pick(NAMESPACES);
      const ob = outboxes[ns]!;
      const op = pick(OPS);
      history.push(`${step} ${op} ${ns}`);
      const head = ob.head();
      const highest = highestSeq(path);
      const before = pendingSeqs();
      switch (op) {
        case "enqueue":
          ob.enqueue(`T${step}`, "[]");
          break;
        case "batch":
          ob.enqueueBatch(
            Array.from({ length: 1 + Math.floor(rnd() * 4) }, (_, i) => ({ tag: `B${step}.${i}`, payload: "[]" })),
          );
          break;
        case "confirm":
          ob.confirm(ob.fetchUnsynced(Math.floor(rnd() * 4)).map((r) => r.seq));
          break;
        case "deadLetter":
          if (head) ob.deadLetter(head.seq, "max_attempts", "boom", "E");
          break;
        case "skip":
          if (head) ob.skipHead(head.seq);
          break;
        case "replay": {
          const dead = ob.listDead().filter((d) => d.replayedAt === null);
          if (dead.length > 0) ob.replayDead(pick(dead).seq);
          break;
        }
        case "prune":
          drainSide(ob).pruneSyncLog(0, new Date(Date.now() + 86_400_000));
          break;
        case "seed":
          drainSide(ob).seedSequence(highestSeq(path) + Math.floor(rnd() * 5));
          break;
        case "reopen":
          ob.close();
          outboxes[ns] = new Outbox(path, ns, { maxPending: ob.maxPending });
          break;
        case "referenceConfirm": {
          // The reference drains only its own files: ours log ranges it cannot write.
          const seqs = ob.fetchUnsynced(Math.floor(rnd() * 3)).map((r) => r.seq);
          if (seqs.length > 0 && seed % 2 === 1) referenceConfirm(path, ns, seqs, rnd() < 0.5);
          break;
        }
        case "referenceEnqueue": {
          const db = new Database(path);
          try {
            referenceEnqueue(db, ns, `R${step}`, "[]");
          } finally {
            db.close();
          }
          break;
        }
        case "resequence":
          drainSide(ob).resequenceAbove(Math.max(0, highestSeq(path) - Math.floor(rnd() * 4)));
          break;
        case "failure":
          if (head) {
            drainSide(ob).recordAttempt(head.seq);
            drainSide(ob).recordFailure(head.seq, "boom", "E", new Date());
          }
          break;
      }
      for (const seq of pendingSeqs()) {
        if (!before.has(seq) && seq <= highest)
          throw new Error(
            `new row ${seq} reuses a seq at or below ${highest}\nafter:\n${history.slice(-10).join("\n")}`,
          );
      }
      const verified = verifyFile(path);
      const problems = [
        ...verified.problems,
        ...verified.namespaces.flatMap((n) => [
          ...n.gaps.map((g) => `${n.namespace}: gap ${g.seq} -> ${g.prevSeq}`),
          ...n.problems.filter((p) => !p.includes("marked synced=1")).map((p) => `${n.namespace}: ${p}`),
        ]),
      ];
      for (const name of NAMESPACES) {
        const o = outboxes[name]!;
        const rows = o.fetchUnsynced(1_000_000);
        if (!o.verifyChain(rows).ok) problems.push(`${name}: verifyChain failed`);
        if (o.pendingCount() !== rows.length)
          problems.push(`${name}: pendingCount ${o.pendingCount()} != ${rows.length}`);
      }
      if (problems.length > 0) throw new Error(`${problems.join("; ")}\nafter:\n${history.slice(-10).join("\n")}`);
    }
  },
);
