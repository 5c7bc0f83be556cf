import type { ConnectionKey } from "./writer-spec.ts";

/** A `[connection]` table: TOML values or a programmatic object. */
export type Connection = Record<string, unknown>;
/** One invalid key of a connection table and what is wrong with it. */
export type Problem = { key: string; message: string };

/** The first present key of `names` (aliases), as a string; `undefined` when none is set. */
export function stringKey(connection: Connection, ...names: string[]): string | undefined {
  for (const name of names) {
    const value = connection[name];
    if (value !== undefined && value !== null && value !== "") return String(value);
  }
  return undefined;
}

/** The first present key of `names` as a number (TOML integers/floats or numeric strings from `${VAR}`). */
export function numberKey(connection: Connection, ...names: string[]): number | undefined {
  const text = stringKey(connection, ...names);
  if (text === undefined) return undefined;
  const value = Number(text);
  return Number.isFinite(value) ? value : undefined;
}

/** A true/false key (TOML booleans, or "true"/"false" from `${VAR}`); `fallback` when unset. */
export function booleanKey(connection: Connection, name: string, fallback: boolean): boolean {
  const value = connection[name];
  if (value === true || value === "true") return true;
  if (value === false || value === "false") return false;
  return fallback;
}

/** Problems for keys that are set but are neither true nor false. */
export function checkBooleans(connection: Connection, keys: string[]): Problem[] {
  const problems: Problem[] = [];
  for (const key of keys) {
    const value = connection[key];
    if (value !== undefined && value !== true && value !== false && value !== "true" && value !== "false") {
      problems.push({ key, message: `must be true or false, got ${JSON.stringify(value)}` });
    }
  }
  return problems;
}

/** The `coalesce` key of every built-in writer. */
export const COALESCE_KEY: ConnectionKey = {
  name: "coalesce",
  description:
    "false sends every row as its own statement; by default runs of one table's same-text INSERTs go as multi-row statements (see docs/writers.md)",
};

/** Problems for keys that are set but are not positive numbers (ports: integers 1–65535). */
export function checkNumbers(connection: Connection, keys: string[], options: { port?: string } = {}): Problem[] {
  const problems: Problem[] = [];
  for (const key of keys) {
    const raw = connection[key];
    if (raw === undefined || raw === null || raw === "") continue;
    const value = Number(raw);
    if (key === options.port) {
      if (!Number.isInteger(value) || value < 1 || value > 65535)
        problems.push({ key, message: `must be a port number (1-65535), got ${JSON.stringify(raw)}` });
    } else if (!Number.isFinite(value) || value <= 0) {
      problems.push({ key, message: `must be a positive number, got ${JSON.stringify(raw)}` });
    }
  }
  return problems;
}

/** Problems when two aliases of one setting are both given (e.g. `url` and `db_url`). */
export function checkAliases(connection: Connection, aliases: string[][]): Problem[] {
  const problems: Problem[] = [];
  for (const names of aliases) {
    const given = names.filter((n) => connection[n] !== undefined);
    if (given.length > 1)
      problems.push({
        key: given[1]!,
        message: `is an alias of "${given[0]}": set only one of ${given.map((n) => `"${n}"`).join(", ")}`,
      });
  }
  return problems;
}
