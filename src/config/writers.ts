import { ConfigError } from "../errors.ts";
import { libraryLogger, type Logger } from "../logger.ts";
import { createWriter as createBuiltinWriter } from "../writers/registry.ts";
import type { OutboxWriter } from "../writers/writer.ts";
import { maskError, maskSecrets } from "../masking.ts";
import { DIALECTS } from "../vocabulary.ts";
import type { OutboxConfig, TargetConfig } from "./types.ts";
import { loadWriterClass } from "./writer-class.ts";

/** Options for `createWriters`. */
export interface CreateWritersOptions {
  /** Masked in any error message (see `configSecrets`). */
  secrets?: readonly string[];
  logger?: Logger;
}

/**
 * Constructs one writer per target, keyed by target name (`app.db`): a built-in `writer` from the
 * registry, or a `writer_class` imported and constructed with the `[connection]` table. On any
 * failure the writers already made are closed and a `ConfigError` names the target's key.
 */
export async function createWriters(
  config: OutboxConfig,
  options: CreateWritersOptions = {},
): Promise<Record<string, OutboxWriter>> {
  const writers: Record<string, OutboxWriter> = {};
  const logger = libraryLogger(options.logger);
  try {
    for (const app of config.apps) {
      for (const target of app.targets) {
        writers[target.name] = await createWriter(config, target, options);
        logger.debug(`writer ready for target ${target.name} (${target.writer ?? target.writerClass})`);
      }
    }
  } catch (error) {
    await Promise.allSettled(Object.values(writers).map(async (w) => w.close?.()));
    throw error;
  }
  return writers;
}

async function createWriter(
  config: OutboxConfig,
  target: TargetConfig,
  options: CreateWritersOptions,
): Promise<OutboxWriter> {
  const keyPath = `app.${target.app}.db.${target.db}`;
  const secrets = options.secrets ?? [];
  if (target.writerClass) {
    const baseDir = config.baseDir ?? process.cwd();
    const site = { file: config.file, keyPath: `${keyPath}.writer_class`, baseDir, secrets };
    const writer = await loadWriterClass(target.writerClass, target.connection, site);
    if (writer.dialect !== undefined && !DIALECTS.includes(writer.dialect)) {
      await writer.close?.();
      throw new ConfigError(
        `writer_class ${target.writerClass} has dialect "${String(writer.dialect)}"; expected one of ${DIALECTS.join(", ")}`,
        { file: site.file, keyPath: site.keyPath },
      );
    }
    return writer;
  }
  // With trace_comments every statement text is new: PostgreSQL must not keep each one prepared
  // (Bun's MySQL driver bounds its own cache at 256 texts per connection).
  let connection =
    target.traceComments && target.writer === "postgres" && target.connection.prepare === undefined
      ? { ...target.connection, prepare: false }
      : target.connection;
  // `connections` batches in flight need as many connections in the pool of a server writer.
  const pooled = target.writer === "postgres" || target.writer === "mysql";
  const pool = typeof connection.max_connections === "number" ? connection.max_connections : 1;
  if (pooled && pool < target.connections) connection = { ...connection, max_connections: target.connections };
  try {
    return createBuiltinWriter(target.writer ?? "", connection);
  } catch (error) {
    const message = maskSecrets(
      `cannot create writer "${target.writer}": ${(error as Error)?.message ?? error}`,
      secrets,
    );
    throw new ConfigError(
      message,
      { file: config.file, keyPath: `${keyPath}.connection` },
      { cause: maskError(error, secrets) },
    );
  }
}
