import type { Statement } from "bun:sqlite";
import { NotFoundError, SelectionChangedError } from "../errors.ts";
import { Appender } from "./append.ts";
import {
  deadLetterWhere,
  purgeCandidates,
  type DeadLetterFilter,
  type DeadDiscards,
  type DeadReplays,
  type PurgeOutcome,
  type PurgeRule,
  replayRefusal,
} from "./dead-letters.ts";
import { QueueFile } from "./queue-file.ts";
import { DEAD_ROW_COLUMNS, type DeadLetter, type DeadReason, type LetterRemote } from "./rows.ts";
import { LAYOUTS } from "./schema.ts";
import { isoTimestamp } from "./timestamp.ts";

/** A letter in doubt as the drain settles it: its seq, and what says which ledger row accounts for it. */
export interface LetterInDoubt {
  seq: number;
  laneKey: string | null;
  tenant: string | null;
}

/** What the remote may have done with a group's letters: the worst of them (they were sent together). */
function remoteOfGroup(group: readonly DeadLetter[]): LetterRemote {
  if (group.some((l) => l.remote === "applied")) return "applied";
  return group.some((l) => l.remote === "in doubt") ? "in doubt" : "not applied";
}

/** The rows a dead-lettering moved: the group of the head, in seq order (other namespaces' parts included). */
export interface DeadLettered {
  seqs: number[];
  /** Namespaces of the file whose rows moved besides the one asked (a group that spans tables). */
  others: string[];
}

/**
 * One queue's dead log (outbox_dead_log): moving the head's group there so its namespace advances
 * — the drain at max_attempts, the operator's skip — and the operator's work on it: replaying
 * letters at the tail (a group as a group again) or discarding them, purging and pruning them
 * without breaking a chain, reading them.
 */
export class DeadLog {
  readonly #file: QueueFile;
  readonly #appender: Appender;
  /** Views of the file's other namespaces and their appenders, for groups that span them (replay). */
  readonly #others = new Map<string, { view: QueueFile; appender: Appender }>();
  readonly #move: Statement;
  readonly #remove: Statement;

