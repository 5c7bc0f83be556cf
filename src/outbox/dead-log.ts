import { NotFoundError } from "../errors.ts";
import type { Appender } from "./append.ts";
import { purgeCandidates, type DeadReplays, type PurgeOutcome, type PurgeRule } from "./dead-letters.ts";
import type { QueueFile } from "./queue-file.ts";
import { DEAD_ROW_COLUMNS, type DeadLetter, type DeadReason } from "./rows.ts";
import { isoTimestamp } from "./timestamp.ts";

/**
 * One queue's dead log (outbox_dead_log): moving the head there so its namespace advances — the
 * drain at max_attempts, the operator's skip — and the operator's work on it: replaying letters at
 * the tail, purging and pruning them without breaking a chain, reading them.
 */
export class DeadLog {
  readonly #file: QueueFile;
  readonly #appender: Appender;

  constructor(file: QueueFile, appender: Appender) {
    this.#file = file;
    this.#appender = appender;
  }

  /** See Outbox.deadLetter. */
  deadLetter(seq: number, reason: DeadReason, error: string | null, errorClass: string | null): void {
    const file = this.#file;
    file.write("cannot dead-letter", () => {
      this.#requireHead(seq);
      file.db
        .query(
          `INSERT INTO outbox_dead_log (seq, namespace, source, tag, payload, prev_seq, created_at, attempts, error, error_class, reason, dead_at)
           SELECT seq, namespace, source, tag, payload, prev_seq, created_at, attempts,
             coalesce(?1, last_error), coalesce(?2, last_error_class), ?3, ?4
           FROM outbox_queue WHERE seq = ?5 AND namespace = ?6`,
        )
        .run(error, errorClass, reason, isoTimestamp(), seq, file.namespace);
      file.db.query("DELETE FROM outbox_queue WHERE seq = ? AND namespace = ?").run(seq, file.namespace);
    });
  }

  /** See Outbox.replayDead. */
  replay(seq: number, source: string | undefined): number {
    return this.#file.write("cannot replay dead letter", () => {
      const dead = this.#dead(seq);
      if (!dead) throw this.#notDead(seq);
      if (dead.replayedAt !== null) {
        throw this.#file.invalid(`dead letter ${seq} was already replayed as seq ${dead.replayedAsSeq} at ${dead.replayedAt}`);
      }
      const now = isoTimestamp();
      const newSeq = this.#appender.appender(now)(dead.tag, dead.payload, source ?? dead.source, this.#appender.tail());
      this.#markReplayed(seq, newSeq, now);
      return newSeq;
    });
  }

  /** See Outbox.replayDeadMany (`ordered` ascending, without duplicates). */
  replayMany(ordered: readonly number[], source: string | undefined): DeadReplays {
    return this.#file.write("cannot replay dead letters", () => {
      const out: DeadReplays = { replayed: [], skipped: [] };
      const now = isoTimestamp(); // one transaction, one time
      const append = this.#appender.appender(now);
      let prev = this.#appender.tail();
      for (const seq of ordered) {
        const dead = this.#dead(seq);
        if (!dead) throw this.#notDead(seq);
        if (dead.replayedAt !== null) {
          out.skipped.push({ seq, replayedAsSeq: dead.replayedAsSeq });
          continue;
        }
        prev = append(dead.tag, dead.payload, source ?? dead.source, prev);
        this.#markReplayed(seq, prev, now);
        out.replayed.push({ seq, newSeq: prev });
      }
      return out;
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
      file.db.query<DeadLetter, [string]>(`SELECT ${DEAD_ROW_COLUMNS} FROM outbox_dead_log WHERE namespace = ? ORDER BY seq`).all(file.namespace),
    );
  }

  get(seq: number): DeadLetter | null {
    return this.#file.read("cannot read dead letter", () => this.#dead(seq));
  }

  /** Dead letters not yet replayed. */
  count(): number {
    const file = this.#file;
    return file.read("cannot count dead letters", () =>
      file.db.query<{ n: number }, [string]>("SELECT count(*) AS n FROM outbox_dead_log WHERE namespace = ? AND replayed_at IS NULL").get(file.namespace)!.n,
    );
  }

  #markReplayed(seq: number, newSeq: number, at: string): void {
    this.#file.db.query("UPDATE outbox_dead_log SET replayed_at = ?, replayed_as_seq = ? WHERE seq = ? AND namespace = ?").run(at, newSeq, seq, this.#file.namespace);
  }

  #requireHead(seq: number): void {
    const file = this.#file;
    const head = file.headSeq();
    if (head === seq) return;
    const exists = file.db.query("SELECT 1 FROM outbox_queue WHERE seq = ? AND namespace = ?").get(seq, file.namespace);
    if (!exists) throw new NotFoundError(`no pending row with seq ${seq} in namespace "${file.namespace}" (${file.path})`);
    throw file.invalid(`seq ${seq} is not the head of namespace "${file.namespace}" (the head is ${head})`);
  }

  #dead(seq: number): DeadLetter | null {
    return this.#file.db
      .query<DeadLetter, [number, string]>(`SELECT ${DEAD_ROW_COLUMNS} FROM outbox_dead_log WHERE seq = ? AND namespace = ?`)
      .get(seq, this.#file.namespace);
  }

  #notDead(seq: number): NotFoundError {
    return new NotFoundError(`no dead letter with seq ${seq} in namespace "${this.#file.namespace}" (${this.#file.path})`);
  }
}
