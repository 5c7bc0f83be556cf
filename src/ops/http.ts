import type { ListenAddress } from "../config/listen-address.ts";
import type { OutboxSyncService } from "../drain/service.ts";
import type { TargetRunner } from "../drain/target.ts";
import type { DrainMetrics } from "./metrics.ts";

/** The running endpoints: `/metrics`, `/healthz`, `/readyz`. */
export interface OpsServer {
  readonly url: string;
  readonly port: number;
  stop(): Promise<void>;
}

/**
 * Serves the drain's operations endpoints on `address` (port 0 picks a free one):
 * - `/metrics`: Prometheus text (see metrics.ts);
 * - `/healthz`: 200 while every target's loop is alive or still starting (TargetRunner.liveness); else 503;
 * - `/readyz`: 200 when every target is reachable and set up (TargetRunner.readiness), else 503.
 * Health answers are short JSON bodies saying why, per target, passed through `mask` (credentials).
 */
export function serveOps(
  address: ListenAddress,
  service: () => OutboxSyncService | null,
  metrics: DrainMetrics,
  mask: (text: string) => string = (t) => t,
): OpsServer {
  const json = (status: number, body: unknown) =>
    new Response(`${mask(JSON.stringify(body))}\n`, { status, headers: { "content-type": "application/json" } });
  const health = (judge: (r: TargetRunner) => { ok: boolean; why?: string }, whileStarting: number) => {
    const svc = service();
    const runners = svc?.targets() ?? [];
    if (runners.length === 0) return json(whileStarting, { status: "starting", targets: {} });
    const targets = Object.fromEntries(runners.map((r) => [r.name, judge(r)]));
    const ok = Object.values(targets).every((t) => t.ok);
    return json(ok ? 200 : 503, { status: ok ? "ok" : "failing", targets });
  };
  const server = Bun.serve({
    hostname: address.hostname,
    port: address.port,
    async fetch(req) {
      const path = new URL(req.url).pathname;
      // A 405 must say what is allowed (RFC 9110 §15.5.6).
      if (req.method !== "GET" && req.method !== "HEAD")
        return new Response("method not allowed: use GET or HEAD\n", { status: 405, headers: { allow: "GET, HEAD" } });
      switch (path) {
        case "/metrics":
          return new Response(await metrics.text(), { headers: { "content-type": metrics.contentType } });
        case "/healthz":
          return health((r) => r.liveness(), 200);
        case "/readyz":
          return health((r) => r.readiness(), 503);
        default:
          return new Response("not found: try /metrics, /healthz or /readyz\n", { status: 404 });
      }
    },
  });
  return {
    url: `http://${address.hostname.includes(":") ? `[${address.hostname}]` : address.hostname}:${server.port}`,
    port: server.port ?? address.port,
    stop: async () => {
      await server.stop(true);
    },
  };
}
