import { camel, join, type Reader, type Table } from "./reader.ts";

// What one declared outbox.toml key is (keys.ts declares them all) and what a table of them gives:
// the values read and checked (`readKeys`), the defaults (`literalDefaults`), the fields of the
// resolved config (`Values`) and the typed input of defineConfig (`Input`).

/** How a key's value is checked: its type in the reference's words, and the Reader check that reads it. */
export interface Kind<T> {
  /** As configuration.md's Type column says it (`integer ≥ 1`). */
  readonly type: string;
  /** The value; undefined when absent or wrong (the problem is then reported). */
  read(r: Reader, table: Table, key: string, path: string): T | undefined;
}

/**
 * A structure its section's code reads itself (the targets, the tables, the writer): declared for its name,
 * input type and docs.
 */
export interface Own<T> {
  readonly type: string;
  readonly own: true;
  /** Never set: carries the input type. */
  readonly input?: T;
}

/**
 * The TOML value's unit: seconds and minutes become milliseconds at this boundary (the field is then `…Ms`);
 * days stay days.
 */
export type Unit = "seconds" | "minutes" | "days";
const MS_PER: Partial<Record<Unit, number>> = { seconds: 1000, minutes: 60_000 };

/** A default that is not one literal: how the reference words it, and the value it gives (null: the code decides). */
export class Described<V> {
  constructor(
    readonly text: string,
    readonly value: () => V,
  ) {}
}

export function described(text: string): Described<null>;
export function described<V>(text: string, value: () => V): Described<V>;
export function described(text: string, value: () => unknown = () => null): Described<unknown> {
  return new Described(text, value);
}

/** A key is either required (only structures are) or has a default, in its own unit. */
type Presence<T> =
  | { readonly default: T | Described<unknown>; readonly required?: never }
  | { readonly required: true; readonly default?: never };

/** What a key declares besides its kind. */
export type Options<T> = Presence<T> & {
  readonly unit?: Unit;
  /** The Type column's words, where a rule of `check` leaves the kind's incomplete. */
  readonly type?: string;
  /** What is wrong with a value of the right type, in words; undefined when nothing is. */
  check?(value: T): string | undefined;
  /** The meaning in one line: how configuration.md's row of the key begins. */
  readonly doc: string;
};

type KindValue<K> = K extends Kind<infer T> ? T : K extends Own<infer T> ? T : never;

/** One declared key. */
export type Key = Options<unknown> & { readonly kind: Kind<unknown> | Own<unknown> };
/** A table's keys by their TOML (snake_case) names. */
export type Keys = Record<string, Key>;

/**
 * Declares a key of `kind`: the kind fixes the value's type, which `options` (its default, its check) must
 * agree with.
 */
export function key<K extends Kind<unknown> | Own<unknown>, const O extends Options<KindValue<K>>>(
  kind: K,
  options: O,
): O & { readonly kind: K } {
  return { ...options, kind };
}

type Range = { min?: number; above?: number };
const rangeWords = ({ min, above }: Range) =>
  min !== undefined ? ` ≥ ${min}` : above !== undefined ? ` > ${above}` : "";

export const integer = (range: Range = {}): Kind<number> => ({
  type: `integer${rangeWords(range)}`,
  read: (r, t, k, p) => r.number(t, k, p, { integer: true, ...range }),
});
/** A number, fractions allowed. */
export const number = (range: Range = {}): Kind<number> => ({
  type: `number${rangeWords(range)}`,
  read: (r, t, k, p) => r.number(t, k, p, range),
});
export const boolean: Kind<boolean> = { type: "boolean", read: (r, t, k, p) => r.boolean(t, k, p) };
export const string: Kind<string> = { type: "string", read: (r, t, k, p) => r.string(t, k, p) };
/** One of `choices`; a value in `refused` is told its reason instead of the list. */
export const choice = <T extends string>(choices: readonly T[], refused: Record<string, string> = {}): Kind<T> => ({
  type: choices.map((c) => `"${c}"`).join(" | "),
  read: (r, t, k, p) => r.oneOf(t, k, p, choices, refused),
});
/** An integer ≥ 0 where 0 (or null, in code) means "no limit": null. */
export const limit: Kind<number | null> = {
  type: "integer ≥ 0",
  read(r, table, key, path) {
    if (r.raw(table, key) === null && r.style === "camel") return null;
    const n = r.number(table, key, path, { integer: true, min: 0 });
    return n === 0 ? null : n;
  },
};
export const own = <T>(type: string): Own<T> => ({ type, own: true });

