/** Every error sqloutbox raises is an `OutboxError` with one of these string codes. */
export type OutboxErrorCode =
  | "E_OUTBOX" // generic / unexpected
  | "E_CONFIG" // outbox.toml or option validation
  | "E_SECRETS" // .env / Doppler resolution
  | "E_QUEUE_FULL" // max_pending reached
  | "E_INVALID_ARG" // a bind argument or payload that cannot be stored losslessly
  | "E_CLOSED" // operation on a closed Outbox, or on a stopped OutboxSyncService
  | "E_STORAGE" // the local SQLite file cannot be opened, read or written
  | "E_NOT_FOUND" // a namespace, seq or dead letter that does not exist
  | "E_CHAIN" // a broken prev_seq chain
  | "E_UNSUPPORTED_STATEMENT" // a statement the rewriter refuses
  | "E_INVALID_STATEMENT" // SQL text refused at push: not exactly one statement, wrong argument count, …
  | "E_WRITE" // a remote writer failure
  | "E_LOCKED" // another drain holds the db_dir lock
  | "E_TRANSACTION" // a local transaction the outbox cannot keep whole (two files, one it did not open)
  | "E_CONFLICT" // an operator's selection changed between its count and the action on it
  | "E_REPLAY_REFUSED" // a dead letter the remote may have applied (in doubt) or did (applied): never replayed blindly
  | "E_TENANT" // a transaction mixing two tenants (a group belongs to one tenant's database)
  | "E_USAGE"; // a command-line usage error

/** Base class of every sqloutbox error; `code` is stable, `cause` carries the underlying error. */
export class OutboxError extends Error {
  readonly code: OutboxErrorCode;
  constructor(code: OutboxErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}

/** `enqueue` refused because the namespace already holds `maxPending` pending rows. */
export class QueueFullError extends OutboxError {
  constructor(
    readonly namespace: string,
    readonly maxPending: number,
    readonly file?: string,
  ) {
    super(
      "E_QUEUE_FULL",
      `outbox queue full: namespace "${namespace}" has ${maxPending} pending rows (max_pending=${maxPending})${file ? ` in ${file}` : ""}`,
    );
  }
}

/** A value that cannot be stored and replayed losslessly (bind argument, tag, payload, namespace). */
export class InvalidArgumentError extends OutboxError {
  constructor(
    message: string,
    /** `index`: the argument's position; `statement`: the statement's in a pushMany (both from 0). */
    readonly details: { namespace?: string; file?: string; index?: number; statement?: number } = {},
  ) {
    super("E_INVALID_ARG", message);
  }
}

/** Operation on an `Outbox` (or writer) after `close()`. */
export class OutboxClosedError extends OutboxError {
  constructor(
    readonly file: string,
    readonly namespace: string,
  ) {
    super("E_CLOSED", `outbox is closed: namespace "${namespace}" in ${file}`);
  }
}

/**
 * A call that needs the queues (`start()`, `runOnce()`, `pendingCount()`) on an `OutboxSyncService` after
 * `stop()`: a stopped service is not restarted; create a new one.
 */
export class ServiceStoppedError extends OutboxError {
  constructor() {
    super("E_CLOSED", "this OutboxSyncService was stopped; create a new one");
  }
}

/** The local SQLite file cannot be opened, read or written (not a database, read-only dir, disk full, …). */
export class StorageError extends OutboxError {
  constructor(
    message: string,
    readonly file: string,
    readonly namespace?: string,
    options?: { cause?: unknown },
  ) {
    super("E_STORAGE", message, options);
  }
}

/** A namespace, seq or dead letter that does not exist. */
export class NotFoundError extends OutboxError {
  constructor(message: string) {
    super("E_NOT_FOUND", message);
  }
}

/**
 * An operator's action on a selection of dead letters refused, nothing changed: the letters that
 * match its filter are no longer the ones counted (a letter was added, replayed or purged meanwhile).
 */
export class SelectionChangedError extends OutboxError {
  constructor(
    message: string,
    readonly file: string,
    readonly namespace: string,
  ) {
    super("E_CONFLICT", message);
  }
}

/**
 * A replay refused, nothing replayed: the remote may have applied the letter's row (`remote` "in
 * doubt": a batch that carried it got no answer), or did ("applied"), so a replay could apply it
 * twice. The message says which letter, why, and what to do.
 */
export class ReplayRefusedError extends OutboxError {
  constructor(
    message: string,
    readonly file: string,
    readonly namespace: string,
    readonly seq: number,
    readonly remote: "in doubt" | "applied",
  ) {
    super("E_REPLAY_REFUSED", message);
  }
}

/** The statement rewriter refuses a statement; `reason` says exactly why. */
export class UnsupportedStatementError extends OutboxError {
  constructor(
    readonly reason: string,
    readonly sql?: string,
  ) {
    super("E_UNSUPPORTED_STATEMENT", `unsupported statement: ${reason}`);
  }
}

/** Invalid configuration; `file`, `keyPath`, and for syntax errors `line`/`column` (1-based) say where. */
export class ConfigError extends OutboxError {
  constructor(
    message: string,
    readonly where: { file?: string; keyPath?: string; line?: number; column?: number } = {},
    options?: { cause?: unknown },
  ) {
    const loc = [
      where.file ? `${where.file}${where.line ? `:${where.line}${where.column ? `:${where.column}` : ""}` : ""}` : "",
      where.keyPath ? `[${where.keyPath}]` : "",
    ]
      .filter(Boolean)
      .join(" ");
    super("E_CONFIG", loc ? `${loc}: ${message}` : message, options);
    // JavaScriptCore gives every Error own `line`/`column` properties (the JS source position of
    // the throw), which shadow the getters below: replace them with the config file's position.
    for (const key of ["line", "column"] as const) {
      Object.defineProperty(this, key, { value: where[key], enumerable: false, configurable: true, writable: false });
    }
  }
  get file() {
    return this.where.file;
  }
  get keyPath() {
    return this.where.keyPath;
  }
  get line() {
    return this.where.line;
  }
  get column() {
    return this.where.column;
  }
}

/** Several configuration problems found in one pass; `issues` holds each one with its own key path. */
export class ConfigIssuesError extends ConfigError {
  constructor(readonly issues: ConfigError[]) {
    const first = issues[0]?.where ?? {};
    super(`${issues.length} problems:\n${issues.map((issue) => `  - ${issue.message}`).join("\n")}`, {
      file: first.file,
    });
  }
}

/** Secrets could not be resolved (.env, Doppler); never contains the secret values. */
export class SecretsError extends OutboxError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("E_SECRETS", message, options);
  }
}

