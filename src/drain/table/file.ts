import { existsSync } from "node:fs";
import type { TableConfig } from "../../config/types.ts";
import type { DrainQueue } from "../../outbox/drain-queue.ts";
import type { NamespaceHealth } from "../../outbox/health.ts";
import type { Resequenced } from "../../outbox/outbox.ts";
import { NotCreatedError } from "../../outbox/sqlite-open.ts";
import type { TableHolds } from "./holds.ts";
import type { TableLanes } from "./lanes.ts";

/** What a table's file needs: where it is, how to open it, and the table's holds and lanes it reports to. */
export interface TableFileParts {
  table: string;
  /** The file's path: `{db_dir}/{table}.db`, or the app's `db_file`. */
  path: string;
  /** The app's `db_file`, which only its producer creates: a missing one is looked for again soon. */
  shared: boolean;
  open: () => DrainQueue;
  /**
   * In compatibility mode (`injectOutboxSeq`) the setup asks whether the queue had a history when opened (see
   * raiseAbove).
   */
  config: Pick<TableConfig, "injectOutboxSeq">;
  holds: TableHolds;
  lanes: TableLanes;
}

/**
 * One table's queue file as its drain holds it: opened on demand — a file that cannot be opened
 * (missing, corrupt, not an outbox file, a newer format, no permission) holds this table only, is
 * reported once and retried later; a lane count changed while rows sent under the old one are
 * pending holds it too (see TableLanes.countProblem) — and its origin id, kept after close.
 */
export class TableFile {
  #queue: DrainQueue | null = null;
  #origin: string | null = null;
  /** The queue had no history when opened: in compatibility mode, rows at or below the remote's
   *  MAX(outbox_seq) can then only be another queue's seqs (see compat.ts). */
  #fresh = false;

  constructor(private readonly parts: TableFileParts) {}

  /** The open queue, or null. */
  get queue(): DrainQueue | null {
    return this.#queue;
  }

  /** The file's origin id, once opened (kept after close). */
  get origin(): string | null {
    return this.#origin;
  }

  /** Opens the queue unless open (see the class); false when it cannot be now. */
  open(now: number): boolean {
    if (this.#queue) return true;
    const { holds, lanes, table } = this.parts;
    if (holds.active(now)) return false;
    if (this.parts.shared && !existsSync(this.parts.path)) {
      holds.missing(now);
      return false;
    }
    try {
      const queue = (this.#queue = this.parts.open());
      if (this.parts.config.injectOutboxSeq) this.#fresh = !queue.hasHistory(); // only the compatibility mode asks
      this.#origin = queue.origin;
      holds.release("file");
      const problem = lanes.countProblem(queue, table);
      if (problem !== null) holds.lanesChanged(problem, now);
      if (lanes.tenanted) queue.serveTenants(); // read tenant by tenant: rows written before the first tenant's need the index too
      return true;
    } catch (error) {
      if (error instanceof NotCreatedError) holds.missing(now, error.state);
      else holds.file(error, now);
      return false;
    }
  }

  close(): void {
    this.#queue?.close();
    this.#queue = null;
  }

  /**
   * The queue delivered before: a delivered log, dead letters, a head linked back, or rows sent in a batch of
   * unknown outcome.
   */
  hasDelivered(): boolean {
    const queue = this.#queue!;
    return queue.hasHistory() || queue.sentMark() > 0;
  }

  /**
   * Compatibility mode: raises the local sequence above the remote's MAX(outbox_seq) `max`; a fresh
   * queue whose head is at or below it, never sent, moves above it in order (rows under those seqs
   * would be absorbed as another queue's). Returns what moved, if anything.
   */
  raiseAbove(max: number): Resequenced | null {
    const queue = this.#queue!;
    queue.seedSequence(max);
    const head = queue.head();
    if (!head || head.seq > max || queue.sentMark() >= head.seq || !this.#fresh) return null;
    return queue.resequenceAbove(max);
  }

  /** The queue's health read from the file, or null while it is not open or cannot be read now (its hold says why). */
  health(): NamespaceHealth | null {
    const queue = this.#queue;
    if (!queue || queue.closed) return null;
    try {
      return queue.health();
    } catch {
      return null;
    }
  }
}
