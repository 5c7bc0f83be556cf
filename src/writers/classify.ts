/**
 * Sorting remote errors into "the row's fault" (charge the row an attempt), "schema" (the remote
 * lacks a table, column, unique index or privilege the statement needs: hold the table, charge
 * nothing), "outage" (the target as a whole failed: charge nothing, back off, retry) and
 * "misconfigured" (an outage no retry fixes by itself: authentication, unknown database).
 * Decisions use driver codes; SQLite has no finer code than SQLITE_ERROR for a missing table or
 * column, so only there the message decides. Anything unrecognised is an outage: a misclassified
 * outage only delays delivery, while a misclassified row fault would dead-letter good rows.
 */
export type ErrorKind =
  | { kind: "row"; errorClass: string }
  | { kind: "schema"; errorClass: string }
  | { kind: "outage"; errorClass?: string }
  | { kind: "misconfigured"; errorClass: string };

const OUTAGE: ErrorKind = { kind: "outage" };

/** SQLSTATE classes that are the target's state, not the statement's: connection (08), resources (53),
 *  operator intervention incl. shutdown and statement timeout (57), system/IO (58), internal (XX),
 *  serialization failure and deadlock (40: retry the whole batch), invalid transaction state (25). */
const PG_OUTAGE_CLASSES = new Set(["08", "53", "57", "58", "XX", "40", "25", "F0", "HV"]);
/** Single SQLSTATEs that are outages inside otherwise row-fault classes: lock_not_available, admin
 *  shutdowns are already class 57; 55006 object_in_use. */
const PG_OUTAGE_CODES = new Set(["55P03", "55006"]);

/** Errors Bun raises before sending a statement, because of the statement itself (bind values,
 *  parameter count): the statement's fault, not the server's. */
const BUN_STATEMENT_CODES = new Set([
  "ERR_OUT_OF_RANGE",
  "ERR_INVALID_ARG_TYPE",
  "ERR_INVALID_ARG_VALUE",
  "ERR_POSTGRES_TOO_MANY_PARAMETERS",
  "ERR_POSTGRES_SYNTAX_ERROR",
  "ERR_POSTGRES_COPY_NOT_SUPPORTED",
  "ERR_MYSQL_WRONG_NUMBER_OF_PARAMETERS_PROVIDED",
  "ERR_MYSQL_SYNTAX_ERROR",
  "ERR_MYSQL_OVERFLOW",
]);

function bunStatementError(error: unknown): ErrorKind | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && BUN_STATEMENT_CODES.has(code) ? { kind: "row", errorClass: code } : undefined;
}

/** SQLSTATEs of a remote schema that lacks what a statement needs: undefined table (42P01), column
 *  (42703), schema (3F000), no unique index matching ON CONFLICT (42P10), insufficient privilege
 *  (42501: e.g. the drain role may not CREATE in `public`). */
const PG_SCHEMA_CODES = new Set(["42P01", "42703", "3F000", "42P10", "42501"]);
/** Authentication failed (28P01, 28000) or the database does not exist (3D000). */
const PG_MISCONFIGURED_CODES = new Set(["28P01", "28000", "3D000"]);

/** PostgreSQL (Bun.SQL `PostgresError`): the server's SQLSTATE is in `errno`; Bun's own errors have none. */
export function classifyPostgres(error: unknown): ErrorKind {
  const state = (error as { errno?: unknown } | null)?.errno;
  if (typeof state !== "string" || !/^[0-9A-Z]{5}$/.test(state)) return bunStatementError(error) ?? OUTAGE;
  if (PG_MISCONFIGURED_CODES.has(state)) return { kind: "misconfigured", errorClass: state };
  if (PG_SCHEMA_CODES.has(state)) return { kind: "schema", errorClass: state };
  if (PG_OUTAGE_CLASSES.has(state.slice(0, 2)) || PG_OUTAGE_CODES.has(state))
    return { kind: "outage", errorClass: state };
  // 22 data, 23 integrity, 42 syntax/undefined object, 2B/2F/0A/21/27/44/P0/… : the statement's fault.
  return { kind: "row", errorClass: state };
}

/** MySQL/MariaDB server errors that describe the server or the session, not the statement. */
const MYSQL_OUTAGE_ERRNOS = new Set([
  1021, 1037, 1038, 1040, 1041, 1043, 1053, 1077, 1080, 1081, 1114, 1129, 1130, 1135, 1152, 1153, 1154, 1155, 1156,
  1157, 1158, 1159, 1160, 1161, 1184, 1203, 1205, 1213, 1226, 1290, 1317, 1792, 1836, 1927, 3024, 4031,
]);

