import type client from "prom-client";
import { adminAccessProblem } from "../../config/admin.ts";
import type { ListenAddress } from "../../config/listen-address.ts";
import { ConfigError } from "../../errors.ts";
import type { Logger } from "../../logger.ts";
import { isLoopbackHostHeader, type AdminTokens } from "./access.ts";
import { createAdminAudit } from "./audit.ts";
import type { AdminApp } from "./locations.ts";
import page from "./page/console.html";
import { MAX_BODY_BYTES } from "./requests.ts";
import { createAdminApi } from "./routes.ts";
import { isLoopbackHost } from "../../config/admin.ts";

/** The running admin listener. */
export interface AdminServer {
  readonly url: string;
  readonly port: number;
  stop(): Promise<void>;
}

/** What `serveAdmin` serves and from where. */
export interface AdminServerOptions {
  address: ListenAddress;
  tokens: AdminTokens;
  apps: readonly AdminApp[];
  /** The `status --json` document, now. */
  status(): unknown;
  /** The `status --tenant T --json` document of `tenant` (a checked name), now. */
  tenant(tenant: string): unknown;
  /** The drain's retryNow (kick); a no-op while it starts. */
  retryNow(): void;
  logger: Logger;
  /** Hides credentials in every answer. */
  mask(text: string): string;
  version: string;
  /** The drain's metrics registry: the admin counters join /metrics. */
  registry?: client.Registry;
  /** The config file, for the startup refusal's message. */
  configFile?: string;
}

/**
 * Serves the admin API under /api/v1 and the console page at / on `address` (port 0 picks a free
 * one). Refuses to start (ConfigError naming admin.read_token) on an address other hosts can reach
 * without a read token. The page and its scripts are static and carry no data; every /api/ request
 * is let in by its bearer token, or as a tokenless read from loopback when no read token is set.
 */
export function serveAdmin(options: AdminServerOptions): AdminServer {
  const problem = adminAccessProblem(options.address, options.tokens.readToken);
  if (problem !== null) throw new ConfigError(problem, { file: options.configFile, keyPath: "admin.read_token" });
  const api = createAdminApi({
    apps: options.apps,
    tokens: options.tokens,
    status: options.status,
    tenant: options.tenant,
    retryNow: options.retryNow,
    audit: createAdminAudit(options.logger, options.registry),
    mask: options.mask,
    version: options.version,
  });
  const server = Bun.serve({
    hostname: options.address.hostname,
    port: options.address.port,
    // Bun's own bound; readJsonBody refuses anything over MAX_BODY_BYTES with a JSON 413 first.
    maxRequestBodySize: 4 * MAX_BODY_BYTES,
    development: false,
    routes: { "/": page },
    fetch(req, srv) {
      const path = new URL(req.url).pathname;
      if (path === "/api" || path.startsWith("/api/")) {
        const peer = srv.requestIP(req)?.address ?? "";
        return api(req, {
          authorization: req.headers.get("authorization"),
          loopbackPeer: isLoopbackHost(peer),
          loopbackHost: isLoopbackHostHeader(req.headers.get("host")),
        });
      }
      return new Response("not found: the console is at /, the API under /api/v1\n", {
        status: 404,
        headers: { "content-type": "text/plain; charset=utf-8" },
      });
    },
    error(error) {
      options.logger.error(`admin: ${options.mask(error.message)}`);
      return new Response('{"error":{"code":"E_OUTBOX","message":"internal error"}}\n', {
        status: 500,
        headers: { "content-type": "application/json" },
      });
    },
  });
  const host = options.address.hostname.includes(":") ? `[${options.address.hostname}]` : options.address.hostname;
  return {
    url: `http://${host}:${server.port}`,
    port: server.port ?? options.address.port,
    stop: async () => {
      await server.stop(true);
    },
  };
}
