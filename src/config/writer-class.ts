import { existsSync } from "node:fs";
import { isAbsolute, resolve } from "node:path";
import { ConfigError } from "../errors.ts";
import type { OutboxWriter } from "../writers/writer.ts";
import { maskError, maskSecrets } from "../masking.ts";
import { isRelativePath, splitWriterClass } from "./writer-class-spec.ts";

/** Where a `writer_class` is configured, for error messages. */
export interface WriterClassSite {
  file?: string;
  keyPath: string;
  /** Directory package specifiers and relative paths resolve from. */
  baseDir: string;
  /** Strings to mask in messages (constructor errors may echo connection values). */
  secrets?: readonly string[];
}

/**
 * Constructs the writer of a `writer_class` with a connection; its failures are masked with `secrets`
 * (default: the site's).
 */
export type WriterClassFactory = (connection: Record<string, unknown>, secrets?: readonly string[]) => OutboxWriter;

/**
 * Imports `"./file.ts:Export"` (a path relative to `baseDir`, or absolute) or `"package:Export"`
 * (resolved from `baseDir`) and returns what makes `new Export(connection)`. Works from the compiled
 * binary: Bun transpiles a `.ts` file imported from disk at runtime. Every failure, the
 * constructor's included, is a `ConfigError` at `keyPath`. Importing apart from constructing lets
 * a tenant template's mistakes in the module be told at load, before any tenant's writer is made.
 */
export async function importWriterClass(spec: string, site: WriterClassSite): Promise<WriterClassFactory> {
  const fail = failAt(site);
  const { module, exportName } = splitWriterClass(spec);

  let path: string;
  if (isAbsolute(module) || isRelativePath(module)) {
    path = resolve(site.baseDir, module);
    if (!existsSync(path)) throw fail(`writer_class file not found: ${path}`);
  } else {
    try {
      path = Bun.resolveSync(module, site.baseDir);
    } catch (error) {
      // The reference's writer_class was a Python module path ("myapp.writers:TursoWriter").
      const hint = /^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$/.test(module)
        ? ` — this looks like a Python module path; use "./path/to/writer.ts:${exportName}" or a built-in writer = "…"`
        : "";
      throw fail(
        `writer_class package "${module}" cannot be resolved from ${site.baseDir}: ${(error as Error).message}${hint}`,
        error,
      );
    }
  }

  let mod: Record<string, unknown>;
  try {
    mod = (await import(path)) as Record<string, unknown>;
  } catch (error) {
    throw fail(`writer_class module ${path} failed to load: ${loadErrorMessage(error)}`, error);
  }
  const Writer = mod[exportName];
  if (Writer === undefined) {
    const names = Object.keys(mod).join(", ") || "none";
    throw fail(`writer_class module ${path} has no export "${exportName}" (exports: ${names})`);
  }
  if (typeof Writer !== "function")
    throw fail(`writer_class export "${exportName}" of ${path} is not a class (got ${typeof Writer})`);

  return (connection, secrets = site.secrets) => {
    const failHere = failAt({ ...site, secrets });
    let writer: unknown;
    try {
      writer = new (Writer as new (connection: Record<string, unknown>) => unknown)(connection);
    } catch (error) {
      throw failHere(
        `writer_class ${exportName} (${path}) constructor threw: ${(error as Error)?.message ?? error}`,
        error,
      );
    }
    if (typeof (writer as OutboxWriter | null)?.writeBatch !== "function") {
      throw failHere(`writer_class ${exportName} (${path}) does not implement writeBatch(stmts)`);
    }
    return writer as OutboxWriter;
  };
}

/** A `ConfigError` at the site's key path, its message and cause masked with the site's secrets. */
function failAt(site: WriterClassSite): (message: string, cause?: unknown) => ConfigError {
  return (message, cause) =>
    new ConfigError(
      maskSecrets(message, site.secrets ?? []),
      { file: site.file, keyPath: site.keyPath },
      { cause: maskError(cause, site.secrets ?? []) },
    );
}

/** Bun reports a syntax error as an AggregateError of build messages: show the first with its line:column. */
function loadErrorMessage(error: unknown): string {
  const first = (
    error as { errors?: Array<{ message?: string; position?: { file?: string; line?: number; column?: number } }> }
  ).errors?.[0];
  if (!first?.message) return (error as Error).message;
  const at = first.position?.line
    ? `${first.position.file ?? ""}:${first.position.line}:${first.position.column ?? 0}: `
    : "";
  return `${at}${first.message}`;
}
