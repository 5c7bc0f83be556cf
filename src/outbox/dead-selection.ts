// Acting on a selection of dead letters — replaying them at the tail, or discarding them for good —
// as the CLI (`dead-letter replay`, `dead-letter discard`) and the admin console do alike: counted
// against what the operator expects, planned in a dry run that counts what the real run does (a
// letter brings its whole group, counted once), and carried out one transaction per file and table
// that first checks its letters are still what was counted.
import { OutboxError } from "../errors.ts";
import {
  type DeadDiscards,
  type DeadLetterFilter,
  type DeadLetterRef,
  type DeadReplays,
  readGroupRefs,
  replayRefusal,
} from "./dead-letters.ts";
import { QueueView, type OutboxOptions } from "./queue-view.ts";

/** What an operator does to dead letters: `replay` them at the tail of their table, or `discard` them for good. */
export type DeadAction = "replay" | "discard";

/**
 * A selected letter: where it is, whether it was replayed or discarded before, and what the remote may have
 * done with it.
 */
export type SelectedLetter = Pick<
  DeadLetterRef,
  "file" | "namespace" | "seq" | "replayedAt" | "replayedAsSeq" | "grp" | "remote"
>;

/**
 * A letter a replay refuses (see replayRefusal): the remote applied its group, or may have ("in doubt", not
 * forced).
 */
export interface RefusedLetter {
  file: string;
  namespace: string;
  seq: number;
  remote: "in doubt" | "applied";
  /** Which letter, why, and what to do. */
  message: string;
}

/** A letter replayed (with its new seq; null in a dry run) or discarded, or that would be. */
export interface ActedLetter {
  file: string;
  namespace: string;
  seq: number;
  /** A replay's new seq (null in a dry run); absent for a discard. */
  newSeq?: number | null;
}

/** A selected letter left as it was: replayed (`replayedAsSeq`) or discarded (null) before. */
export interface UnchangedLetter {
  file: string;
  namespace: string;
  seq: number;
  replayedAsSeq: number | null;
}

/** What acting on a selection did, or (`dryRun`) would do. */
export interface SelectionReport {
  action: DeadAction;
  dryRun: boolean;
  /** The letters selected (named, or matched by a filter). */
  selected: number;
  /** Letters acted on, each letter's group with it (every namespace of its file), each once, in order. */
  done: ActedLetter[];
  /** Selected letters left as they were: replayed or discarded before. */
  unchanged: UnchangedLetter[];
  /** A replay's letters left dead because the remote applied them or may have (each with its group), each once. */
  refusedLetters: RefusedLetter[];
  /**
   * Tables whose transaction failed: their letters are unchanged, and with `stopOnFailure` nothing after them
   * was tried.
   */
  failed: Array<{ file: string; namespace: string; error: OutboxError }>;
  /** Set when the selection did not hold `expect` letters: nothing was done. */
  refused?: { code: "E_CONFLICT"; message: string };
}

/** How a selection is acted on. */
export interface SelectionOptions {
  /** Say what would be done, read-only. */
  dryRun?: boolean;
  /** The count the operator saw: unless exactly this many letters are selected, nothing is done. */
  expect?: number;
  /**
   * The filter the letters were found by: each table's transaction first checks they are still exactly what
   * it selects.
   */
  guard?: DeadLetterFilter;
  /** Stop at the first table that fails; by default the others go on. */
  stopOnFailure?: boolean;
  /**
   * A replay of letters in doubt goes all the same (the operator checked the remote); letters applied are
   * refused still.
   */
  force?: boolean;
}

/**
 * Replays or discards `letters` (see SelectionReport). Letters replayed or discarded before are
 * left as they are. A letter of a group brings its group: in a dry run its unhandled members are
 * read and counted, so the dry run's `done` is what the real run's will be unless a letter changes
 * in between. The real run is one write transaction per file and table (DeadSelection), each
 * checking `guard` first; a table that fails (an OutboxError) is reported in `failed`.
 */
