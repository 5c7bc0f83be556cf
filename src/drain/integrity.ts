import { verifyFile, type FileVerification } from "../outbox/inspect.ts";
import { describeError } from "../errors.ts";

/** The outcome of an integrity scan: one verify result per file plus printable lines. */
export interface IntegrityReport {
  ok: boolean;
  files: FileVerification[];
  /** One human line per namespace (and per unreadable file). */
  lines: string[];
}

/** Verifies each file read-only (chain links, schema); an unreadable file is a problem, not a crash. */
export function scanIntegrity(paths: readonly string[]): IntegrityReport {
  const report: IntegrityReport = { ok: true, files: [], lines: [] };
  for (const file of new Set(paths)) {
    try {
      const result = verifyFile(file);
      report.files.push(result);
      if (!result.ok) report.ok = false;
      for (const ns of result.namespaces) {
        const issues = [...ns.gaps.map((g) => `seq ${g.seq} links to missing prev_seq ${g.prevSeq}`), ...ns.problems];
        report.lines.push(`${file} [${ns.namespace}]: ${ns.rows} pending, ${issues.length === 0 ? "ok" : issues.join("; ")}`);
      }
    } catch (error) {
      report.ok = false;
      report.lines.push(`${file}: cannot verify: ${describeError(error).message}`);
    }
  }
  return report;
}
