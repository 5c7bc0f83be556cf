// The operator's work on dead letters: which letters a filter selects, and which a purge may delete
// without breaking a chain. DeadLog.purge runs `purgeCandidates` inside its write transaction; the
// read-only readers here back `dead-letter list` and every --dry-run, so a dry run reports what
// the real run does, from the same query.
import type { Database } from "bun:sqlite";
import { type OutboxError, ReplayRefusedError } from "../errors.ts";
import { queueFilesOf, type QueueLocation } from "./files.ts";
import { type FileFeatures, fileFeatures, hasOutboxSchema } from "./health.ts";
import { type DeadLetter, deadRowColumns, remoteColumn } from "./rows.ts";
import { readSnapshot, storageError } from "./sqlite-open.ts";
import { isoTimestamp } from "./timestamp.ts";

/** Which dead letters an operator means: every field given must match (AND); none given = all. */
export interface DeadLetterFilter {
  namespace?: string;
  reason?: string;
  /** Only letters pushed with this key (its stored text: an integer key as its decimal digits). */
  key?: string;
  /** Only letters of this tenant (SPEC §4c). */
  tenant?: string;
  /** Only letters dead at or after this time. */
  since?: Date;
  /** Only letters dead before this time. */
  until?: Date;
  /** Only letters whose error or error class contains this text (case-insensitive). */
  error?: string;
  /** true: only letters already replayed; false: only those never replayed. */
  replayed?: boolean;
}

/** A dead letter and the file that holds it. */
export interface FiledDeadLetter extends DeadLetter {
  file: string;
}

/** What identifies a dead letter and its state, without its SQL and payload (cheap to hold by the thousand). */
export type DeadLetterRef = Pick<
  FiledDeadLetter,
  "file" | "namespace" | "seq" | "reason" | "deadAt" | "replayedAt" | "replayedAsSeq" | "grp" | "remote"
>;

/**
 * What `Outbox.replayDeadMany` did, ascending seq: letters re-enqueued as `newSeq`, and letters
 * left unchanged because they were replayed or discarded before (`replayedAsSeq` null: discarded).
 * A letter of a group brings its group, so letters of other namespaces of the file (a group that
 * spans tables) may be among them, each counted once.
 */
export interface DeadReplays {
  replayed: Array<{ seq: number; namespace: string; newSeq: number }>;
  unchanged: Array<{ seq: number; namespace: string; replayedAsSeq: number | null }>;
  /** Letters left dead because the remote applied them, or may have (see LetterRemote and replayRefusal). */
  refused: Array<{ seq: number; namespace: string; remote: "in doubt" | "applied" }>;
}

/**
 * Why a replay of `letter` is refused, and what to do: one text for the library, the CLI and the
 * console. In doubt: the drain settles it when it can; a replay may be forced once the operator has
 * checked the remote. Applied: never replayed — discard it.
 */
export function replayRefusal(letter: {
  file: string;
  namespace: string;
  seq: number;
  remote: "in doubt" | "applied";
}): ReplayRefusedError {
  const { file, namespace, seq, remote } = letter;
  const which = `dead letter ${seq} of namespace "${namespace}" (${file})`;
  const message =
    remote === "applied"
      ? `${which} was applied by the remote after it was dead-lettered (a batch that carried it committed): a replay would apply it twice, so it is never replayed; discard it (sqloutbox dead-letter discard)`
      : `${which} is in doubt: a batch that carried it got no answer and may have been applied by the remote, or may still be, so a replay could apply it twice. The drain settles this on its next delivery of that table's rows (when the rows after it in its lane land, or the batch's outcome is known): look again later (sqloutbox dead-letter show, sqloutbox status), or, once you have checked that the remote does not hold it, replay it with --force`;
  return new ReplayRefusedError(message, file, namespace, seq, remote);
}

/**
 * What a discard of dead letters did (DeadSelection.discard), ascending seq: letters discarded — a
 * letter's group with it, in every namespace of the file — and letters left unchanged because they
 * were replayed or discarded before (`replayedAsSeq` null: discarded).
 */
export interface DeadDiscards {
  discarded: Array<{ seq: number; namespace: string }>;
  unchanged: Array<{ seq: number; namespace: string; replayedAsSeq: number | null }>;
}

