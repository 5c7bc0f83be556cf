import { InvalidArgumentError } from "../errors.ts";
import { DIALECTS, type Dialect } from "../vocabulary.ts";

/**
 * What sets one dialect's SQL apart wherever statements are read or written. Every per-dialect
 * table in src/sql is a `Record<Dialect, …>` like this one — the ledger's SQL (ledger.ts), the
 * outbox_seq schema and its probes (schema.ts), identifier quoting (ident.ts), parameter limits
 * (coalesce.ts) — so a dialect added to DIALECTS does not compile until each of them says what
 * it does, and nothing falls back to SQLite's SQL by omission.
 */
export interface DialectTraits {
  /** Whose lexical rules read a statement: comments, quotes, placeholders (libSQL reads SQL exactly like SQLite). */
  lexer: "sqlite" | "postgres" | "mysql";
  /** How a placeholder is written when we write one: `$1…$n`, or `?`. */
  placeholder: "dollar" | "question";
  /** Whether the engine binds `?` and `?NNN` as an application writes them, so translation leaves the text alone. */
  readsQuestionMarks: boolean;
  /**
   * How an injected row is kept from applying twice: a partial unique index on outbox_seq that
   * `ON CONFLICT (outbox_seq) WHERE outbox_seq != 0 DO NOTHING` names, or (no partial indexes) a
   * nullable unique outbox_seq and `INSERT … SELECT … WHERE NOT EXISTS`.
   */
  seqGuard: "partial-index" | "nullable-unique";
  /** Whether compat mode — the reference implementation's SQLite forms — exists for it. */
  compat: boolean;
}

export const DIALECT_TRAITS: Readonly<Record<Dialect, DialectTraits>> = {
  sqlite: {
    lexer: "sqlite",
    placeholder: "question",
    readsQuestionMarks: true,
    seqGuard: "partial-index",
    compat: true,
  },
  libsql: {
    lexer: "sqlite",
    placeholder: "question",
    readsQuestionMarks: true,
    seqGuard: "partial-index",
    compat: true,
  },
  postgres: {
    lexer: "postgres",
    placeholder: "dollar",
    readsQuestionMarks: false,
    seqGuard: "partial-index",
    compat: false,
  },
  // MySQL/MariaDB bind `?`, but not `?NNN` nor a `?` touching a word (template.ts rewrites those).
  mysql: {
    lexer: "mysql",
    placeholder: "question",
    readsQuestionMarks: false,
    seqGuard: "nullable-unique",
    compat: false,
  },
};

/** The dialects whose lexers differ: each distinct `lexer`, once. */
export const LEXER_DIALECTS: readonly Dialect[] = [...new Set(DIALECTS.map((d) => DIALECT_TRAITS[d].lexer))];

/** `count` placeholders for `dialect`, numbered from `from` where it numbers them. */
export function placeholders(dialect: Dialect, count: number, from = 1): string[] {
  const dollar = DIALECT_TRAITS[dialect].placeholder === "dollar";
  return Array.from({ length: count }, (_, i) => (dollar ? `$${from + i}` : "?"));
}

/** Throws `InvalidArgumentError` unless `dialect` is one of `DIALECTS`. */
export function checkDialect(dialect: Dialect): void {
  if (!DIALECTS.includes(dialect))
    throw new InvalidArgumentError(`unknown SQL dialect "${String(dialect)}" (expected one of ${DIALECTS.join(", ")})`);
}
