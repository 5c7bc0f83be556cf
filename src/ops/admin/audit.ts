import client from "prom-client";
import type { Logger } from "../../logger.ts";
import type { Who } from "./access.ts";

/** The admin API's actions, as its log and metrics name them. */
export type AdminAction = "replay" | "discard" | "retry" | "skip_head" | "kick";
/** How an action ended: done, only a dry run, refused (409: the selection or head changed), failed (an error). */
export type AdminOutcome = "done" | "dry_run" | "refused" | "failed";

/** Where every admin action is written down: one log line (who, what, how many) and the counters. */
export interface AdminAudit {
  action(entry: { action: AdminAction; who: Who; outcome: AdminOutcome; rows: number; what: string }): void;
  denied(status: 401 | 403): void;
}

/**
 * The admin API's audit: each action logged at info (warn when refused or failed) with fields
 * `admin_action`, `who`, `outcome`, `rows`, and counted in `sqloutbox_admin_actions_total{action,
 * outcome}` and `sqloutbox_admin_rows_total{action}`; refused credentials in
 * `sqloutbox_admin_denied_total{status}`. The labels are fixed words: their series are bounded.
 * `registry`: the drain's metrics registry (its /metrics), when it serves one.
 */
export function createAdminAudit(logger: Logger, registry?: client.Registry): AdminAudit {
  const registers = registry ? [registry] : [];
  const actions = new client.Counter({
    name: "sqloutbox_admin_actions_total",
    help: "Actions through the admin API, by action (replay, discard, retry, skip_head, kick) and outcome (done, dry_run, refused, failed).",
    labelNames: ["action", "outcome"],
    registers,
  });
  const rows = new client.Counter({
    name: "sqloutbox_admin_rows_total",
    help: "Rows the admin API's actions changed: dead letters replayed or discarded (their groups included), heads retried or skipped.",
    labelNames: ["action"],
    registers,
  });
  const denied = new client.Counter({
    name: "sqloutbox_admin_denied_total",
    help: "Admin API requests refused for their credentials: 401 (no token, a wrong token) or 403 (the read token on an action, or no write_token configured).",
    labelNames: ["status"],
    registers,
  });
  return {
    action({ action, who, outcome, rows: count, what }) {
      actions.inc({ action, outcome });
      if (outcome === "done" && count > 0) rows.inc({ action }, count);
      const level = outcome === "refused" || outcome === "failed" ? "warn" : "info";
      logger[level](`admin: ${action.replace("_", " ")} by ${who}: ${what}`, {
        admin_action: action,
        who,
        outcome,
        rows: count,
      });
    },
    denied(status) {
      denied.inc({ status: String(status) });
    },
  };
}