/**
 * Which dead letters of a namespace a purge deletes: those dead before `before` — or, with
 * `by: "replayedAt"`, replayed before it — and only letters already replayed unless `unreplayed`.
 */
export interface PurgeRule {
  before: Date;
  unreplayed?: boolean;
  by?: "deadAt" | "replayedAt";
  /** Only letters of this tenant (a tenant whose backlog `skip --tenant` moved aside). */
  tenant?: string;
}

/** A dead letter a purge rule selects. */
export interface PurgeCandidate {
  namespace: string;
  seq: number;
  reason: string;
  deadAt: string;
  replayedAt: string | null;
}

/**
 * What a purge of one namespace deletes, and what it keeps because the chain still needs it:
 * `linked` — a queued row's `prev_seq` is this letter; `newest` — the namespace's newest dead
 * letter, which the namespace tail may be computed from once its queue is empty; `group` — an
 * unreplayed letter of a group another letter of which stays (a group is purged whole or not at all).
 */
export interface PurgeOutcome {
  purged: PurgeCandidate[];
  kept: Array<PurgeCandidate & { keptBecause: "linked" | "newest" | "group" }>;
}

type OnError = (file: string, error: OutboxError) => void;

/**
 * Every matching dead letter of every outbox file of a db_dir or db_file (by file, then seq), read-only;
 * `onError` as in `findDeadLetterRefs`.
 */
export function findDeadLetters(
  location: QueueLocation,
  filter: DeadLetterFilter = {},
  options: { onError?: OnError } = {},
): FiledDeadLetter[] {
  return findIn<FiledDeadLetter>(location, filter, (f) => deadRowColumns(f.deadRemote), options.onError);
}

/**
 * Like `findDeadLetters`, without the SQL and payloads. A file that cannot be read throws
 * StorageError, unless `onError` is given: it then receives the error and the file is skipped.
 */
export function findDeadLetterRefs(
  location: QueueLocation,
  filter: DeadLetterFilter = {},
  options: { onError?: OnError } = {},
): DeadLetterRef[] {
  return findIn<DeadLetterRef>(location, filter, refColumns, options.onError);
}

/** The SELECT list of a DeadLetterRef (without its file), in a file with `features`. */
function refColumns(features: FileFeatures): string {
  return `namespace, seq, reason, dead_at AS deadAt, replayed_at AS replayedAt, replayed_as_seq AS replayedAsSeq, grp, ${remoteColumn(features.deadRemote)}`;
}

function findIn<T extends { file: string }>(
  location: QueueLocation,
  filter: DeadLetterFilter,
  columns: (features: FileFeatures) => string,
  onError: OnError | undefined,
): T[] {
  const { where, params } = deadLetterWhere(filter);
  const out: T[] = [];
  for (const file of queueFilesOf(location)) {
    try {
      const rows = readDeadLog(file, (db, features) =>
        // A file of the reference, read without migrating it, has no tenant column: no letter of a tenant.
        filter.tenant !== undefined && !hasDeadColumn(db, "tenant")
          ? []
          : db
              .query<Omit<T, "file">, string[]>(
                `SELECT ${columns(features)} FROM outbox_dead_log ${where} ORDER BY seq`,
              )
              .all(...params),
      );
      for (const row of rows ?? []) out.push({ ...row, file } as T);
    } catch (e) {
      const err = storageError(e, "cannot read dead letters", file);
      if (!onError) throw err;
      onError(file, err);
    }
  }
  return out;
}

/**
 * Dead letters of one file by key, read-only: the letters `seqs` of `namespace` that exist, or
 * with `grp` every letter of that group (across the file's namespaces), seq order. Empty when the
 * file has no dead-letter log; throws StorageError when it cannot be read.
 */
export function readDeadLetters(
  file: string,
  select: { namespace: string; seqs: readonly number[] } | { grp: number },
): FiledDeadLetter[] {
  try {
    const rows =
      readDeadLog(file, (db, features) => {
        const columns = deadRowColumns(features.deadRemote);
        if ("grp" in select)
          return db
            .query<DeadLetter, [number]>(`SELECT ${columns} FROM outbox_dead_log WHERE grp = ? ORDER BY seq`)
            .all(select.grp);
        const one = db.query<DeadLetter, [string, number]>(
          `SELECT ${columns} FROM outbox_dead_log WHERE namespace = ? AND seq = ?`,
        );
        return select.seqs.flatMap((seq) => one.all(select.namespace, seq));
      }) ?? [];
    return rows.map((row) => ({ ...row, file }));
  } catch (e) {
    throw storageError(e, "cannot read dead letters", file);
  }
}

