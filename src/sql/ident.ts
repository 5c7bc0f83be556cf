import { InvalidArgumentError } from "../errors.ts";
import type { Dialect } from "../vocabulary.ts";

// PostgreSQL silently truncates identifiers to NAMEDATALEN-1 bytes, which would make two long
// names collide; MySQL/MariaDB refuse names over 64 characters.
const PG_MAX_BYTES = 63;
const MYSQL_MAX_CHARS = 64;

/**
 * Quotes `name` as one identifier for `dialect` (`"…"` for sqlite/libsql/postgres, `` `…` `` for
 * mysql; embedded quotes doubled). Throws `InvalidArgumentError` for a name that cannot be quoted
 * safely: empty, containing NUL or an unpaired surrogate, over 63 UTF-8 bytes (postgres) or 64
 * characters (mysql), ending in a space or outside the BMP (mysql).
 */
export function quoteIdent(name: string, dialect: Dialect): string {
  const bad: Bad = (why) => {
    throw new InvalidArgumentError(`cannot use ${JSON.stringify(name)} as a ${dialect} identifier: ${why}`);
  };
  if (typeof name !== "string" || name.length === 0) bad("it is empty");
  if (name.includes("\0")) bad("it contains a NUL character");
  if (!name.isWellFormed()) bad("it contains an unpaired UTF-16 surrogate");
  if (!Object.hasOwn(QUOTE, dialect)) bad("unknown dialect"); // a caller without our types
  return QUOTE[dialect](name, bad);
}

type Bad = (why: string) => never;

const doubleQuoted = (name: string): string => `"${name.replaceAll('"', '""')}"`;

/** Per dialect: the checks beyond the common ones, and the quoting. */
const QUOTE: Readonly<Record<Dialect, (name: string, bad: Bad) => string>> = {
  sqlite: doubleQuoted,
  libsql: doubleQuoted,
  postgres: (name, bad) => {
    if (Buffer.byteLength(name, "utf8") > PG_MAX_BYTES)
      bad(`it is longer than ${PG_MAX_BYTES} bytes and PostgreSQL would truncate it`);
    return doubleQuoted(name);
  },
  mysql: (name, bad) => {
    if ([...name].length > MYSQL_MAX_CHARS) bad(`it is longer than ${MYSQL_MAX_CHARS} characters`);
    if (name.endsWith(" ")) bad("MySQL names cannot end with a space");
    if (/[\u{10000}-\u{10FFFF}]/u.test(name))
      bad("MySQL names cannot hold characters outside the Basic Multilingual Plane");
    return `\`${name.replaceAll("`", "``")}\``;
  },
};
