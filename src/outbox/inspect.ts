import type { Database } from "bun:sqlite";
import { fileFeatures, fileNamespaces, isBlank, type FileFeatures } from "./health.ts";
import type { ChainGap } from "./rows.ts";
import { markedKey } from "./layout-lean.ts";
import { checkOwnFile, pendingCountSql, tableColumns } from "./schema.ts";
import { readSnapshot, storageError } from "./sqlite-open.ts";

/** The chain check of one namespace: `gaps` are links to rows that exist nowhere. */
export interface NamespaceVerification {
  namespace: string;
  /** Pending rows scanned. */
  rows: number;
  gaps: ChainGap[];
  problems: string[];
}

/** The result of verifying one file; `problems` are file-level (unreadable, not an outbox, corrupt). */
export interface FileVerification {
  file: string;
  namespaces: NamespaceVerification[];
  problems: string[];
  ok: boolean;
}

/**
 * Offline integrity scan of one file, read-only (never creates or changes anything): SQLite's quick_check,
 * then per namespace a full walk of the chain, bridged through the delivered and dead logs, and an audit of
 * the delivered ranges. Reports gaps, forward or cross-namespace links, a chain that restarts behind the
 * head, leftover `synced=1` rows (the reference's interrupted confirm) and a pending count (by ord or by
 * counter) that drifted from the rows. An unreadable or garbage file is reported as a problem, not thrown.
 */
export function verifyFile(path: string): FileVerification {
  try {
    return readSnapshot(path, (db) => verifyOpen(db, path));
  } catch (e) {
    return { file: path, namespaces: [], problems: [storageError(e, "cannot verify", path).message], ok: false };
  }
}

function verifyOpen(db: Database, path: string): FileVerification {
  const problems: string[] = [];
  const check = db
    .query<{ quick_check: string }, []>("PRAGMA quick_check")
    .all()
    .map((r) => r.quick_check);
  if (check.length !== 1 || check[0] !== "ok") problems.push(`SQLite quick_check: ${check.slice(0, 5).join("; ")}`);
  if (isBlank(db)) {
    // Our producers and drain create a file and its schema in one go: an empty one is an anomaly
    // (a crash between the two, a `touch`), not a healthy empty queue.
    problems.push(
      "empty file (no outbox schema): created but never initialised; the next producer or drain to open it initialises it",
    );
    return { file: path, namespaces: [], problems, ok: false };
  }
  try {
    checkOwnFile(db, path); // a newer format, another application's database
  } catch (e) {
    problems.push(storageError(e, "cannot verify", path).message.replace(`${path}: `, ""));
    return { file: path, namespaces: [], problems, ok: false };
  }
  if (!tableColumns(db, "outbox_queue").includes("prev_seq")) {
    problems.push("not an outbox file: no outbox_queue table");
    return { file: path, namespaces: [], problems, ok: false };
  }
  const features = fileFeatures(db);
  const namespaces = fileNamespaces(db, features).map((ns) => verifyNamespace(db, ns, features));
  const ok = problems.length === 0 && namespaces.every((n) => n.gaps.length === 0 && n.problems.length === 0);
  return { file: path, namespaces, problems, ok };
}

