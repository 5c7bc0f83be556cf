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

/** Problems for keys that are set but are not positive numbers (ports: integers 1–65535). */
export function checkNumbers(connection: Connection, keys: string[], options: { port?: string } = {}): Problem[] {
  const problems: Problem[] = [];
  for (const key of keys) {
    const raw = connection[key];
    if (raw === undefined || raw === null || raw === "") continue;
    const value = Number(raw);
    if (key === options.port) {
      if (!Number.isInteger(value) || value < 1 || value > 65535) problems.push({ key, message: `must be a port number (1-65535), got ${JSON.stringify(raw)}` });
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
    if (given.length > 1) problems.push({ key: given[1]!, message: `is an alias of "${given[0]}": set only one of ${given.map((n) => `"${n}"`).join(", ")}` });
  }
  return problems;
}

/** A URL with its password (userinfo and `password=` parameters) replaced by `***`; unparsable text is fully masked. */
export function maskUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    for (const key of [...u.searchParams.keys()]) {
      if (/pass|token|secret|key/i.test(key)) u.searchParams.set(key, "***");
    }
    return u.toString();
  } catch {
    return "***";
  }
}

/** Replaces every occurrence of each non-empty secret in `text` with `***`. */
export function maskText(text: string, secrets: ReadonlyArray<string | undefined>): string {
  let out = text;
  for (const secret of secrets) {
    if (secret && secret.length > 0) out = out.split(secret).join("***");
    // A password inside a URL may appear percent-encoded.
    if (secret && encodeURIComponent(secret) !== secret) out = out.split(encodeURIComponent(secret)).join("***");
  }
  return out;
}

/** The password embedded in a URL's userinfo, if any (decoded), so it can be masked in error text. */
export function urlPassword(url: string | undefined): string | undefined {
  if (!url) return undefined;
  try {
    const u = new URL(url);
    const fromParams = u.searchParams.get("password") ?? undefined;
    return u.password ? decodeURIComponent(u.password) : fromParams;
  } catch {
    return undefined;
  }
}
