import { hasTenantPlaceholder, TENANT_PLACEHOLDER } from "../tenant.ts";
import { DIALECTS, type Dialect } from "../vocabulary.ts";
import { join, type Reader, type Table } from "./reader.ts";
import type { TableConfig } from "./types.ts";

/** What of a target `readTenants` looks at, read already. */
export interface TemplateSource {
  connection: Record<string, unknown>;
  maxOpenTenants: number;
  ledger: boolean;
  dialect: Dialect | null;
  writerClass: string | null;
  tables: TableConfig[];
}

/**
 * Whether the target at `path` is a tenant template (SPEC §4c: a `{tenant}` in a `[connection]`
 * value, after `${VAR}` interpolation) and with how many tenant databases open at most; null when
 * it is none. Problems go to the reader: `max_open_tenants` on a target that is no template, and
 * on a template what it cannot do without — the ledger, a known dialect — or cannot do at all.
 */
export function readTenants(r: Reader, raw: Table, path: string, target: TemplateSource): { maxOpen: number } | null {
  const key = (snake: string) => join(path, r.key(snake));
  if (!hasTenantPlaceholder(target.connection)) {
    if (r.raw(raw, "max_open_tenants") !== undefined)
      r.fail(
        key("max_open_tenants"),
        `bounds the open databases of a tenant template, and this target is none: no value of its [connection] contains ${TENANT_PLACEHOLDER} (remove the key, or put ${TENANT_PLACEHOLDER} where each tenant's database is named)`,
      );
    return null;
  }
  if (!target.ledger)
    r.fail(
      key("ledger"),
      `a tenant template needs the delivery ledger: each tenant's delivery is fenced by the ledger in its own database (remove ${r.key("ledger")} = false)`,
    );
  if (target.writerClass !== null && target.dialect === null)
    r.fail(
      key("dialect"),
      `required for a ${r.key("writer_class")} tenant template (one of ${DIALECTS.join(", ")}): no tenant's writer exists before its first rows, and the drain needs the dialect sooner`,
    );
  for (const [i, table] of target.tables.entries()) {
    if (table.injectOutboxSeq)
      r.fail(
        `${join(path, r.key("tables"))}[${i}]`,
        `table "${table.name}" is injected (${r.key("inject_outbox_seq")}), which a tenant template cannot deliver: the compatibility mode seeds the table's seq from its one remote table at startup, while a tenant's database opens only when its rows come (set ${r.key("inject_outbox_seq")} = false)`,
      );
  }
  return { maxOpen: target.maxOpenTenants };
}