/**
 * A remote writer failed as a whole (connection, protocol, timeout). `misconfigured` marks a
 * failure no retry fixes by itself — authentication refused, the database does not exist — so
 * the drain reports the target as misconfigured rather than down.
 */
export class WriteError extends OutboxError {
  readonly misconfigured: boolean;
  constructor(
    message: string,
    readonly target?: string,
    options?: { cause?: unknown; misconfigured?: boolean },
  ) {
    super("E_WRITE", message, options);
    this.misconfigured = options?.misconfigured ?? false;
  }
}

/**
 * Whether `error` is a `WriteError`, told by its code rather than its class: a custom writer's
 * module may hold a copy of this package of its own (the compiled binary has one built in, the
 * writer imports another from its project's node_modules), and a copy's class is another class.
 */
export function isWriteError(error: unknown): error is WriteError {
  return error instanceof Error && (error as { code?: unknown }).code === "E_WRITE";
}

/** Whether `error` is a `WriteError` that marks its target misconfigured (see `isWriteError`). */
export function isMisconfigured(error: unknown): boolean {
  return isWriteError(error) && error.misconfigured === true;
}

/**
 * Another drain holds the exclusive lock on a db_dir; `holder` is its PID and start time, as its lock file
 * says (null if it says none).
 */
export class LockedError extends OutboxError {
  constructor(
    readonly lockFile: string,
    readonly holder: { pid: number; since: string | null } | null = null,
  ) {
    const who = holder ? ` (pid ${holder.pid}${holder.since ? `, running since ${holder.since}` : ""})` : "";
    super("E_LOCKED", `another drain is already running${who}: lock ${lockFile} is held`);
  }
}

/**
 * `outbox.transaction` touched two tables that live in different files (one file per table, a
 * `db_dir`): no local transaction can span two SQLite files, so the call is refused before anything
 * of it commits. `tables` are the table the transaction started in and the one refused.
 */
export class CrossTableTransactionError extends OutboxError {
  constructor(
    readonly tables: readonly [string, string],
    readonly files: readonly [string, string],
  ) {
    super(
      "E_TRANSACTION",
      `outbox.transaction cannot span tables "${tables[0]}" and "${tables[1]}": with one file per table (db_dir) they are ${files[0]} and ${files[1]}, and one local transaction cannot span two files. Keep the tables of a transaction in one file: db_file = "…" in [app.NAME] and new SQLMiddleware({ dbFile }) (or { database } for the application's own database)`,
    );
  }
}

/**
 * A push for one tenant inside a transaction whose pushes are another tenant's: a group is
 * delivered in one remote transaction, and two tenants' rows go to two databases (SPEC §4c).
 */
export class CrossTenantTransactionError extends OutboxError {
  constructor(
    readonly tenants: readonly [string, string],
    readonly table: string,
  ) {
    super(
      "E_TENANT",
      `outbox.transaction cannot mix tenants "${tenants[0]}" and "${tenants[1]}" (the push into table "${table}"): each tenant's rows go to its own database, and a transaction is delivered whole, in one remote transaction. Push each tenant's events in a transaction of its own`,
    );
  }
}

/**
 * A push on the application's own database while a transaction the outbox did not open is in
 * progress: the outbox cannot tell where that transaction ends, so it could not keep its events
 * one group. Refused; `outbox.transaction(fn)` opens the transaction and keeps them together.
 */
export class ForeignTransactionError extends OutboxError {
  constructor(readonly file: string) {
    super(
      "E_TRANSACTION",
      `cannot push inside a transaction the outbox did not open (on ${file}): its events could not be delivered together. Run the application's writes and the pushes in outbox.transaction(() => { … }), which opens the transaction (BEGIN IMMEDIATE) and delivers what it committed as one group`,
    );
  }
}

/** A command-line usage error (exit code 2). */
export class UsageError extends OutboxError {
  constructor(message: string) {
    super("E_USAGE", message);
  }
}

/** A short, credential-free description of anything thrown: its message and its most specific code. */
export function describeError(error: unknown): { message: string; errorClass: string } {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return { message: error.message, errorClass: typeof code === "string" && code ? code : error.name };
  }
  return { message: String(error), errorClass: typeof error };
}

/** `push` refused the SQL text of a statement for `table`; `reason` says exactly why. */
export class InvalidStatementError extends OutboxError {
  constructor(
    readonly reason: string,
    readonly table?: string,
    /** Its position in the statements of a pushMany (from 0); undefined for a push. */
    readonly statement?: number,
  ) {
    const which = statement === undefined ? "" : ` (statement ${statement} of the pushMany)`;
    super(
      "E_INVALID_STATEMENT",
      `invalid statement${table === undefined ? "" : ` for table "${table}"`}${which}: ${reason}`,
    );
  }
}
