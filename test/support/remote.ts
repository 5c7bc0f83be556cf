// A writer under test plus an independent connection to the database it writes, so tests check
// what actually landed rather than what the writer said.
import { Database } from "bun:sqlite";
import type { OutboxWriter } from "../../src/writers/writer.ts";
import { makeTempDir } from "./tmp.ts";

/** A writer on a fresh database and an independent way to read and change that database. */
export interface Remote {
  writer: OutboxWriter;
  read(sql: string): Promise<unknown[][]>;
  exec(sql: string): Promise<void>;
  /** Closes the writer and removes everything the remote created. */
  done(): Promise<void>;
}

/**
 * A remote on a fresh SQLite file (WAL) written by `make(file)`, read back through its own
 * bun:sqlite connection. `make` may register cleanups (e.g. stopping a server in front of the
 * file) with `onDone`; `safeIntegers` reads integers back as bigint.
 */
export function fileRemote(
  make: (file: string, onDone: (fn: () => unknown) => void) => OutboxWriter,
  options: { safeIntegers?: boolean } = {},
): () => Promise<Remote> {
  return async () => {
    const dir = makeTempDir();
    const file = dir.file("remote.db");
    const setup = new Database(file, { create: true });
    setup.run("PRAGMA journal_mode = WAL");
    setup.close();
    const cleanups: Array<() => unknown> = [];
    const writer = make(file, (fn) => cleanups.push(fn));
    const withDb = <T>(fn: (db: Database) => T): T => {
      const db = new Database(file, { safeIntegers: options.safeIntegers ?? false });
      try {
        return fn(db);
      } finally {
        db.close();
      }
    };
    return {
      writer,
      read: async (sql) => withDb((db) => db.query(sql).values() as unknown[][]),
      exec: async (sql) => withDb((db) => void db.run(sql)),
      done: async () => {
        await writer.close?.();
        for (const fn of cleanups) await fn();
        dir.cleanup();
      },
    };
  };
}

/** Row count of `table` in a SQLite file (the remote of a `sqlite` target). */
export function countRows(file: string, table: string): number {
  const db = new Database(file, { readonly: true });
  try {
    db.run("PRAGMA busy_timeout = 5000"); // the drain may be committing right now
    return db.query<{ n: number }, []>(`SELECT count(*) AS n FROM "${table}"`).get()!.n;
  } finally {
    db.close();
  }
}
