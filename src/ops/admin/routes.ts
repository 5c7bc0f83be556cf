// The admin API, /api/v1: every request is routed, then let in or not (access.ts), then its input
// checked (requests.ts), then answered — JSON, masked, never cached. Actions are written down
// (audit.ts) whatever their outcome.
import { NotFoundError, OutboxError } from "../../errors.ts";
import type { Access, AdminTokens, Decision, Knock, Who } from "./access.ts";
import { decideAccess } from "./access.ts";
import type { AdminAction, AdminAudit } from "./audit.ts";
import type { DeadAction } from "../../outbox/dead-selection.ts";
import { actOnLetters, letterDetail, listLetters, type ActionReport } from "./dead-letters.ts";
import { appNamed, tableOf, type AdminApp } from "./locations.ts";
import {
  type LetterAction,
  onlyFields,
  parseLetterAction,
  parseListQuery,
  parseSeq,
  readJsonBody,
  RequestError,
} from "./requests.ts";
import { kickAll, retryTable, skipTableHead } from "./tables.ts";
import { retryTenant, tenantName } from "./tenants.ts";

/** What the API reads and acts through, handed in by runservice: the core never knows of it. */
export interface AdminSources {
  apps: readonly AdminApp[];
  tokens: AdminTokens;
  /** The `status --json` document, as `sqloutbox status` would print it now. */
  status(): unknown;
  /**
   * One tenant's rows and hold, as `sqloutbox status --tenant T --json` would print them now (a seek in each
   * tenant template's queue files).
   */
  tenant(tenant: string): unknown;
  /** Ends every target's backoff and timed table hold (the drain's retryNow; nothing while it starts). */
  retryNow(): void;
  audit: AdminAudit;
  /** Hides every credential in an answer's text. */
  mask(text: string): string;
  version: string;
}

type Handler = (req: Request, caller: { who: Who; access: Access }, params: string[]) => Promise<Response> | Response;
interface Route {
  method: "GET" | "POST";
  /** Path segments after /api/v1; `*` takes one segment as a parameter. */
  path: string[];
  needs: Access;
  handle: Handler;
}

const HEADERS = {
  "content-type": "application/json; charset=utf-8",
  "cache-control": "no-store",
  "x-content-type-options": "nosniff",
};

