import { ConfigError } from "../errors.ts";
import { interpolate, type EnvMap } from "./interpolate.ts";
import { didYouMean } from "./suggest.ts";

/** A plain key → value object (a TOML table or a programmatic input object). */
export type Table = Record<string, unknown>;

/** How a config document is spelled: TOML snake_case keys, or camelCase for `defineConfig`. */
export type KeyStyle = "toml" | "camel";

/** The name of a JS value's type as a config author would say it. */
export function typeName(value: unknown): string {
  if (value === null) return "null";
  if (value === undefined) return "nothing";
  if (typeof value === "number") return Number.isInteger(value) ? "integer" : "float";
  if (Array.isArray(value)) return "array";
  if (value instanceof Date) return "datetime";
  if (typeof value === "object") return "table";
  return typeof value;
}

/** True for a plain object usable as a table (not an array, date or null). */
export function isTable(value: unknown): value is Table {
  return typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof Date);
}

/** `batch_max_bytes` → `batchMaxBytes`: how defineConfig spells a TOML key. */
export function camel(snake: string): string {
  return snake.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
}

/**
 * Reads typed values out of a config document while collecting every problem as a `ConfigError`
 * with its key path, so one pass reports all of them. Strings are `${VAR}`-interpolated when an env is given.
 */
export class Reader {
  readonly issues: ConfigError[] = [];
  /** Values of the `${VAR}`s used inside `[connection]` tables: treated as secrets. */
  readonly secretValues = new Set<string>();

  constructor(
    readonly file: string | undefined,
    readonly style: KeyStyle,
    private readonly env: EnvMap | null,
    /** Finds where a key path is written in the source text (TOML only), for line/column. */
    private readonly locate?: (keyPath: string) => { line: number; column: number } | undefined,
  ) {}

  /** The key as spelled in this document style (schema keys are snake_case). */
  key(snake: string): string {
    return this.style === "toml" ? snake : camel(snake);
  }

  /** Records one problem at `keyPath`. */
  fail(keyPath: string, message: string): undefined {
    this.issues.push(new ConfigError(message, { file: this.file, keyPath, ...this.locate?.(keyPath) }));
    return undefined;
  }

  /** Reports every key of `table` not in `allowed` (snake_case schema names), with a suggestion. */
  checkKeys(table: Table, allowed: readonly string[], path: string): void {
    const names = allowed.map((k) => this.key(k));
    for (const k of Object.keys(table)) {
      if (!names.includes(k)) this.fail(join(path, k), `unknown key "${k}"${didYouMean(k, names)}`);
    }
  }

  /** The raw value of a schema key, or undefined. */
  raw(table: Table, snake: string): unknown {
    return table[this.key(snake)];
  }

  /**
   * Interpolates a string found at `keyPath`; reports a missing variable there. `secrets` says what
   * of each variable used is a secret (`secretValues`): all of it, or (a connection's) its credentials.
   */
  text(
    value: string,
    keyPath: string,
    secrets?: (name: string, value: string) => readonly string[],
  ): string | undefined {
    if (!this.env) return value;
    try {
      return interpolate(
        value,
        this.env,
        secrets
          ? (name, v) => {
              for (const secret of secrets(name, v)) this.secretValues.add(secret);
            }
          : undefined,
      );
    } catch (error) {
      return this.fail(keyPath, (error as Error).message);
    }
  }

  string(table: Table, snake: string, path: string): string | undefined {
    const value = this.raw(table, snake);
    if (value === undefined) return undefined;
    const at = join(path, this.key(snake));
    if (typeof value !== "string") return this.fail(at, `expected a string, got ${typeName(value)}`);
    return this.text(value, at);
  }

  boolean(table: Table, snake: string, path: string): boolean | undefined {
    const value = this.raw(table, snake);
    if (value === undefined) return undefined;
    if (typeof value !== "boolean")
      return this.fail(join(path, this.key(snake)), `expected a boolean (true or false), got ${typeName(value)}`);
    return value;
  }

  /** A number within bounds; `integer` rejects fractions. Units are the caller's to document. */
  number(
    table: Table,
    snake: string,
    path: string,
    rule: { integer?: boolean; min?: number; above?: number },
  ): number | undefined {
    const value = this.raw(table, snake);
    if (value === undefined) return undefined;
    const at = join(path, this.key(snake));
    const kind = rule.integer ? "an integer" : "a number";
    if (typeof value !== "number" || Number.isNaN(value))
      return this.fail(at, `expected ${kind}, got ${Number.isNaN(value) ? "nan" : typeName(value)}`);
    if (rule.integer && !Number.isInteger(value)) return this.fail(at, `expected an integer, got ${value}`);
    if (!Number.isFinite(value)) return this.fail(at, `expected a finite number, got ${value}`);
    if (rule.min !== undefined && value < rule.min) return this.fail(at, `must be ≥ ${rule.min}, got ${value}`);
    if (rule.above !== undefined && value <= rule.above) return this.fail(at, `must be > ${rule.above}, got ${value}`);
    return value;
  }

  /** One of a fixed set of strings; a value `refused` names is told its reason rather than the list. */
  oneOf<T extends string>(
    table: Table,
    snake: string,
    path: string,
    choices: readonly T[],
    refused: Record<string, string> = {},
  ): T | undefined {
    const value = this.string(table, snake, path);
    if (value === undefined) return undefined;
    if (!(choices as readonly string[]).includes(value)) {
      const list = choices.map((c) => `"${c}"`).join(", ");
      const reason = Object.hasOwn(refused, value)
        ? refused[value]!
        : `expected one of ${list}, got "${value}"${didYouMean(value, choices)}`;
      return this.fail(join(path, this.key(snake)), reason);
    }
    return value as T;
  }
}

/** `a.b` + `c` → `a.b.c`; keys that are not bare TOML keys are quoted. */
export function join(path: string, key: string): string {
  const part = /^[A-Za-z0-9_-]+$/.test(key) ? key : JSON.stringify(key);
  return path ? `${path}.${part}` : part;
}
