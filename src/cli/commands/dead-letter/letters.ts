// What every dead-letter subcommand shares: the letters as the commands read them (where each
// lives), the files that failed, and the selection flags with the filter they make.
import { StorageError, UsageError } from "../../../errors.ts";
import { tenantNameProblem } from "../../../tenant.ts";
import { type DeadLetterFilter, type FiledDeadLetter, findDeadLetters } from "../../../outbox/dead-letters.ts";
import { log } from "../../cli-logger.ts";
import { parsePointInTime } from "../../durations.ts";
import { locationExists, type Locations, withAccessHint } from "../../locations.ts";
import { redact } from "../../text-output.ts";

/** One dead letter in `dead-letter list/show --json`: where it lives plus the record (errors masked). */
export interface DeadLetterEntry extends FiledDeadLetter {
  app: string | null;
  dbDir: string;
  /** The db_file holding it (null: a file of the db_dir). */
  dbFile: string | null;
  /** `dead` (to act on), `replayed` (as `replayedAsSeq`) or `discarded` (given up for good). */
  state: "dead" | "replayed" | "discarded";
}

/** A file that could not be read or written; the others are still processed, and the command exits 1. */
export interface FileFailure {
  file: string;
  error: string;
}

/**
 * Reads the dead letters of every location that match `filter`, read-only. A file that cannot be
 * read is logged and listed in `failed`; the command then exits 1 after printing the rest.
 */
export function collectDeadLetters(
  locations: Locations,
  filter: DeadLetterFilter = {},
): { entries: DeadLetterEntry[]; failed: FileFailure[] } {
  const out: DeadLetterEntry[] = [];
  const failed: FileFailure[] = [];
  for (const loc of locations.dirs) {
    if (!locationExists(loc)) continue;
    for (const d of findDeadLetters(loc, filter, { onError: recorder(failed) })) {
      const error = d.error === null ? null : redact(d.error, locations.secrets);
      const state = d.replayedAt === null ? "dead" : d.replayedAsSeq === null ? "discarded" : "replayed";
      out.push({ app: loc.app, dbDir: loc.dbDir, dbFile: loc.dbFile, ...d, error, state });
    }
  }
  return { entries: out, failed };
}

/** A failure callback that logs the file's error (with a permission hint) and records it. */
export function recorder(failed: FileFailure[]): (file: string, err: Error) => void {
  return (file, err) => {
    const error = withAccessHint(err.message, file);
    failed.push({ file, error });
    log().error(error);
  };
}

export function failIf(failed: readonly FileFailure[], what: string): void {
  if (failed.length > 0) throw new StorageError(`dead-letter ${what} ${failed.length} file(s)`, failed[0]!.file);
}

/** Rows grouped by file and namespace, in order of first appearance. */
export function groupRows<T extends { file: string; namespace: string }>(
  rows: readonly T[],
): Array<{ file: string; namespace: string; rows: T[] }> {
  const groups = new Map<string, { file: string; namespace: string; rows: T[] }>();
  for (const row of rows) {
    const key = `${row.file}\u0000${row.namespace}`;
    let group = groups.get(key);
    if (!group) groups.set(key, (group = { file: row.file, namespace: row.namespace, rows: [] }));
    group.rows.push(row);
  }
  return [...groups.values()];
}

export const reasonArg = {
  reason: {
    type: "string",
    valueHint: "R",
    description: "Only this reason (max_attempts, undecodable, unsupported_statement, skipped: a head moved aside, …)",
  },
} as const;
export const sinceArg = {
  since: {
    type: "string",
    valueHint: "DUR|TIME",
    description:
      "Only letters dead within DUR (90s, 30m, 12h, 7d, 2w, 1h30m) or at/after an ISO-8601 TIME (UTC unless it has an offset)",
  },
} as const;
export const keyArg = {
  key: {
    type: "string",
    valueHint: "K",
    description: "Only letters pushed with this key (a lane's key, as status shows it)",
  },
} as const;
export const tenantArg = {
  tenant: {
    type: "string",
    valueHint: "T",
    description: "Only letters of this tenant (a tenant template's, SPEC §4c)",
  },
} as const;
export const dryRunArg = {
  "dry-run": { type: "boolean", description: "Print what would be done and change nothing (files are only read)" },
} as const;

export function filterOf(args: {
  namespace?: string;
  reason?: string;
  since?: string;
  key?: string;
  tenant?: string;
}): DeadLetterFilter {
  const filter: DeadLetterFilter = {};
  if (args.namespace !== undefined) filter.namespace = args.namespace;
  if (args.reason !== undefined) filter.reason = args.reason;
  if (args.tenant !== undefined) filter.tenant = tenantOf(args.tenant);
  if (args.key !== undefined) {
    if (args.key === "") throw new UsageError("--key needs a key (the text status shows)");
    filter.key = args.key;
  }
  if (args.since !== undefined) filter.since = parsePointInTime("--since", args.since);
  return filter;
}

/** `--tenant T` checked as a push checks it: a name no push accepts selects nothing, and is a typo. */
export function tenantOf(value: string): string {
  const problem = tenantNameProblem(value);
  if (problem !== null) throw new UsageError(`--tenant: ${problem}`);
  return value;
}
