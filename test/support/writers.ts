import { isTenantWriters, type OutboxWriter, type TenantWriters } from "../../src/writers/writer.ts";

/** The writer of one-database target `name` among `createWriters`' (fails the test for none, or a tenant template's). */
export function writerOf(writers: Record<string, OutboxWriter | TenantWriters>, name: string): OutboxWriter {
  const writer = writers[name];
  if (writer === undefined || isTenantWriters(writer)) throw new Error(`expected a writer for target ${name}`);
  return writer;
}

/** The `TenantWriters` of tenant template target `name` (fails the test for anything else). */
export function tenantWritersOf(writers: Record<string, OutboxWriter | TenantWriters>, name: string): TenantWriters {
  const writer = writers[name];
  if (!isTenantWriters(writer)) throw new Error(`expected the TenantWriters of tenant template ${name}`);
  return writer;
}