  constructor(file: QueueFile, appender: Appender) {
    this.#file = file;
    this.#appender = appender;
    // A group is tried, charged and failed as one: its head carries the attempts and the error
    // (?6, ?7, ?8), which every row of it keeps in the log unless the caller says why (?1, ?2).
    this.#move = file.prepare(
      `INSERT INTO outbox_dead_log (seq, namespace, source, tag, payload, prev_seq, created_at, attempts, error, error_class, reason, dead_at, grp, traceparent, tracestate, lane_key, tenant, remote)
       SELECT seq, namespace, source, tag, payload, prev_seq, created_at, max(attempts, ?6),
         coalesce(?1, last_error, ?7), coalesce(?2, last_error_class, ?8), ?3, ?4, grp, traceparent, tracestate, lane_key, tenant, ?9
       FROM outbox_queue WHERE seq = ?5`,
    );
    this.#remove = file.prepare("DELETE FROM outbox_queue WHERE seq = ?");
  }

  /**
   * See Outbox.deadLetter: the head and, when it starts a group, every other row of its group —
   * this namespace's run behind it and, for a group that spans tables, the parts in the others —
   * in one transaction, so nothing of the group is left to deliver. Every letter keeps its own
   * error (else the head's) and the head's attempts, unless `error` says why it moved. The group's
   * letters are "in doubt" (see LetterRemote) when `inDoubt` says so — the drain, which knows the
   * batches it has in flight — or, unsaid (an operator), when a row of it was ever sent: at or below
   * its namespace's sent mark, a batch carrying it may be in flight or may have committed unanswered.
   */
  deadLetter(
    seq: number,
    reason: DeadReason,
    error: string | null,
    errorClass: string | null,
    inDoubt?: boolean,
  ): DeadLettered {
    const file = this.#file;
    return file.write("cannot dead-letter", () => {
      this.#requireHead(seq);
      const rows = this.#groupOf(seq);
      const doubt = inDoubt ?? rows.some((r) => r.seq <= file.sentMark(r.namespace));
      const head = file.db
        .query<{ attempts: number; error: string | null; errorClass: string | null }, [number]>(
          "SELECT attempts, last_error AS error, last_error_class AS errorClass FROM outbox_queue WHERE seq = ?",
        )
        .get(seq)!;
      const at = isoTimestamp();
      const heads = new Map<string, number | null>();
      for (const r of rows) if (!heads.has(r.namespace)) heads.set(r.namespace, this.#headOf(r.namespace));
      for (const r of rows) {
        this.#move.run(
          error,
          errorClass,
          reason,
          at,
          r.seq,
          head.attempts,
          head.error,
          head.errorClass,
          doubt ? "in doubt" : null,
        );
        this.#remove.run(r.seq);
      }
      const others = [...heads.keys()].filter((ns) => ns !== file.namespace);
      if (rows.length > 1) file.db.query("DELETE FROM outbox_group WHERE grp = ?").run(rows[0]!.grp);
      // A part moved from behind a namespace's head (another's, or this one's: the head of a key's
      // lane behind other keys) leaves a hole there.
      for (const ns of heads.keys())
        if (heads.get(ns) !== rows.find((r) => r.namespace === ns)!.seq) LAYOUTS[file.layout].closeHole(file.db, ns);
      return { seqs: rows.map((r) => r.seq), others };
    });
  }

  /**
   * The rows of the group `seq` starts (it is this namespace's head), seq order: the head alone
   * when it has no group; its namespace's run of the group; and, when the group spans
   * namespaces (outbox_group), every row of it in the file.
   */
  #groupOf(seq: number): Array<{ seq: number; namespace: string; grp: number | null }> {
    const db = this.#file.db;
    const head = db.query<{ grp: number | null }, [number]>("SELECT grp FROM outbox_queue WHERE seq = ?").get(seq)!;
    if (head.grp === null) return [{ seq, namespace: this.#file.namespace, grp: null }];
    const span = db
      .query<{ last: number }, [number]>("SELECT last_seq AS last FROM outbox_group WHERE grp = ?")
      .get(head.grp);
    if (span) {
      return db
        .query<{ seq: number; namespace: string; grp: number }, [number, number]>(
          "SELECT seq, namespace, grp FROM outbox_queue WHERE seq >= ?1 AND seq <= ?2 AND grp = ?1 ORDER BY seq",
        )
        .all(head.grp, span.last);
    }
    const run: Array<{ seq: number; namespace: string; grp: number | null }> = [];
    for (const row of this.#file.pendingRows(seq - 1)) {
      if (row.grp !== head.grp) break;
      run.push({ seq: row.seq, namespace: row.namespace, grp: row.grp });
    }
    return run;
  }

  #headOf(namespace: string): number | null {
    return (
      this.#file.db
        .query<{ seq: number }, [string]>(
          "SELECT seq FROM outbox_queue WHERE namespace = ? AND synced = 0 ORDER BY seq LIMIT 1",
        )
        .get(namespace)?.seq ?? null
    );
  }

  /**
   * See Outbox.replayDead: the letter's whole group when it has one; returns this letter's new seq.
   * A letter the remote may have applied is refused (ReplayRefusedError) unless `force` (in doubt only).
   */
  replay(seq: number, source: string | undefined, force = false): number {
    const dead = this.#file.read("cannot read dead letter", () => this.#dead(seq));
    if (!dead) throw this.#notDead(seq);
    if (dead.replayedAt !== null) {
      throw this.#file.invalid(
        dead.replayedAsSeq === null
          ? `dead letter ${seq} was discarded at ${dead.replayedAt}: it is never replayed`
          : `dead letter ${seq} was already replayed as seq ${dead.replayedAsSeq} at ${dead.replayedAt}`,
      );
    }
    const { replayed, refused } = this.replayMany([seq], source, undefined, force);
    const mine = refused.find((r) => r.seq === seq && r.namespace === this.#file.namespace);
    if (mine !== undefined) throw replayRefusal({ ...mine, file: this.#file.path });
    return replayed.find((r) => r.seq === seq && r.namespace === this.#file.namespace)!.newSeq;
  }

  /**
   * See Outbox.replayDeadMany (`ordered` ascending, without duplicates). A letter of a group brings
   * its whole group (other namespaces' parts included), replayed as one group again; letters
   * without a group are replayed each alone. One transaction for all. With `selection`, the
   * transaction first checks that `ordered` are exactly the unreplayed letters of this namespace
   * that `selection` matches, and throws SelectionChangedError (nothing replayed) when not. A group
   * the remote applied, or may have ("in doubt", unless `force`), is refused: left as it is and
   * reported in `refused`, each letter once, with the group's state.
   */
  replayMany(
    ordered: readonly number[],
    source: string | undefined,
    selection?: DeadLetterFilter,
    force = false,
  ): DeadReplays {
    const file = this.#file;
    const qdb = file.queueDb;
    // Its groups would end the producer's: replay is an operator's transaction of its own.
    if (qdb.group !== null) throw file.invalid("dead letters cannot be replayed inside outbox.transaction");
    return file.read("cannot replay dead letters", () =>
      qdb.transaction(() => {
        if (selection) this.#requireSelection(ordered, selection);
        const out: DeadReplays = { replayed: [], unchanged: [], refused: [] };
        const done = new Set<string>();
        for (const seq of ordered) {
          const dead = this.#dead(seq);
          if (!dead) throw this.#notDead(seq);
          // Replayed (or refused) with its group a moment ago, in this transaction: counted once.
          if (done.has(`${dead.namespace}\0${seq}`)) continue;
          if (dead.replayedAt !== null) {
            out.unchanged.push({ seq, namespace: dead.namespace, replayedAsSeq: dead.replayedAsSeq });
            continue;
          }
          const group = this.#letterGroup(dead);
          const remote = remoteOfGroup(group);
          if (remote === "applied" || (remote === "in doubt" && !force)) {
            for (const letter of group) {
              out.refused.push({ seq: letter.seq, namespace: letter.namespace, remote });
              done.add(`${letter.namespace}\0${letter.seq}`);
            }
            continue;
          }
          qdb.nextGroup();
          for (const letter of group) {
            const [newSeq] = this.#appenderOf(letter.namespace).appendToGroup(
              [{ tag: letter.tag, payload: letter.payload }],
              source ?? letter.source,
              {
                traceparent: letter.traceparent,
                tracestate: letter.tracestate,
                key: letter.laneKey,
                tenant: letter.tenant,
              },
            );
            file.db
              .query("UPDATE outbox_dead_log SET replayed_at = ?, replayed_as_seq = ? WHERE seq = ? AND namespace = ?")
              .run(qdb.group!.createdAt, newSeq!, letter.seq, letter.namespace);
            out.replayed.push({ seq: letter.seq, namespace: letter.namespace, newSeq: newSeq! });
            done.add(`${letter.namespace}\0${letter.seq}`);
          }
        }
        return out;
      }),
    );
  }

  /**
   * Discards letters — gives them up for good, never delivered — each with the unreplayed letters
   * of its group (other namespaces' parts included), in ONE transaction: `replayed_at` is set and
   * `replayed_as_seq` left NULL, so they count as handled — no longer dead letters to act on, never
   * replayed, pruned after retain_replayed_days like replayed ones — and stay in the log, where the
   * chain may still need them, with their own error. Letters replayed or discarded before are
   * reported, not changed. `selection` as in replayMany; a seq that is no dead letter here throws
   * NotFoundError and nothing changes.
   */
  discardMany(ordered: readonly number[], selection?: DeadLetterFilter): DeadDiscards {
    const file = this.#file;
    return file.write("cannot discard dead letters", () => {
      if (selection) this.#requireSelection(ordered, selection);
      const out: DeadDiscards = { discarded: [], unchanged: [] };
      const done = new Set<string>();
      const at = isoTimestamp();
      const mark = file.db.query(
        "UPDATE outbox_dead_log SET replayed_at = ? WHERE seq = ? AND namespace = ? AND replayed_at IS NULL",
      );
      for (const seq of ordered) {
        const dead = this.#dead(seq);
        if (!dead) throw this.#notDead(seq);
        if (done.has(`${dead.namespace}\0${seq}`)) continue;
        if (dead.replayedAt !== null) {
          out.unchanged.push({ seq, namespace: dead.namespace, replayedAsSeq: dead.replayedAsSeq });
          continue;
        }
        for (const letter of this.#letterGroup(dead)) {
          const key = `${letter.namespace}\0${letter.seq}`;
          if (done.has(key)) continue;
          mark.run(at, letter.seq, letter.namespace);
          out.discarded.push({ seq: letter.seq, namespace: letter.namespace });
          done.add(key);
        }
      }
      return out;
    });
  }

  /**
   * Throws SelectionChangedError unless `ordered` are exactly the unreplayed letters of this namespace that
   * `filter` matches now.
   */
  #requireSelection(ordered: readonly number[], filter: DeadLetterFilter): void {
    const file = this.#file;
    const { where, params } = deadLetterWhere({ ...filter, namespace: file.namespace, replayed: false });
    const now = file.db
      .query<{ seq: number }, string[]>(`SELECT seq FROM outbox_dead_log ${where} ORDER BY seq`)
      .all(...params)
      .map((r) => r.seq);
    if (now.length === ordered.length && now.every((seq, i) => seq === ordered[i])) return;
    throw new SelectionChangedError(
      `the dead letters of namespace "${file.namespace}" that the filter selects changed since they were counted: ${ordered.length} then, ${now.length} now (${file.path}); nothing was changed`,
      file.path,
      file.namespace,
    );
  }

  /** The unreplayed letters dead-lettered with `dead`, seq order: itself alone, or its group (every namespace). */
  #letterGroup(dead: DeadLetter): DeadLetter[] {
    if (dead.grp === null) return [dead];
    return this.#file.db
      .query<DeadLetter, [number]>(
        `SELECT ${DEAD_ROW_COLUMNS} FROM outbox_dead_log WHERE grp = ? AND replayed_at IS NULL ORDER BY seq`,
      )
      .all(dead.grp);
  }

  /**
   * See Outbox.listDeadGroup: the letters of `seq`'s group that share its replay state (one dead-lettering,
   * or one replay).
   */
  groupOf(seq: number): DeadLetter[] {
    return this.#file.read("cannot read dead letters", () => {
      const dead = this.#dead(seq);
      if (!dead) return [];
      if (dead.grp === null) return [dead];
      return this.#file.db
        .query<DeadLetter, [number, string | null]>(
          `SELECT ${DEAD_ROW_COLUMNS} FROM outbox_dead_log WHERE grp = ?1 AND replayed_at IS ?2 ORDER BY seq`,
        )
        .all(dead.grp, dead.replayedAt);
    });
  }

  #appenderOf(namespace: string): Appender {
    if (namespace === this.#file.namespace) return this.#appender;
    let other = this.#others.get(namespace);
    if (other === undefined) {
      const view = new QueueFile(this.#file.queueDb.acquire(), namespace);
      this.#others.set(namespace, (other = { view, appender: new Appender(view, null) }));
    }
    return other.appender;
  }

  /**
   * This namespace's letters in doubt (see LetterRemote) with a seq in `(after, through]`, seq order:
   * what the drain may settle once it knows what the remote did. Replayed or discarded ones
   * included: what the remote did is worth knowing all the same.
   */
  lettersInDoubt(after: number, through: number): LetterInDoubt[] {
    const file = this.#file;
    return file.read("cannot read dead letters", () =>
      file.db
        .query<LetterInDoubt, [string, number, number]>(
          "SELECT seq, lane_key AS laneKey, tenant FROM outbox_dead_log WHERE namespace = ?1 AND seq > ?2 AND seq <= ?3 AND remote = 'in doubt' ORDER BY seq",
        )
        .all(file.namespace, after, through),
    );
  }

  /**
   * Settles letters of this namespace that are in doubt: the remote applied them, or did not and
   * never will — and with each, the rest of its group (every namespace of the file): a group is
   * applied whole or not at all. One transaction; letters no longer in doubt are left alone.
   * Returns how many changed.
   */
  settleLetters(seqs: readonly number[], remote: "applied" | "not applied"): number {
    if (seqs.length === 0) return 0;
    const file = this.#file;
    const value = remote === "applied" ? "applied" : null;
    return file.write("cannot settle dead letters", () => {
      const grpOf = file.db.query<{ grp: number | null }, [string, number]>(
        "SELECT grp FROM outbox_dead_log WHERE namespace = ?1 AND seq = ?2 AND remote = 'in doubt'",
      );
      const mark = file.db.query(
        "UPDATE outbox_dead_log SET remote = ?1 WHERE namespace = ?2 AND seq = ?3 AND remote = 'in doubt'",
      );
      const markGroup = file.db.query("UPDATE outbox_dead_log SET remote = ?1 WHERE grp = ?2 AND remote = 'in doubt'");
      let changed = 0;
      for (const seq of seqs) {
        const grp = grpOf.get(file.namespace, seq)?.grp;
        if (grp === undefined) continue;
        changed += (grp === null ? mark.run(value, file.namespace, seq) : markGroup.run(value, grp)).changes;
      }
      return changed;
    });
  }

  /** See Outbox.purgeDead. */
  purge(rule: PurgeRule): PurgeOutcome {
    const file = this.#file;
    return file.write("cannot purge dead letters", () => {
      const outcome = purgeCandidates(file.db, file.namespace, rule);
      const remove = file.db.query("DELETE FROM outbox_dead_log WHERE seq = ? AND namespace = ?");
      for (const letter of outcome.purged) remove.run(letter.seq, file.namespace);
      return outcome;
    });
  }

  list(): DeadLetter[] {
    const file = this.#file;
    return file.read("cannot list dead letters", () =>
      file.db
        .query<DeadLetter, [string]>(`SELECT ${DEAD_ROW_COLUMNS} FROM outbox_dead_log WHERE namespace = ? ORDER BY seq`)
        .all(file.namespace),
    );
  }

  get(seq: number): DeadLetter | null {
    return this.#file.read("cannot read dead letter", () => this.#dead(seq));
  }

  /** Dead letters not yet replayed. */
  count(): number {
    const file = this.#file;
    return file.read(
      "cannot count dead letters",
      () =>
        file.db
          .query<{ n: number }, [string]>(
            "SELECT count(*) AS n FROM outbox_dead_log WHERE namespace = ? AND replayed_at IS NULL",
          )
          .get(file.namespace)!.n,
    );
  }

  /**
   * `seq` must head its namespace — or, pushed with a key or a tenant, head its lane: no earlier
   * pending row of its group (it starts the group's run here), and none of its lane — with a key,
   * the key's rows and those without a key (they wait for every lane); with a tenant, only that
   * tenant's rows count (each tenant's lanes are its own), and without a key every earlier row of
   * the tenant does. In a table with lanes that is the head of a held lane, or a key behind it.
   */
  #requireHead(seq: number): void {
    const file = this.#file;
    const head = file.headSeq();
    if (head === seq) return;
    const row = file.db
      .query<{ key: string | null; grp: number | null; tenant: string | null }, [number, string]>(
        "SELECT lane_key AS key, grp, tenant FROM outbox_queue WHERE seq = ? AND namespace = ? AND synced = 0",
      )
      .get(seq, file.namespace);
    if (!row) throw new NotFoundError(`no pending row with seq ${seq} in namespace "${file.namespace}" (${file.path})`);
    const before =
      (row.key !== null || row.tenant !== null) &&
      file.db
        .query(
          `SELECT 1 FROM outbox_queue WHERE namespace = ?1 AND synced = 0 AND seq < ?2 AND (grp = ?4 OR (${
            row.tenant === null ? "" : "tenant = ?5 AND "
          }(?3 IS NULL OR lane_key IS NULL OR lane_key = ?3))) LIMIT 1`,
        )
        .get(...[file.namespace, seq, row.key, row.grp, ...(row.tenant === null ? [] : [row.tenant])]);
    if ((row.key !== null || row.tenant !== null) && !before) return;
    const lane = [row.tenant === null ? null : `tenant "${row.tenant}"`, row.key === null ? null : `key "${row.key}"`]
      .filter((w) => w !== null)
      .join(", ");
    throw file.invalid(
      `seq ${seq} is not the head of namespace "${file.namespace}" (the head is ${head})${lane === "" ? "" : `, nor the first pending row of its lane (${lane})`}`,
    );
  }

  #dead(seq: number): DeadLetter | null {
    return this.#file.db
      .query<DeadLetter, [number, string]>(
        `SELECT ${DEAD_ROW_COLUMNS} FROM outbox_dead_log WHERE seq = ? AND namespace = ?`,
      )
      .get(seq, this.#file.namespace);
  }

  #notDead(seq: number): NotFoundError {
    return new NotFoundError(
      `no dead letter with seq ${seq} in namespace "${this.#file.namespace}" (${this.#file.path})`,
    );
  }

  /** Closes the views of other namespaces opened for replays. */
  close(): void {
    for (const { view } of this.#others.values()) view.close();
    this.#others.clear();
  }
}