function verifyNamespace(db: Database, namespace: string, features: FileFeatures): NamespaceVerification {
  const gaps: ChainGap[] = [];
  const problems: string[] = [];
  // Streamed, not loaded: a namespace millions of rows deep is walked in constant memory.
  const rows = db
    .query<{ seq: number; prev: number | null; synced: number }, [string]>(
      "SELECT seq, prev_seq AS prev, synced FROM outbox_queue WHERE namespace = ? ORDER BY seq",
    )
    .iterate(namespace);
  const owner = lookupOwner(db, features);
  let leftovers = 0;
  let pending = 0;
  let firstPending = true;
  let before: number | null = null; // the previous row of this namespace: the common link, no lookup needed
  for (const { seq, prev, synced } of rows) {
    if (synced !== 0) leftovers++;
    else pending++;
    if (prev === null) {
      if (synced === 0 && !firstPending)
        problems.push(`chain restarts at seq ${seq}: a pending row behind the head has no prev_seq`);
    } else if (prev >= seq) {
      problems.push(`seq ${seq} links forward to prev_seq ${prev}`);
    } else {
      const ns = prev === before ? namespace : owner(prev, namespace);
      if (ns === null) gaps.push({ seq, prevSeq: prev });
      else if (ns !== namespace) problems.push(`seq ${seq} links to seq ${prev} of namespace "${ns}"`);
    }
    if (synced === 0) firstPending = false;
    before = seq;
  }
  // Enqueue links under the write lock, so two rows linking to one predecessor means a damaged file.
  const shared = db
    .query<{ prev: number; seqs: string }, [string]>(
      "SELECT prev_seq AS prev, group_concat(seq, ' and seq ') AS seqs FROM outbox_queue WHERE namespace = ? AND prev_seq IS NOT NULL GROUP BY prev_seq HAVING count(*) > 1",
    )
    .all(namespace);
  for (const { prev, seqs } of shared) problems.push(`seq ${seqs} both link to prev_seq ${prev}`);
  // Rows at synced = 1 that a tenant template marked applied (counted) await the prefix they end up in.
  const marked = tableColumns(db, "outbox_meta").includes("value")
    ? Number(
        db.query<{ n: string }, [string]>("SELECT value AS n FROM outbox_meta WHERE key = ?").get(markedKey(namespace))
          ?.n ?? 0,
      )
    : 0;
  leftovers -= Math.min(leftovers, marked);
  if (leftovers > 0) {
    problems.push(
      `${leftovers} row(s) marked synced=1 but never deleted (an interrupted reference confirm; opening the outbox for writing finishes it)`,
    );
  }
  if (features.deliveredLog) problems.push(...features.deliveredLog.audit(db, namespace));
  if (features.pendingCount !== "scan") {
    const counted = db
      .query<{ pending: number }, [string]>(pendingCountSql(features.pendingCount))
      .get(namespace)!.pending;
    if (counted !== pending)
      problems.push(`pending count (by ${features.pendingCount}) says ${counted} but ${pending} row(s) are pending`);
  }
  return { namespace, rows: pending, gaps, problems };
}

/**
 * Which namespace a link from `namespace` to `seq` reaches: the row's namespace in the queue or the
 * dead log, else `namespace` when its delivered log holds the seq, else another namespace whose
 * delivered ranges cover it (ranges of a file's namespaces interleave: the nearest such is named);
 * null if nowhere.
 */
function lookupOwner(db: Database, features: FileFeatures): (seq: number, namespace: string) => string | null {
  const sources = ["outbox_queue"];
  if (features.deadLog) sources.push("outbox_dead_log");
  const exact = db.query<{ namespace: string }, [number]>(
    `${sources.map((t) => `SELECT namespace FROM ${t} WHERE seq = ?1`).join(" UNION ALL ")} LIMIT 1`,
  );
  const log = features.deliveredLog;
  if (log === null) return (seq) => exact.get(seq)?.namespace ?? null;
  const ours = db.query<{ found: number }, [number, string]>(`SELECT ${log.contains} AS found`);
  const logged = db.query<{ namespace: string }, [number]>(log.ownerOf);
  return (seq, namespace) =>
    exact.get(seq)?.namespace ??
    (ours.get(seq, namespace)!.found === 1 ? namespace : (logged.get(seq)?.namespace ?? null));
}

/** The outcome of an integrity scan: one verify result per file plus printable lines. */
export interface IntegrityReport {
  ok: boolean;
  files: FileVerification[];
  /** One human line per file-level problem (unreadable, not an outbox, corrupt) and per namespace. */
  lines: string[];
}

/** Verifies each file read-only (chain links, schema); an unreadable file is a problem, not a crash. */
export function scanIntegrity(paths: readonly string[]): IntegrityReport {
  const report: IntegrityReport = { ok: true, files: [], lines: [] };
  for (const file of new Set(paths)) {
    const result = verifyFile(file); // never throws: what stops it is in `problems`
    report.files.push(result);
    if (!result.ok) report.ok = false;
    // A storage error's message names the file: the line already starts with it.
    for (const problem of result.problems) report.lines.push(`${file}: ${problem.replace(`${file}: `, "")}`);
    for (const ns of result.namespaces) {
      const issues = [...ns.gaps.map((g) => `seq ${g.seq} links to missing prev_seq ${g.prevSeq}`), ...ns.problems];
      report.lines.push(
        `${file} [${ns.namespace}]: ${ns.rows} pending, ${issues.length === 0 ? "ok" : issues.join("; ")}`,
      );
    }
  }
  return report;
}