/**
 * The letters not yet replayed or discarded of each group `grps` names in one file (every
 * namespace), seq order, read-only in one snapshot: what acting on a letter of a group brings
 * with it. Throws StorageError when the file cannot be read.
 */
export function readGroupRefs(file: string, grps: Iterable<number>): Map<number, DeadLetterRef[]> {
  try {
    return (
      readDeadLog(file, (db, features) => {
        const query = db.query<Omit<DeadLetterRef, "file">, [number]>(
          `SELECT ${refColumns(features)} FROM outbox_dead_log WHERE grp = ? AND replayed_at IS NULL ORDER BY seq`,
        );
        return new Map([...new Set(grps)].map((grp) => [grp, query.all(grp).map((r) => ({ ...r, file }))]));
      }) ?? new Map()
    );
  } catch (e) {
    throw storageError(e, "cannot read dead letters", file);
  }
}

/**
 * The dry run of a purge of one file, read-only: per namespace that has dead letters (or only
 * `namespace`), what `rule` deletes and keeps. Throws StorageError when the file cannot be read.
 */
export function planPurge(
  file: string,
  rule: PurgeRule,
  namespace?: string,
): Array<{ namespace: string } & PurgeOutcome> {
  try {
    return (
      readDeadLog(file, (db) => {
        const names =
          namespace !== undefined
            ? [namespace]
            : db
                .query<{ ns: string }, []>("SELECT DISTINCT namespace AS ns FROM outbox_dead_log ORDER BY ns")
                .all()
                .map((r) => r.ns);
        return names.map((ns) => ({ namespace: ns, ...purgeCandidates(db, ns, rule) }));
      }) ?? []
    );
  } catch (e) {
    throw storageError(e, "cannot read dead letters", file);
  }
}

/**
 * The dead letters of `namespace` that `rule` selects, split into those a purge deletes and those
 * it keeps (see PurgeOutcome), in one read of `db`. DeadLog.purge (behind Outbox.purgeDead) calls
 * it inside its write transaction and deletes `purged`.
 */
export function purgeCandidates(db: Database, namespace: string, rule: PurgeRule): PurgeOutcome {
  const column = rule.by === "replayedAt" ? "replayed_at" : "dead_at";
  // julianday() compares times, not strings (stored texts may differ in format); a NULL or empty
  // time compares as NULL, so a letter whose time is unknown is never purged by age.
  // A file without a tenant column (the reference's, read without migrating) has no letter of a tenant.
  const tenant = hasDeadColumn(db, "tenant") ? "AND (?4 IS NULL OR tenant = ?4)" : "AND ?4 IS NULL";
  const rows = db
    .query<
      PurgeCandidate & { linked: number; newest: number; grp: number | null },
      [string, string, number, string | null]
    >(
      `SELECT namespace, seq, reason, dead_at AS deadAt, replayed_at AS replayedAt, ${hasDeadGroups(db) ? "grp" : "NULL AS grp"},
         EXISTS (SELECT 1 FROM outbox_queue WHERE prev_seq = d.seq) AS linked,
         d.seq = (SELECT max(seq) FROM outbox_dead_log WHERE namespace = ?1) AS newest
       FROM outbox_dead_log AS d
       WHERE namespace = ?1 AND julianday(${column}) < julianday(?2) AND (?3 OR replayed_at IS NOT NULL) ${tenant}
       ORDER BY seq`,
    )
    .all(namespace, isoTimestamp(rule.before), rule.unreplayed ? 1 : 0, rule.tenant ?? null);
  const out: PurgeOutcome = { purged: [], kept: [] };
  for (const { linked, newest, grp: _, ...letter } of rows) {
    if (linked) out.kept.push({ ...letter, keptBecause: "linked" });
    else if (newest) out.kept.push({ ...letter, keptBecause: "newest" });
    else out.purged.push(letter);
  }
  return keepGroupsWhole(db, out, rows);
}

