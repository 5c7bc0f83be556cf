import type { Dialect } from "../vocabulary.ts";
import type { OutboxWriter } from "./writer.ts";

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
  /**
   * Whether the writers it creates take concurrent calls (their `OutboxWriter.concurrent`), known before one
   * exists.
   */
  concurrent?: boolean;
  /** Checks beyond `required` (e.g. "url or host"); returns one problem per bad key. */
  validate?(connection: Record<string, unknown>): Array<{ key: string; message: string }>;
  /** The target as text for logs and `status`, with passwords and tokens masked. */
  describe?(connection: Record<string, unknown>): string;
  create(connection: Record<string, unknown>): OutboxWriter;
}

/** The keys `spec` requires that `connection` leaves out or sets to "". */
export function missingKeys(spec: WriterSpec, connection: Record<string, unknown>): ConnectionKey[] {
  return spec.keys.filter((k) => k.required && (connection[k.name] === undefined || connection[k.name] === ""));
}
