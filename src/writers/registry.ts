import { ConfigError } from "../errors.ts";
import { libsqlWriter } from "./libsql.ts";
import { mysqlWriter } from "./mysql.ts";
import { postgresWriter } from "./postgres.ts";
import { sqliteWriter } from "./sqlite.ts";
import type { OutboxWriter } from "./writer.ts";
import { missingKeys, type WriterSpec } from "./writer-spec.ts";

/** Names accepted by `writer = "…"` in outbox.toml. */
export type BuiltinWriterName = "sqlite" | "libsql" | "postgres" | "mysql";

/** The built-in writers, one file per engine in src/writers/. */
export const builtinWriters: Record<BuiltinWriterName, WriterSpec> = {
  sqlite: sqliteWriter,
  libsql: libsqlWriter,
  postgres: postgresWriter,
  mysql: mysqlWriter,
};

/** The built-in writer called `name`, or undefined; only the registry's own keys count (`toString` is no writer). */
export function builtinWriter(name: string | null | undefined): WriterSpec | undefined {
  return name != null && Object.hasOwn(builtinWriters, name) ? builtinWriters[name as BuiltinWriterName] : undefined;
}

/**
 * Constructs the built-in writer `name` from a `[connection]` table; throws `ConfigError` for an unknown name
 * or invalid keys.
 */
export function createWriter(name: string, connection: Record<string, unknown>): OutboxWriter {
  const spec = builtinWriter(name);
  if (!spec)
    throw new ConfigError(`unknown writer "${name}"; built-in writers: ${Object.keys(builtinWriters).join(", ")}`);
  const problems = [
    ...missingKeys(spec, connection).map((k) => ({ key: k.name, message: `is required: ${k.description}` })),
    ...(spec.validate?.(connection) ?? []),
  ];
  if (problems.length > 0) {
    throw new ConfigError(problems.map((p) => `connection.${p.key} ${p.message}`).join("; "), {
      keyPath: "connection",
    });
  }
  return spec.create(connection);
}