/**
 * A group is dead-lettered, skipped and replayed as a unit: its unreplayed letters are purged all
 * together or not at all. When one of them stays — kept (linked, newest), not selected, or in
 * another namespace of the file (a transaction across tables; a purge is per namespace) — the
 * others stay with it: a replay of what a purge left of a group would deliver part of a
 * transaction (found by the simulator, docs/reliability.md).
 */
function keepGroupsWhole(
  db: Database,
  out: PurgeOutcome,
  rows: ReadonlyArray<{ seq: number; namespace: string; grp: number | null; replayedAt: string | null }>,
): PurgeOutcome {
  const groups = new Set(rows.filter((r) => r.grp !== null && r.replayedAt === null).map((r) => r.grp!));
  if (groups.size === 0) return out;
  const purged = new Set(out.purged.map((l) => `${l.namespace}\0${l.seq}`));
  const members = db.query<{ seq: number; namespace: string }, [number]>(
    "SELECT seq, namespace FROM outbox_dead_log WHERE grp = ? AND replayed_at IS NULL",
  );
  const held = new Set<number>();
  for (const grp of groups) if (members.all(grp).some((m) => !purged.has(`${m.namespace}\0${m.seq}`))) held.add(grp);
  if (held.size === 0) return out;
  const grpOf = new Map(rows.map((r) => [`${r.namespace}\0${r.seq}`, r.grp]));
  const stay = (l: PurgeCandidate) => l.replayedAt === null && held.has(grpOf.get(`${l.namespace}\0${l.seq}`)!);
  return {
    purged: out.purged.filter((l) => !stay(l)),
    kept: [...out.kept, ...out.purged.filter(stay).map((l) => ({ ...l, keptBecause: "group" as const }))].sort(
      (a, b) => a.seq - b.seq,
    ),
  };
}

/** Whether the dead log records each letter's group (files of the reference, read without migrating, do not). */
function hasDeadGroups(db: Database): boolean {
  return hasDeadColumn(db, "grp");
}

function hasDeadColumn(db: Database, column: string): boolean {
  return db
    .query<{ name: string }, []>("PRAGMA table_info(outbox_dead_log)")
    .all()
    .some((c) => c.name === column);
}

/** Runs `read` on a read-only snapshot of `file`; undefined when the file has no dead-letter log (yet). */
function readDeadLog<T>(file: string, read: (db: Database, features: FileFeatures) => T): T | undefined {
  return readSnapshot(file, (db) => {
    if (!hasOutboxSchema(db, file)) return undefined;
    const features = fileFeatures(db);
    return features.deadLog && features.deadReplay ? read(db, features) : undefined;
  });
}

/**
 * The WHERE clause (with its parameters) that selects `filter`'s letters in outbox_dead_log: one definition
 * for every reader and the guarded actions of dead-log.ts.
 */
export function deadLetterWhere(filter: DeadLetterFilter): { where: string; params: string[] } {
  const clauses: string[] = [];
  const params: string[] = [];
  const bind = (value: string) => `?${params.push(value)}`;
  if (filter.namespace !== undefined) clauses.push(`namespace = ${bind(filter.namespace)}`);
  if (filter.reason !== undefined) clauses.push(`reason = ${bind(filter.reason)}`);
  if (filter.key !== undefined) clauses.push(`lane_key = ${bind(filter.key)}`);
  if (filter.tenant !== undefined) clauses.push(`tenant = ${bind(filter.tenant)}`);
  if (filter.since !== undefined) clauses.push(`julianday(dead_at) >= julianday(${bind(isoTimestamp(filter.since))})`);
  if (filter.until !== undefined) clauses.push(`julianday(dead_at) < julianday(${bind(isoTimestamp(filter.until))})`);
  // instr over lower(): a LIKE pattern would give % and _ in the operator's text a meaning.
  if (filter.error !== undefined)
    clauses.push(
      `instr(lower(coalesce(error_class, '') || ' ' || coalesce(error, '')), lower(${bind(filter.error)})) > 0`,
    );
  if (filter.replayed !== undefined) clauses.push(filter.replayed ? "replayed_at IS NOT NULL" : "replayed_at IS NULL");
  return { where: clauses.length > 0 ? `WHERE ${clauses.join(" AND ")}` : "", params };
}