/** The words of the key's Type column in configuration.md. */
export function typeWords(key: Key): string {
  return key.type ?? (key.unit ? `${key.kind.type}, ${key.unit}` : key.kind.type);
}

/**
 * Reads every key of `keys` that is not `own` out of `table`: its value, checked, or its default
 * when absent or wrong; in milliseconds where its unit is seconds or minutes, under its field's name.
 */
export function readKeys<S extends Keys>(r: Reader, table: Table, path: string, keys: S): Values<S> {
  const values: Record<string, unknown> = {};
  for (const [name, key] of Object.entries(keys)) {
    if ("read" in key.kind) values[fieldName(name, key)] = inMs(key, readKey(r, table, path, name, key, key.kind));
  }
  return values as Values<S>;
}

function readKey(r: Reader, table: Table, path: string, name: string, key: Key, kind: Kind<unknown>): unknown {
  const value = kind.read(r, table, name, path);
  const problem = value === undefined ? undefined : key.check?.(value);
  if (problem !== undefined) r.fail(join(path, r.key(name)), problem);
  return value === undefined || problem !== undefined ? defaultValue(key) : value;
}

function defaultValue(key: Key): unknown {
  return key.default instanceof Described ? key.default.value() : key.default;
}

function inMs(key: Key, value: unknown): unknown {
  const factor = key.unit && MS_PER[key.unit];
  return factor && typeof value === "number" ? value * factor : value;
}

/** The resolved config's name for a key: camelCase, `…Ms` where its seconds or minutes become milliseconds. */
function fieldName(name: string, key: Key): string {
  return key.unit && MS_PER[key.unit] ? `${camel(name.replace(/_(seconds|minutes)$/, ""))}Ms` : camel(name);
}

/** The keys of `keys` with one literal default, camelCase, each with that default in its TOML unit. */
export function literalDefaults<S extends Keys>(keys: S): Defaults<S> {
  const literal = Object.entries(keys).filter(([, key]) => !key.required && !(key.default instanceof Described));
  return Object.fromEntries(literal.map(([name, key]) => [camel(name), key.default])) as Defaults<S>;
}

// The same names at the type level: `batch_max_bytes` → `batchMaxBytes`, `backoff_cap_minutes` → `backoffCapMs`.
type Camel<S extends string> = S extends `${infer Head}_${infer Tail}` ? `${Head}${Capitalize<Camel<Tail>>}` : S;
type Bare<K extends string> = K extends `${infer B}_${"seconds" | "minutes"}` ? B : K;
type Field<K extends string, S> = S extends { unit: "seconds" | "minutes" } ? `${Camel<Bare<K>>}Ms` : Camel<K>;
type ValueOf<S> = S extends { kind: infer K } ? KindValue<K> : never;
type DefaultValue<S> = S extends { default: Described<infer V> } ? V : never;
type Flat<T> = { [K in keyof T]: T[K] } & {};

/** The resolved config's fields of the keys the table reads (not `own`). */
export type Values<S extends Keys> = {
  -readonly [K in keyof S & string as S[K]["kind"] extends Own<unknown> ? never : Field<K, S[K]>]:
    | ValueOf<S[K]>
    | DefaultValue<S[K]>;
};

/** defineConfig's input of a table: every key in camelCase, in its TOML unit; optional unless required. */
export type Input<S extends Keys> = Flat<
  { [K in keyof S & string as S[K] extends { required: true } ? Camel<K> : never]: ValueOf<S[K]> } & {
    [K in keyof S & string as S[K] extends { required: true } ? never : Camel<K>]?: ValueOf<S[K]>;
  }
>;

/** The literal defaults of a table, by camelCase name. */
export type Defaults<S extends Keys> = {
  [K in keyof S & string as S[K] extends { default: infer D }
    ? D extends Described<unknown>
      ? never
      : Camel<K>
    : never]: S[K]["default"];
};