export function actOnSelection(
  action: DeadAction,
  letters: readonly SelectedLetter[],
  options: SelectionOptions = {},
): SelectionReport {
  const report: SelectionReport = {
    action,
    dryRun: options.dryRun === true,
    selected: letters.length,
    done: [],
    unchanged: [],
    refusedLetters: [],
    failed: [],
  };
  if (options.expect !== undefined && letters.length !== options.expect) {
    report.refused = {
      code: "E_CONFLICT",
      message: `the selection holds ${letters.length} letter(s) now, not the ${options.expect} expected: nothing was changed; look again and give the count you see`,
    };
    return report;
  }
  const units = unitsOf(letters);
  if (report.dryRun) plan(report, units, options.force === true);
  else carryOut(report, units, options);
  return report;
}

/** What the remote may have done with a group's letters: the worst of them (see DeadLog). */
function remoteOf(group: ReadonlyArray<Pick<DeadLetterRef, "remote">>): DeadLetterRef["remote"] {
  if (group.some((l) => l.remote === "applied")) return "applied";
  return group.some((l) => l.remote === "in doubt") ? "in doubt" : "not applied";
}

function refused(file: string, namespace: string, seq: number, remote: "in doubt" | "applied"): RefusedLetter {
  return { file, namespace, seq, remote, message: replayRefusal({ file, namespace, seq, remote }).message };
}

/** The letters of one file and table. */
interface Unit {
  file: string;
  namespace: string;
  letters: SelectedLetter[];
}

const letterKey = (file: string, namespace: string, seq: number) => `${file}\0${namespace}\0${seq}`;

/**
 * The dry run: each unhandled letter with its group's unhandled letters, each once; the others unchanged, or
 * refused.
 */
function plan(report: SelectionReport, units: readonly Unit[], force: boolean): void {
  const groupsByFile = new Map<string, Map<number, DeadLetterRef[]>>();
  for (const unit of units) {
    const grps = unit.letters.filter((l) => l.grp !== null && l.replayedAt === null).map((l) => l.grp!);
    if (grps.length === 0) continue;
    const known = groupsByFile.get(unit.file) ?? new Map<number, DeadLetterRef[]>();
    for (const [grp, members] of readGroupRefs(unit.file, grps)) known.set(grp, members);
    groupsByFile.set(unit.file, known);
  }
  const acted = new Set<string>();
  for (const { file, namespace, letters } of units) {
    for (const l of letters) {
      if (acted.has(letterKey(file, namespace, l.seq))) continue;
      if (l.replayedAt !== null) {
        report.unchanged.push({ file, namespace, seq: l.seq, replayedAsSeq: l.replayedAsSeq });
        continue;
      }
      const group = l.grp === null ? [l] : (groupsByFile.get(file)?.get(l.grp) ?? [l]);
      const remote = remoteOf(group);
      const refuse = report.action === "replay" && (remote === "applied" || (remote === "in doubt" && !force));
      for (const m of group) {
        const key = letterKey(file, m.namespace, m.seq);
        if (acted.has(key)) continue;
        acted.add(key);
        if (refuse) {
          report.refusedLetters.push(refused(file, m.namespace, m.seq, remote));
          continue;
        }
        report.done.push({
          file,
          namespace: m.namespace,
          seq: m.seq,
          ...(report.action === "replay" ? { newSeq: null } : {}),
        });
      }
    }
  }
}

/**
 * The real run: one guarded transaction per file and table, skipping letters a table before brought along
 * with its group.
 */
