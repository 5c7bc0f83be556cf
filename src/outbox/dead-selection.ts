import type { DeadLetterFilter, DeadReplays, DeadSkips } from "./dead-letters.ts";
import { QueueView, type OutboxOptions } from "./queue-view.ts";

/**
 * One namespace's dead letters as an operator console acts on them: a selection counted before,
 * replayed or given up in ONE write transaction only while it is still exactly what was counted
 * (see DeadLog.replayMany and skipMany). Never creates a file: it must exist.
 */
export class DeadSelection extends QueueView {
  constructor(path: string, namespace: string, options: Omit<OutboxOptions, "create"> = {}) {
    super(path, namespace, { ...options, create: false });
  }

  /**
   * Replays `seqs` at the tail (each with its group, as Outbox.replayDeadMany). With `selection`,
   * only if they are exactly the unreplayed letters of this namespace it matches now; otherwise
   * throws SelectionChangedError and nothing is replayed.
   */
  replay(seqs: readonly number[], selection?: DeadLetterFilter): DeadReplays {
    this.queueFile.ensureOpen();
    return this.deadLog.replayMany(this.#ordered(seqs), undefined, selection);
  }

  /**
   * Gives `seqs` up without replaying them (each with its group): they stay in the log, count as
   * handled and are never replayed. `selection` as in `replay`.
   */
  skip(seqs: readonly number[], selection?: DeadLetterFilter): DeadSkips {
    this.queueFile.ensureOpen();
    return this.deadLog.skipMany(this.#ordered(seqs), selection);
  }

  #ordered(seqs: readonly number[]): number[] {
    if (!Array.isArray(seqs) || !seqs.every((s) => Number.isSafeInteger(s) && s > 0))
      throw this.queueFile.invalid("expected an array of positive integer seqs");
    return [...new Set(seqs)].sort((a, b) => a - b);
  }
}

/** Opens `namespace`'s dead letters in the existing file `path`, runs `fn` on them and closes the file, whatever `fn` does. */
export function withDeadSelection<T>(path: string, namespace: string, fn: (selection: DeadSelection) => T): T {
  const selection = new DeadSelection(path, namespace);
  try {
    return fn(selection);
  } finally {
    selection.close();
  }
}
