import type { SchemaStep } from "../sql/probe.ts";
import type { BoundedWriter } from "./bounded-writer.ts";

/** What ensuring one schema step did: nothing to do, created it, or the remote's refusal. */
export type StepOutcome = { done: "already" | "applied" } | { error: string };

/**
 * Probes `step` and runs its DDL only when the probe finds it missing: a target that has
 * everything takes no lock at all. `apply: false` only asks. An outage throws.
 */
export async function ensureStep(
  writer: BoundedWriter,
  step: SchemaStep,
  namespace: string,
  apply = true,
): Promise<StepOutcome> {
  const probe = await writer.control(step.probe.sql, namespace, step.probe.args);
  if (probe.ok && (step.probe.present === "ok" || (probe.rows?.length ?? 0) > 0)) return { done: "already" };
  if (!apply) return { error: `${step.what} is missing` };
  const result = await writer.control(step.ddl, namespace);
  return result.ok ? { done: "applied" } : { error: result.error };
}
