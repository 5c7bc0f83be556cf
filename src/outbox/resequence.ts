import type { SQLQueryBindings } from "bun:sqlite";
import type { Appender } from "./append.ts";
import { QUEUE_EXTRA_COLUMNS } from "./layout.ts";
import type { QueueFile } from "./queue-file.ts";
import { LAYOUTS } from "./schema.ts";
import { isoTimestamp } from "./timestamp.ts";

/** What `DrainQueue.resequenceAbove` moved: `count` pending rows from `oldFirst..oldLast` to `newFirst..newLast`. */
export interface Resequenced {
  count: number;
  oldFirst: number;
  oldLast: number;
  newFirst: number;
  newLast: number;
}

/**
 * What a row moved above a seq carries to its copy: the reference's columns of an event and every
 * column we add (QUEUE_EXTRA_COLUMNS: a column added there moves with its row) but the sent mark
 * that versions before the ledger kept on the head (a copy was never sent). Its place, seq and
 * ord, is the layout's to give (insertSql). `namespace` first: insertSql's `?1`.
 */
const MOVED = [
  "namespace",
  "created_at",
  "source",
  "tag",
  "payload",
  "prev_seq",
  ...QUEUE_EXTRA_COLUMNS.map(([name]) => name).filter((name) => name !== "sent_through"),
];
/** A copy's values, in MOVED's order. */
const VALUES = MOVED.map((_, i) => `?${i + 1}`);
/** Where a copy is linked on and grouped anew, in a row of MOVED. */
const PREV = MOVED.indexOf("prev_seq");
const GROUP = MOVED.indexOf("grp");

/** The columns an event keeps under the same name in the dead log; its last failure becomes the letter's error. */
const EVENT =
  "seq, namespace, source, tag, payload, prev_seq, created_at, attempts, grp, traceparent, tracestate, lane_key, tenant";
/** The old row, recorded as a dead letter `resequenced` at ?2 and replayed at once as ?3. */
const RECORD = `INSERT INTO outbox_dead_log (${EVENT}, error, error_class, reason, dead_at, replayed_at, replayed_as_seq)
  SELECT ${EVENT}, last_error, last_error_class, 'resequenced', ?2, ?2, ?3 FROM outbox_queue WHERE seq = ?1`;

/**
 * Moves the namespace's WHOLE pending queue, in order, above `minSeq` when its head is at or below
 * it (see DrainQueue.resequenceAbove), in one transaction of `file`: seeds the sequence, then per
 * row appends a copy at the tail and records the old row in the dead log, replayed as the new seq.
 */
export function resequenceAbove(file: QueueFile, appender: Appender, minSeq: number): Resequenced | null {
  const { db, namespace } = file;
  const layout = LAYOUTS[file.layout];
  return file.write("cannot resequence", () => {
    const range = db
      .query<{ first: number | null; last: number | null; count: number }, [string]>(
        "SELECT min(seq) AS first, max(seq) AS last, count(*) AS count FROM outbox_queue WHERE namespace = ? AND synced = 0",
      )
      .get(namespace)!;
    if (range.first === null || range.last === null || range.first > minSeq) return null;
    layout.raiseSequence(db, minSeq);
    // Each row as [seq, ...MOVED].
    const page = db.query<Record<string, never>, [string, number, number]>(
      `SELECT seq, ${MOVED.join(", ")} FROM outbox_queue WHERE namespace = ? AND synced = 0 AND seq > ? AND seq <= ? ORDER BY seq LIMIT 1000`,
    );
    const copy = db.query(layout.insertSql(MOVED, VALUES));
    const startGroup = db.query("UPDATE outbox_queue SET grp = ?1 WHERE seq = ?1");
    const record = db.query(RECORD);
    const remove = db.query("DELETE FROM outbox_queue WHERE seq = ? AND namespace = ?");
    const at = isoTimestamp();
    let after = range.first - 1;
    let newFirst = 0;
    let newLast = 0;
    // New seqs are all above range.last (the sequence is at least there), so paging by old seq
    // never meets a copy. The first copy links to the old tail, which stays in the dead log;
    // each later one to the copy before it (the tail from then on), as a batch enqueue links.
    let prev = appender.tail();
    // A group moves as a group: its copies form a new one, named by its first copy's seq. (A group
    // that spans namespaces is moved here only in this namespace: its parts are delivered apart.)
    let oldGroup: number | null = null;
    let newGroup: number | null = null;
    for (
      let rows = page.values(namespace, after, range.last);
      rows.length > 0;
      rows = page.values(namespace, after, range.last)
    ) {
      for (const [oldSeq, ...values] of rows as [number, ...SQLQueryBindings[]][]) {
        const grp = values[GROUP] as number | null;
        const continues = grp !== null && grp === oldGroup;
        values[PREV] = prev;
        values[GROUP] = continues ? newGroup : null;
        const seq = Number(copy.run(...values).lastInsertRowid);
        if (grp !== null && !continues) startGroup.run((newGroup = seq));
        oldGroup = grp;
        prev = seq;
        record.run(oldSeq, at, seq);
        remove.run(oldSeq, namespace);
        if (newFirst === 0) newFirst = seq;
        newLast = seq;
        after = oldSeq;
      }
    }
    return { count: range.count, oldFirst: range.first, oldLast: range.last, newFirst, newLast };
  });
}
