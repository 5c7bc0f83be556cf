/** Letters, digits, `_ $ . -`, not starting with `.` or `-`: a table name is also a file name. */
const TABLE_NAME = /^[A-Za-z0-9_$][A-Za-z0-9_$.-]*$/;

/**
 * Why `name` cannot name a table (its file is `{db_dir}/{name}.db`), or null when it can. The
 * producer, the config loader and the commands all ask this one question, so a name one of them
 * accepts is never refused by another.
 */
export function tableNameProblem(name: unknown): string | null {
  if (typeof name !== "string" || !TABLE_NAME.test(name) || name.includes("..")) {
    return `invalid table name ${JSON.stringify(name)}: use letters, digits, _ $ . - (not starting with . or -); it names the file {db_dir}/{table}.db`;
  }
  return null;
}
