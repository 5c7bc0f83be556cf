import { ConfigError, InvalidArgumentError } from "../errors.ts";
import { libraryLogger, type Logger } from "../logger.ts";
import { maskError, maskSecrets } from "../masking.ts";
import { tenantNameProblem, withTenant } from "../tenant.ts";
import { DIALECTS } from "../vocabulary.ts";
import { builtinWriter, createWriter as createBuiltinWriter } from "../writers/registry.ts";
import { isTenantWriters, type OutboxWriter, type TenantWriters } from "../writers/writer.ts";
import { connectionSecrets, filterSecrets } from "./secret-values.ts";
import type { OutboxConfig, TargetConfig } from "./types.ts";
import { importWriterClass, type WriterClassSite } from "./writer-class.ts";

/** Options for `createWriters`. */
export interface CreateWritersOptions {
  /** Masked in any error message (see `configSecrets`). */
  secrets?: readonly string[];
  logger?: Logger;
}

/**
 * Constructs one writer per target, keyed by target name (`app.db`): a built-in `writer` from the
 * registry, or a `writer_class` imported and constructed with the `[connection]` table. A tenant
 * template's target gets its `TenantWriters` instead, which make each tenant's writer on demand. On
 * any failure the writers already made are closed and a `ConfigError` names the target's key.
 */
export async function createWriters(
  config: OutboxConfig,
  options: CreateWritersOptions = {},
): Promise<Record<string, OutboxWriter | TenantWriters>> {
  const writers: Record<string, OutboxWriter | TenantWriters> = {};
  const logger = libraryLogger(options.logger);
  try {
    for (const app of config.apps) {
      for (const target of app.targets) {
        const writer = target.tenants
          ? await createTenantWriters(config, target, options)
          : await createWriter(config, target, options);
        writers[target.name] = writer;
        logger.debug(
          `writer ready for target ${target.name} (${isTenantWriters(writer) ? `tenant template ${writer.describe()}` : (target.writer ?? target.writerClass)})`,
        );
      }
    }
  } catch (error) {
    // A TenantWriters holds nothing open: each tenant's writer is its caller's to close.
    await Promise.allSettled(Object.values(writers).map(async (w) => (isTenantWriters(w) ? undefined : w.close?.())));
    throw error;
  }
  return writers;
}

async function createWriter(
  config: OutboxConfig,
  target: TargetConfig,
  options: CreateWritersOptions,
): Promise<OutboxWriter> {
  const secrets = options.secrets ?? [];
  if (target.writerClass) {
    const site = classSite(config, target, secrets);
    const make = await importWriterClass(target.writerClass, site);
    return checkDialect(make(target.connection), target.writerClass, site);
  }
  return builtin(config, target, target.connection, secrets, "");
}

/**
 * The writers of a tenant template (SPEC §4c): `open(tenant)` makes a writer as `createWriter` does,
 * from the connection with `{tenant}` resolved. A writer_class is imported now, so that a mistake in
 * its module is told at load; it is constructed per tenant.
 */
async function createTenantWriters(
  config: OutboxConfig,
  target: TargetConfig,
  options: CreateWritersOptions,
): Promise<TenantWriters> {
  const secrets = options.secrets ?? [];
  const spec = builtinWriter(target.writer);
  const dialect = target.dialect ?? spec?.dialect;
  // The config refuses a writer_class template without `dialect`; a TargetConfig built by hand may not.
  if (dialect === undefined)
    throw new ConfigError(`a writer_class tenant template needs a dialect (one of ${DIALECTS.join(", ")})`, {
      file: config.file,
      keyPath: `${keyPathOf(target)}.dialect`,
    });
  let make: (connection: Record<string, unknown>, secrets: readonly string[], tenant: string) => Promise<OutboxWriter>;
  if (target.writerClass) {
    const writerClass = target.writerClass;
    const site = classSite(config, target, secrets);
    const construct = await importWriterClass(writerClass, site);
    make = async (connection, tenantSecrets) =>
      checkDialect(construct(connection, tenantSecrets), writerClass, { ...site, secrets: tenantSecrets });
  } else {
    make = async (connection, tenantSecrets, tenant) => builtin(config, target, connection, tenantSecrets, tenant);
  }
  return {
    tenantTemplate: true,
    dialect,
    ...(spec ? { concurrent: spec.concurrent ?? false } : {}),
    async open(tenant: string): Promise<OutboxWriter> {
      const problem = tenantNameProblem(tenant);
      if (problem !== null) throw new InvalidArgumentError(`target ${target.name}: ${problem}`);
      const connection = withTenant(target.connection, tenant);
      // A credential may itself be templated (a token per tenant): this tenant's is masked too.
      return make(connection, filterSecrets([...secrets, ...connectionSecrets(target.writer, connection)]), tenant);
    },
    describe: () => maskSecrets(spec?.describe?.(target.connection) ?? `writer_class ${target.writerClass}`, secrets),
  };
}

/**
 * A built-in writer of `target` on `connection` (the target's, or one tenant's), with the options the
 * target's settings imply.
 */
function builtin(
  config: OutboxConfig,
  target: TargetConfig,
  connection: Record<string, unknown>,
  secrets: readonly string[],
  tenant: string,
): OutboxWriter {
  // With trace_comments every statement text is new: PostgreSQL must not keep each one prepared
  // (Bun's MySQL driver bounds its own cache at 256 texts per connection).
  let options =
    target.traceComments && target.writer === "postgres" && connection.prepare === undefined
      ? { ...connection, prepare: false }
      : connection;
  // `connections` batches in flight need as many connections in the pool of a server writer.
  const pooled = target.writer === "postgres" || target.writer === "mysql";
  const pool = typeof options.max_connections === "number" ? options.max_connections : 1;
  if (pooled && pool < target.connections) options = { ...options, max_connections: target.connections };
  try {
    return createBuiltinWriter(target.writer ?? "", options);
  } catch (error) {
    const message = maskSecrets(
      `cannot create writer "${target.writer}"${tenant ? ` for tenant "${tenant}"` : ""}: ${(error as Error)?.message ?? error}`,
      secrets,
    );
    throw new ConfigError(
      message,
      { file: config.file, keyPath: `${keyPathOf(target)}.connection` },
      { cause: maskError(error, secrets) },
    );
  }
}

/** A writer_class writer whose `dialect` the drain knows, or a `ConfigError` (the writer closed). */
async function checkDialect(writer: OutboxWriter, writerClass: string, site: WriterClassSite): Promise<OutboxWriter> {
  if (writer.dialect === undefined || DIALECTS.includes(writer.dialect)) return writer;
  await writer.close?.();
  throw new ConfigError(
    `writer_class ${writerClass} has dialect "${String(writer.dialect)}"; expected one of ${DIALECTS.join(", ")}`,
    { file: site.file, keyPath: site.keyPath },
  );
}

function classSite(config: OutboxConfig, target: TargetConfig, secrets: readonly string[]): WriterClassSite {
  const baseDir = config.baseDir ?? process.cwd();
  return { file: config.file, keyPath: `${keyPathOf(target)}.writer_class`, baseDir, secrets };
}

function keyPathOf(target: TargetConfig): string {
  return `app.${target.app}.db.${target.db}`;
}
