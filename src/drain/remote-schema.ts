import type { SchemaStep } from "../sql/probe.ts";
import type { BoundedWriter } from "./bounded-writer.ts";

/** What ensuring one schema step did: nothing to do, created it, or the remote's refusal. */
export type StepOutcome = { done: "already" | "applied" } | { error: string };

/**
 * Probes `step` and runs its DDL only when the probe finds it missing: a target that has
 * everything takes no lock at all. A DDL that fails while the probe then finds the step present
 * was raced by another drain (or a DBA) creating the same thing: that is "already". `apply: false`
 * only asks. An outage throws.
 */
export async function ensureStep(
  writer: BoundedWriter,
  step: SchemaStep,
  namespace: string,
  apply = true,
): Promise<StepOutcome> {
  const present = async () => {
    const probe = await writer.control(step.probe.sql, namespace, step.probe.args);
    return probe.ok && (step.probe.present === "ok" || (probe.rows?.length ?? 0) > 0);
  };
  if (await present()) return { done: "already" };
  if (!apply) return { error: `${step.what} is missing` };
  const result = await writer.control(step.ddl, namespace);
  if (result.ok) return { done: "applied" };
  // PostgreSQL's CREATE … IF NOT EXISTS is not atomic: of several targets on one database starting
  // at once, all but the first fail with 23505 (pg_type_typname_nsp_index) or 42710 once the first
  // commits — the object is there, and holding the target for it cost a 2 s retry and an error line.
  return (await present()) ? { done: "already" } : { error: result.error };
}