function carryOut(report: SelectionReport, units: readonly Unit[], options: SelectionOptions): void {
  const acted = new Set<string>();
  for (const { file, namespace, letters } of units) {
    const seqs = letters.map((l) => l.seq).filter((seq) => !acted.has(letterKey(file, namespace, seq)));
    // With a guard, a table whose letters all came along with a group still checks nothing new joined it.
    if (seqs.length === 0 && options.guard === undefined) continue;
    try {
      const out = withDeadSelection(file, namespace, (s) =>
        report.action === "replay"
          ? s.replay(seqs, options.guard, options.force === true)
          : s.discard(seqs, options.guard),
      );
      const done: Array<{ namespace: string; seq: number; newSeq?: number }> =
        "replayed" in out ? out.replayed : out.discarded;
      for (const d of done) {
        acted.add(letterKey(file, d.namespace, d.seq));
        report.done.push({
          file,
          namespace: d.namespace,
          seq: d.seq,
          ...(d.newSeq === undefined ? {} : { newSeq: d.newSeq }),
        });
      }
      for (const u of out.unchanged)
        report.unchanged.push({ file, namespace: u.namespace, seq: u.seq, replayedAsSeq: u.replayedAsSeq });
      for (const r of "refused" in out ? out.refused : []) {
        acted.add(letterKey(file, r.namespace, r.seq));
        report.refusedLetters.push(refused(file, r.namespace, r.seq, r.remote));
      }
    } catch (error) {
      if (!(error instanceof OutboxError)) throw error;
      report.failed.push({ file, namespace, error });
      if (options.stopOnFailure) return;
    }
  }
}

/** Letters by file and table, each table's ascending by seq; tables in a stable order (file, then name). */
function unitsOf(letters: readonly SelectedLetter[]): Unit[] {
  const units = new Map<string, Unit>();
  for (const l of letters) {
    const key = `${l.file}\0${l.namespace}`;
    let unit = units.get(key);
    if (!unit) units.set(key, (unit = { file: l.file, namespace: l.namespace, letters: [] }));
    unit.letters.push(l);
  }
  const out = [...units.values()].sort(
    (a, b) => a.file.localeCompare(b.file) || a.namespace.localeCompare(b.namespace),
  );
  for (const u of out) u.letters.sort((a, b) => a.seq - b.seq);
  return out;
}

/**
 * One namespace's dead letters as an operator acts on them: a selection counted before, replayed
 * or discarded in ONE write transaction only while it is still exactly what was counted (see
 * DeadLog.replayMany and discardMany). Never creates a file: it must exist.
 */
export class DeadSelection extends QueueView {
  constructor(path: string, namespace: string, options: Omit<OutboxOptions, "create"> = {}) {
    super(path, namespace, { ...options, create: false });
  }

  /**
   * Replays `seqs` at the tail (each with its group, as Outbox.replayDeadMany: letters the remote
   * applied or may have are refused, unless `force` for those in doubt). With `selection`, only if
   * they are exactly the unreplayed letters of this namespace it matches now; otherwise throws
   * SelectionChangedError and nothing is replayed.
   */
  replay(seqs: readonly number[], selection?: DeadLetterFilter, force = false): DeadReplays {
    this.queueFile.ensureOpen();
    return this.deadLog.replayMany(this.#ordered(seqs), undefined, selection, force);
  }

  /**
   * Discards `seqs` — gives them up for good, never delivered (each with its group): they stay in
   * the log with their own error, count as handled and are never replayed. `selection` as in `replay`.
   */
  discard(seqs: readonly number[], selection?: DeadLetterFilter): DeadDiscards {
    this.queueFile.ensureOpen();
    return this.deadLog.discardMany(this.#ordered(seqs), selection);
  }

  #ordered(seqs: readonly number[]): number[] {
    if (!Array.isArray(seqs) || !seqs.every((s) => Number.isSafeInteger(s) && s > 0))
      throw this.queueFile.invalid("expected an array of positive integer seqs");
    return [...new Set(seqs)].sort((a, b) => a - b);
  }
}

/**
 * Opens `namespace`'s dead letters in the existing file `path`, runs `fn` on them and closes the file,
 * whatever `fn` does.
 */
export function withDeadSelection<T>(path: string, namespace: string, fn: (selection: DeadSelection) => T): T {
  const selection = new DeadSelection(path, namespace);
  try {
    return fn(selection);
  } finally {
    selection.close();
  }
}
