import type { TableFile } from "./file.ts";
import type { TableHolds } from "./holds.ts";
import type { TableLanes } from "./lanes.ts";
import type { TableProgress } from "./progress.ts";
import type { SliceDraftOf } from "./slice.ts";

/** What a table's tenant side works with: its wing's parts, and the table's own settlement bookkeeping. */
export interface TableTenantsParts {
  file: TableFile;
  holds: TableHolds;
  lanes: TableLanes;
  progress: TableProgress;
  now: () => number;
  /** Whether the table is held at `now` (or waits, or is not open). */
  held(now: number): boolean;
  /** After a settlement of `tenant`'s rows that read `throughs`: counted, and what depends on it told. */
  settled(confirmed: number, throughs: ReadonlyMap<string, number>, tenant: string): number;
}

/**
 * A table served by a tenant template, as that template reads it (SPEC §4c): which tenants have rows
 * here, what each tenant's ledger says of its rows, a tenant forgotten when its database closes or
 * read again when its batch could not go, and the applied prefix looked at again when an operator
 * moved the head. Each tenant's lanes are its own (TableLanes keeps them by tenant).
 */
export class TableTenants {
  constructor(private readonly parts: TableTenantsParts) {}

  /**
   * Up to `limit` tenants with rows here, by name, after `after` (null: from the first), and whether
   * rows without a tenant are left; none while the table is held or its queue not open.
   */
  withRows(after: string | null, limit: number): { tenants: string[]; withoutTenant: boolean } {
    const { file, holds, now } = this.parts;
    const queue = file.queue;
    if (queue === null || this.parts.held(now())) return { tenants: [], withoutTenant: false };
    try {
      return queue.tenantsWithRows(after, limit);
    } catch (error) {
      holds.local(error, now(), "listing the tenants with rows");
      return { tenants: [], withoutTenant: false };
    }
  }

  /**
   * Applies what `tenant`'s ledger (in its database) says of its rows (see TableProgress.settleLanes);
   * null `throughs`: that database cannot tell now, read it again later. Returns how many rows were
   * confirmed.
   */
  settle(tenant: string, throughs: ReadonlyMap<string, number> | null): number {
    if (throughs === null) {
      this.parts.lanes.unsettle(tenant);
      return 0;
    }
    return this.parts.settled(this.parts.progress.settleLanes(throughs, 0, tenant), throughs, tenant);
  }

  /** Whether `tenant`'s ledger rows were read (its rows may be planned). */
  settled(tenant: string): boolean {
    return this.parts.lanes.settled(tenant);
  }

  /** `tenant`'s database was closed: what this table knows of its lanes is read again when next needed. */
  forget(tenant: string): void {
    this.parts.lanes.forget(tenant);
  }

  /** A draft that did not go (its tenant's database could not be opened): its rows are read again. */
  unsent(draft: SliceDraftOf<unknown>): void {
    if (draft.lanes !== undefined) this.parts.lanes.restart(draft.rows[0]!.tenant);
  }

  /** The applied prefix is looked at again if the head moved (see TableProgress.lookAtHead). */
  lookAtHead(): void {
    const { file, holds, progress, now } = this.parts;
    if (file.queue === null) return;
    try {
      progress.lookAtHead();
    } catch (error) {
      holds.local(error, now(), "looking at the head");
    }
  }
}
