// The words every layer shares — the writers, the queue, the SQL rewriter, the config, the drain —
// kept at the bottom of the house so any of them can import it without importing another.

/** The SQL dialect a target speaks; selects how statements are converted and DDL is generated. */
export type Dialect = "sqlite" | "libsql" | "postgres" | "mysql";

/** Every dialect, in the order messages list them. */
export const DIALECTS: readonly Dialect[] = ["sqlite", "libsql", "postgres", "mysql"];

/** Bind values every writer accepts: exactly what bun:sqlite can bind. */
export type BindValue = string | number | bigint | boolean | null | Uint8Array;

/** Local durability of the queue files: `normal` = synchronous=NORMAL (default), `full` = synchronous=FULL. */
export type Durability = "normal" | "full";

/**
 * Permission bits of the files sqloutbox creates — queue files (their -wal/-shm inherit them), the
 * drain's lock and state files — unless `file_mode` says otherwise: 0o600, since payloads and the
 * errors that quote them rest in clear and no other local user should read them.
 */
export const DEFAULT_FILE_MODE = 0o600;
