import type { Statement } from "bun:sqlite";
import type { Layout } from "./layout.ts";
import type { QueueFile } from "./queue-file.ts";
import type { ChainGap, OutboxRow } from "./rows.ts";
import { LAYOUTS } from "./schema.ts";

/** What the drain reads of one namespace for a batch, from one consistent state of the file. */
export interface DeliveryRead {
  /** The oldest pending row, or null when the namespace is empty. */
  head: OutboxRow | null;
  pending: number;
  /** The rows to deliver, head first; empty when `ready` said no. Cut before a chain gap. */
  rows: OutboxRow[];
  /** A row behind which the chain is broken (its `prevSeq` exists nowhere), if one was met. */
  gap: ChainGap | null;
  /** Reading stopped at `limit` or `maxBytes`: more rows are ready behind `rows`. */
  truncated: boolean;
  /**
   * The groups among `rows` that span namespaces, by group: the namespaces each touches (this one
   * included). Empty for the common case — a file with one table, or groups within one table.
   */
  spans: Map<number, string[]>;
  /** The highest seq `skip` passed over (null: none): rows up to it were looked at. */
  passedOver: number | null;
}

/**
 * The drain's read of one namespace for a batch (see DrainQueue.readForDelivery): whole groups
 * only, within a row and byte budget, cut before a broken chain, in one read transaction.
 */
export class DeliveryReader {
  readonly #file: QueueFile;
  readonly #layout: Layout;
  readonly #spans: Statement<{ grp: number; namespaces: string }, [number, number]>;

  constructor(file: QueueFile) {
    this.#file = file;
    this.#layout = LAYOUTS[file.layout];
    this.#spans = file.prepare("SELECT grp, namespaces FROM outbox_group WHERE grp >= ?1 AND grp <= ?2");
  }

  /** The read; `of`: one tenant's rows only (null: those without a tenant; see QueueFile.pendingRowsOf). */
  read(
    limit: number,
    maxBytes: number,
    ready: (head: OutboxRow, pending: number) => boolean,
    after: number | null,
    skip: ((row: OutboxRow) => boolean) | null,
    of?: { tenant: string | null },
  ): DeliveryRead {
    for (;;) {
      const read = this.#readOnce(limit, maxBytes, ready, after, skip, of);
      if (read !== null) return read;
      // Rows a foreign writer inserted are given their place first: their seqs may be delivered ones.
      this.#file.write("cannot adopt rows another writer inserted", () => this.#layout.adoptForeignRows(this.#file.db));
    }
  }

  /** One read for delivery, or null when rows a foreign writer inserted must be adopted first. */
  #readOnce(
    limit: number,
    maxBytes: number,
    ready: (head: OutboxRow, pending: number) => boolean,
    after: number | null,
    skip: ((row: OutboxRow) => boolean) | null,
    of: { tenant: string | null } | undefined,
  ): DeliveryRead | null {
    const file = this.#file;
    return file.read("cannot read rows to deliver", () =>
      file.db.transaction((): DeliveryRead | null => {
        if (this.#layout.hasForeignRows(file.db)) return null;
        const pending = file.pendingCount();
        const rows: OutboxRow[] = [];
        let head: OutboxRow | null = null;
        let gap: ChainGap | null = null;
        let truncated = false;
        let bytes = 0;
        /** Where the group of the last row read starts in `rows`: a slice ends only between groups. */
        let groupStart = 0;
        let grpMin = Number.POSITIVE_INFINITY;
        let grpMax = Number.NEGATIVE_INFINITY;
        let passedOver: number | null = null;
        for (const row of of === undefined ? file.pendingRows(after) : file.pendingRowsOf(of.tenant, after)) {
          if (skip?.(row)) {
            passedOver = row.seq; // not read: neither counted nor returned
            continue;
          }
          if (head === null) {
            head = row;
            if (!ready(row, pending)) break;
          }
          const previous = rows[rows.length - 1];
          const continues = previous !== undefined && row.grp !== null && row.grp === previous.grp;
          if (!continues) groupStart = rows.length;
          bytes += row.tag.length + row.payload.length;
          if (groupStart > 0 && (rows.length >= limit || bytes > maxBytes)) {
            // The group this row belongs to does not fit behind the ones before it: it goes first in a
            // later slice, whole. The first group of a slice always goes, however large.
            rows.length = groupStart;
            truncated = true;
            break;
          }
          const linked = row.prevSeq === null || row.prevSeq === previous?.seq || file.exists(row.prevSeq);
          if (!linked) {
            gap = { seq: row.seq, prevSeq: row.prevSeq! };
            rows.length = groupStart; // never half a group
            break;
          }
          rows.push(row);
          if (row.grp !== null) {
            grpMin = Math.min(grpMin, row.grp);
            grpMax = Math.max(grpMax, row.grp);
          }
        }
        const spans = new Map<number, string[]>();
        if (rows.length > 0 && grpMin <= grpMax) {
          for (const { grp, namespaces } of this.#spans.all(grpMin, grpMax))
            spans.set(grp, JSON.parse(namespaces) as string[]);
        }
        return { head, pending, rows, gap, truncated, spans, passedOver };
      })(),
    );
  }
}
