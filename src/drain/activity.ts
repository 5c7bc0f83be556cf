import type { Logger } from "../logger.ts";
import type { OutboxSyncService, TargetActivity } from "./service.ts";

/**
 * Logs one line every `intervalMs` saying what the drain did since the previous line: rows
 * delivered (per target), failed and dead-lettered, rows pending, and targets that are down — so
 * an operator reading the journal can tell a healthy idle drain from a stuck one. Returns a stop
 * function. The timer never keeps the process alive.
 */
export function logActivity(service: OutboxSyncService, logger: Logger, intervalMs: number): () => void {
  let last = new Map(service.activity().map((a) => [a.target, a]));
  const timer = setInterval(() => {
    try {
      const now = service.activity();
      const delta = now.map((a) => minus(a, last.get(a.target)));
      last = new Map(now.map((a) => [a.target, a]));
      logger.info(describe(delta, service.totalPending(), intervalMs));
    } catch (error) {
      logger.warn(`drain: activity summary failed: ${(error as Error).message}`);
    }
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}

function minus(a: TargetActivity, before: TargetActivity | undefined): TargetActivity {
  if (!before) return a;
  return { ...a, delivered: a.delivered - before.delivered, failed: a.failed - before.failed, deadLettered: a.deadLettered - before.deadLettered };
}

/** `drain: last 60 s: delivered 1200 (app.pg 1000, app.local 200), 1 failed, 0 dead-lettered; 35 pending; down: app.pg` */
function describe(delta: TargetActivity[], pending: number, intervalMs: number): string {
  const sum = (k: "delivered" | "failed" | "deadLettered") => delta.reduce((n, a) => n + a[k], 0);
  const per = delta.length > 1 ? ` (${delta.map((a) => `${a.target} ${a.delivered}`).join(", ")})` : "";
  const down = delta.filter((a) => a.down).map((a) => a.target);
  return (
    `drain: last ${intervalMs >= 1000 ? `${Math.round(intervalMs / 1000)} s` : `${intervalMs} ms`}: delivered ${sum("delivered")}${per}, ${sum("failed")} failed, ` +
    `${sum("deadLettered")} dead-lettered; ${pending} pending${down.length ? `; down: ${down.join(", ")}` : ""}`
  );
}