/** MySQL/MariaDB (Bun.SQL `MySQLError`): server errnos below 2000 are per statement unless listed as
 *  outages (shutdown 1053, lock wait 1205, deadlock 1213, killed 1927, read-only 1290/1836, …);
 *  2000+ are client/connection errors (2002/2003/2006/2013 …) and Bun's own errors carry no errno. */
/** Access denied for the user (1045) or to the database (1044), unknown database (1049). */
const MYSQL_MISCONFIGURED_ERRNOS = new Set([1044, 1045, 1049]);
/** Unknown table (1146), unknown column (1054), command or column denied (1142, 1143). */
const MYSQL_SCHEMA_ERRNOS = new Set([1146, 1054, 1142, 1143]);

export function classifyMysql(error: unknown): ErrorKind {
  const errno = (error as { errno?: unknown } | null)?.errno;
  if (typeof errno !== "number" || !Number.isInteger(errno) || errno <= 0) return bunStatementError(error) ?? OUTAGE;
  if (MYSQL_MISCONFIGURED_ERRNOS.has(errno)) return { kind: "misconfigured", errorClass: String(errno) };
  if (MYSQL_SCHEMA_ERRNOS.has(errno)) return { kind: "schema", errorClass: String(errno) };
  if (errno >= 2000 && errno < 3000) return { kind: "outage", errorClass: String(errno) };
  if (MYSQL_OUTAGE_ERRNOS.has(errno)) return { kind: "outage", errorClass: String(errno) };
  // 1062 duplicate, 1048 NOT NULL, 3819/4025 CHECK, 1064 syntax,
  // 1366/1265/1406/1264 data, 1451/1452 foreign key, …
  return { kind: "row", errorClass: String(errno) };
}

/** SQLite primary result codes that are the statement's fault (constraint, SQL error, type, size, bind range). */
const SQLITE_ROW_CODES = new Set([
  "SQLITE_CONSTRAINT",
  "SQLITE_ERROR",
  "SQLITE_MISMATCH",
  "SQLITE_TOOBIG",
  "SQLITE_RANGE",
]);
/** Hrana (remote libSQL) codes for a statement the server could not parse or bind. */
const HRANA_ROW_CODES = new Set([
  "SQL_PARSE_ERROR",
  "SQL_INPUT_ERROR",
  "ARGS_INVALID",
  "SQL_NO_STATEMENT",
  "SQL_MANY_STATEMENTS",
]);

/** SQLite and libSQL: `code` is the (extended) result code name, e.g. `SQLITE_CONSTRAINT_NOTNULL`;
 *  BUSY/LOCKED/IOERR/FULL/CANTOPEN/CORRUPT/READONLY/NOMEM and network errors are outages. */
export function classifySqlite(error: unknown): ErrorKind {
  const e = error as { code?: unknown; extendedCode?: unknown; message?: unknown } | null;
  const extended = typeof e?.extendedCode === "string" ? e.extendedCode : undefined;
  const code = extended ?? (typeof e?.code === "string" ? e.code : undefined);
  if (!code) return OUTAGE;
  if (isSqliteSchemaMessage(code, e?.message)) return { kind: "schema", errorClass: code };
  if (HRANA_ROW_CODES.has(code)) return { kind: "row", errorClass: code };
  const primary = code.match(/^SQLITE_[A-Z]+/)?.[0];
  if (primary && SQLITE_ROW_CODES.has(primary)) return { kind: "row", errorClass: code };
  return { kind: "outage", errorClass: code };
}

/** SQLite's own words for a missing table or column and for an ON CONFLICT target without a
 *  unique index: it reports all of them as plain SQLITE_ERROR (sqld: SQLITE_UNKNOWN or
 *  SQL_INPUT_ERROR), so the message is all there is to tell them from a broken statement. */
const SQLITE_SCHEMA_MESSAGE =
  /no such table|no such column|has no column named|does not match any PRIMARY KEY or UNIQUE constraint/i;

function isSqliteSchemaMessage(code: string, message: unknown): boolean {
  if (!/^(SQLITE_ERROR|SQLITE_UNKNOWN|SQL_INPUT_ERROR)$/.test(code)) return false;
  return typeof message === "string" && SQLITE_SCHEMA_MESSAGE.test(message);
}
