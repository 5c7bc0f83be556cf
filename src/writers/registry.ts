import type { Dialect, OutboxWriter } from "./writer.ts";

/** Names accepted by `writer = "…"` in outbox.toml. */
export type BuiltinWriterName = "sqlite" | "libsql" | "postgres" | "mysql";

/** One `[connection]` key a built-in writer understands. */
export interface ConnectionKey {
  name: string;
  required?: boolean;
  /** Masked in logs, errors and status output. */
  secret?: boolean;
  description: string;
}

/** How the config loader validates and constructs a built-in writer. */
export interface WriterSpec {
  dialect: Dialect;
  keys: ConnectionKey[];
  /** Checks beyond `required` (e.g. "url or host"); returns one problem per bad key. */
  validate?(connection: Record<string, unknown>): Array<{ key: string; message: string }>;
  create(connection: Record<string, unknown>): OutboxWriter;
}

/** The built-in writers, filled in by src/writers/<engine>.ts. */
export const builtinWriters: Record<BuiltinWriterName, WriterSpec> = {} as Record<BuiltinWriterName, WriterSpec>;