/** The API's request handler: a Response for every request under /api/ (404 for the rest of it). */
export function createAdminApi(sources: AdminSources): (req: Request, knock: Knock) => Promise<Response> {
  const json = (status: number, body: unknown, headers: Record<string, string> = {}) =>
    new Response(`${sources.mask(JSON.stringify(body, null, 2))}\n`, { status, headers: { ...HEADERS, ...headers } });
  const fail = (
    status: number,
    code: string,
    message: string,
    extra: Record<string, unknown> = {},
    headers: Record<string, string> = {},
  ) =>
    json(
      status,
      { error: { code, message }, ...extra },
      {
        ...(status === 401 ? { "www-authenticate": 'Bearer realm="sqloutbox"' } : {}),
        ...headers,
      },
    );

  const letterAction =
    (kind: DeadAction): Handler =>
    async (req, caller) => {
      const action = parseLetterAction(await readJsonBody(req));
      return answerAction(kind, caller.who, action, actOnLetters(kind, sources.apps, action));
    };

  const answerAction = (kind: DeadAction, who: Who, action: LetterAction, report: ActionReport) => {
    const what =
      action.selection.kind === "ids"
        ? `${action.selection.ids.length} id(s)`
        : `filter ${JSON.stringify({ ...(action.selection.filter.app ? { app: action.selection.filter.app } : {}), ...action.selection.filter.filter })}, expect ${action.selection.expect}`;
    const outcome = report.refused ? "refused" : action.dryRun ? "dry_run" : "done";
    sources.audit.action({
      action: kind,
      who,
      outcome,
      rows: report.done.length,
      what: `${what}${action.force ? " (forced)" : ""}: ${report.total} selected, ${report.done.length} ${outcome === "dry_run" ? "would be " : ""}${kind === "replay" ? "replayed" : "discarded"}${report.refused_letters.length > 0 ? `, ${report.refused_letters.length} refused (in doubt or applied)` : ""}${report.refused ? ` — refused: ${report.refused.message}` : ""}`,
    });
    return report.refused ? fail(409, report.refused.code, report.refused.message, { report }) : json(200, report);
  };

  const tableAction =
    (
      action: AdminAction,
      run: (req: Request, app: string, namespace: string) => Promise<{ rows: number; what: string; body: unknown }>,
    ): Handler =>
    async (req, caller, [app, namespace]) => {
      try {
        const done = await run(req, app!, namespace!);
        sources.audit.action({ action, who: caller.who, outcome: "done", rows: done.rows, what: done.what });
        return json(200, done.body);
      } catch (error) {
        if (!(error instanceof RequestError && error.status < 409))
          sources.audit.action({
            action,
            who: caller.who,
            outcome: error instanceof RequestError && error.status === 409 ? "refused" : "failed",
            rows: 0,
            what: `${app}/${namespace}: ${(error as Error).message}`,
          });
        throw error;
      }
    };

  const routes: Route[] = [
    {
      method: "GET",
      path: ["access"],
      needs: "read",
      handle: (_req, caller) =>
        json(200, {
          who: caller.who,
          access: caller.access,
          can_act: caller.access === "write",
          write_configured: sources.tokens.writeToken !== null,
          version: sources.version,
        }),
    },
    { method: "GET", path: ["status"], needs: "read", handle: () => json(200, sources.status()) },
    {
      method: "GET",
      path: ["dead-letters"],
      needs: "read",
      handle: (req) => json(200, listLetters(sources.apps, parseListQuery(new URL(req.url).searchParams))),
    },
    {
      method: "GET",
      path: ["dead-letters", "*", "*", "*"],
      needs: "read",
      handle: (req, _caller, [app, namespace, seq]) => {
        if (new URL(req.url).search !== "") throw new RequestError(400, "E_USAGE", "this path takes no query");
        return json(200, letterDetail(sources.apps, { app: app!, namespace: namespace!, seq: parseSeq(seq, "seq") }));
      },
    },
    { method: "POST", path: ["dead-letters", "replay"], needs: "write", handle: letterAction("replay") },
    { method: "POST", path: ["dead-letters", "discard"], needs: "write", handle: letterAction("discard") },
    // The name of earlier versions (v1 keeps it): letters given up are "discarded"; skip moves a queue head aside.
    { method: "POST", path: ["dead-letters", "skip"], needs: "write", handle: letterAction("discard") },
    {
      method: "POST",
      path: ["tables", "*", "*", "retry"],
      needs: "write",
      handle: tableAction("retry", async (req, app, namespace) => {
        const body = await readJsonBody(req, { optional: true });
        onlyFields(body, ["key"], "the body");
        const key = body.key;
        if (key !== undefined && typeof key !== "string" && !Number.isSafeInteger(key))
          throw new RequestError(400, "E_USAGE", "key: expected the key of a lane's head (a string or a safe integer)");
        const table = tableOf(appNamed(sources.apps, app), namespace);
        const head = retryTable(table, key as string | number | undefined);
        // The drain reads its held lanes again at once: the head may go at its next look.
        if (head !== null) sources.retryNow();
        return {
          rows: head === null ? 0 : 1,
          what:
            head === null
              ? `${app}/${namespace}: no head was backing off`
              : `${app}/${namespace} head seq ${head.seq} (${head.attempts} attempt(s))`,
          body: { action: "retry", app, namespace, head },
        };
      }),
    },
    {
      method: "POST",
      path: ["tables", "*", "*", "skip"],
      needs: "write",
      handle: tableAction("skip_head", async (req, app, namespace) => {
        const body = await readJsonBody(req);
        onlyFields(body, ["seq"], "the body");
        if (body.seq === undefined)
          throw new RequestError(400, "E_USAGE", 'seq: required, the head you saw ({"seq": 17})');
        const seq = parseSeq(body.seq, "seq");
        const moved = skipTableHead(tableOf(appNamed(sources.apps, app), namespace), seq);
        return {
          rows: moved.moved.length,
          what: `${app}/${namespace} head seq ${seq}: ${moved.moved.length} row(s) moved to the dead letters${moved.also_in.length ? `, also in ${moved.also_in.join(", ")}` : ""}`,
          body: { action: "skip", app, namespace, seq, ...moved },
        };
      }),
    },
    {
      method: "GET",
      path: ["tenants", "*"],
      needs: "read",
      handle: (req, _caller, [tenant]) => {
        if (new URL(req.url).search !== "") throw new RequestError(400, "E_USAGE", "this path takes no query");
        return json(200, sources.tenant(tenantName(tenant!)));
      },
    },
    {
      method: "POST",
      path: ["tenants", "*", "retry"],
      needs: "write",
      handle: async (req, caller, [given]) => {
        const tenant = tenantName(given!);
        onlyFields(await readJsonBody(req, { optional: true }), [], "the body");
        const done = retryTenant(sources.apps, tenant);
        // Its held database is tried again at once, with every other held tenant: the drain's holds end together.
        sources.retryNow();
        sources.audit.action({
          action: "retry",
          who: caller.who,
          outcome: "done",
          rows: done.heads.length,
          what: `tenant ${tenant}: ${done.heads.length} row(s) retried, every held tenant's hold ended`,
        });
        return json(200, { action: "retry", tenant, ...done });
      },
    },
    {
      method: "POST",
      path: ["kick"],
      needs: "write",
      handle: tableAction("kick", async (req) => {
        onlyFields(await readJsonBody(req, { optional: true }), [], "the body");
        const done = kickAll(sources.apps, sources.retryNow);
        return {
          rows: done.heads.length,
          what: `${done.heads.length} head(s) retried, every target's backoff and timed hold ended`,
          body: { action: "kick", ...done },
        };
      }),
    },
  ];

  return async (req, knock) => {
    const url = new URL(req.url);
    let segments: string[];
    try {
      segments = url.pathname.split("/").slice(1).map(decodeURIComponent);
    } catch {
      return fail(400, "E_USAGE", "the path is not valid percent-encoding");
    }
    if (segments[0] !== "api" || segments[1] !== "v1")
      return fail(404, "E_NOT_FOUND", "not found: the API is under /api/v1");
    const rest = segments.slice(2);
    const matches = routes.filter(
      (r) => r.path.length === rest.length && r.path.every((p, i) => p === "*" || p === rest[i]),
    );
    // A fixed segment beats a parameter: POST /dead-letters/replay is not a letter's path.
    const route = matches.find((r) => r.method === req.method) ?? null;
    if (route === null) {
      if (matches.length === 0)
        return fail(404, "E_NOT_FOUND", `no such endpoint: ${url.pathname} (see docs/admin.md)`);
      const allow = [...new Set(matches.map((r) => r.method))].join(", ");
      return fail(405, "E_USAGE", `method ${req.method} not allowed here: use ${allow}`, {}, { allow });
    }
    const decision: Decision = decideAccess(sources.tokens, knock, route.needs);
    if (decision.kind !== "allowed") {
      const status = decision.kind === "unauthorized" ? 401 : 403;
      sources.audit.denied(status);
      return fail(status, decision.kind === "unauthorized" ? "E_UNAUTHORIZED" : "E_FORBIDDEN", decision.why);
    }
    const params = route.path.flatMap((p, i) => (p === "*" ? [rest[i]!] : []));
    try {
      return await route.handle(req, decision, params);
    } catch (error) {
      if (error instanceof RequestError) return fail(error.status, error.code, error.message);
      if (error instanceof NotFoundError) return fail(404, error.code, error.message);
      if (error instanceof OutboxError && error.code === "E_STORAGE") return fail(503, error.code, error.message);
      if (error instanceof OutboxError) return fail(409, error.code, error.message);
      return fail(500, "E_OUTBOX", `internal error: ${(error as Error).message}`);
    }
  };
}
