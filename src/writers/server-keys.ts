import { maskUrl } from "../masking.ts";
import {
  checkAliases,
  checkBooleans,
  checkNumbers,
  COALESCE_KEY,
  type Connection,
  type Problem,
  stringKey,
} from "./connection.ts";
import type { ConnectionKey } from "./writer-spec.ts";

/** Default `connect_timeout` (seconds) of the `postgres` and `mysql` writers. */
export const DEFAULT_CONNECT_TIMEOUT_S = 10;
/** Default `batch_timeout` (seconds): a batch running longer is an outage and its connection is closed. */
export const DEFAULT_BATCH_TIMEOUT_S = 25;
/**
 * Default `max_connections`: the drain sends one statement or batch per target at a time, and one
 * connection prepares each merged INSERT text once — with two, the pool alternates and the server
 * parses every long multi-row text twice (docs/benchmarks.md).
 */
export const DEFAULT_MAX_CONNECTIONS = 1;

/** The `[connection]` keys of the `postgres` and `mysql` writers. */
export function serverKeys(defaultPort: number): ConnectionKey[] {
  return [
    {
      name: "url",
      secret: true,
      description: "connection URL (may embed the password); either url or host is required",
    },
    { name: "host", description: "server host name or IP (instead of url)" },
    { name: "port", description: `server port (default ${defaultPort})` },
    { name: "user", description: "user name (alias: username)" },
    { name: "username", description: "alias of user" },
    { name: "password", secret: true, description: "password" },
    { name: "database", description: "database name" },
    {
      name: "ssl",
      description: 'TLS: true/false or a mode ("disable", "prefer", "require", "verify-ca", "verify-full"); alias: tls',
    },
    { name: "tls", description: "alias of ssl" },
    { name: "connect_timeout", description: `seconds to wait for a connection (default ${DEFAULT_CONNECT_TIMEOUT_S})` },
    {
      name: "batch_timeout",
      description: `seconds one writeBatch may take before it is an outage (default ${DEFAULT_BATCH_TIMEOUT_S})`,
    },
    { name: "max_connections", description: `pool size (default ${DEFAULT_MAX_CONNECTIONS})` },
    {
      name: "prepare",
      description:
        "PostgreSQL: keep each statement text prepared on its connection (default true; false with trace_comments, whose every text is new). MySQL always prepares, at most 256 texts per connection",
    },
    {
      name: "pipeline",
      description:
        "queue a second batch behind the one on a busy connection, sent with its COMMIT (default true); false: one batch per connection at a time, e.g. behind a pooler that does not take pipelined transactions",
    },
    COALESCE_KEY,
  ];
}

const SSL_MODES = new Set(["disable", "allow", "prefer", "require", "verify-ca", "verify-full"]);

/** "url or host", URL scheme, number and TLS checks for a server writer's `[connection]` table. */
export function validateServer(connection: Connection, schemes: string[]): Problem[] {
  const problems: Problem[] = [
    ...checkAliases(connection, [
      ["user", "username"],
      ["ssl", "tls"],
    ]),
    ...checkNumbers(connection, ["port", "connect_timeout", "batch_timeout", "max_connections"], { port: "port" }),
    ...checkBooleans(connection, ["coalesce", "prepare", "pipeline"]),
  ];
  const url = stringKey(connection, "url");
  const host = stringKey(connection, "host");
  if (!url && !host) problems.push({ key: "url", message: "either url or host is required" });
  if (url && host) problems.push({ key: "host", message: "set either url or host, not both" });
  if (url) {
    let scheme: string | undefined;
    try {
      scheme = new URL(url).protocol.replace(/:$/, "");
    } catch {
      problems.push({ key: "url", message: `is not a valid URL (${maskUrl(url)})` });
    }
    if (scheme && !schemes.includes(scheme))
      problems.push({
        key: "url",
        message: `must start with ${schemes.map((s) => `${s}://`).join(" or ")}, got ${scheme}://`,
      });
  }
  const tls = connection.ssl ?? connection.tls;
  if (tls !== undefined && typeof tls !== "boolean" && !(typeof tls === "string" && SSL_MODES.has(tls))) {
    problems.push({
      key: connection.ssl !== undefined ? "ssl" : "tls",
      message: `must be true, false or one of ${[...SSL_MODES].join(", ")}`,
    });
  }
  return problems;
}

/**
 * Where a server target is, for logs, errors and `status`: the writer, then user, host, port and
 * database (`postgres app@db.example:5432/shop`), from `url` or the separate keys alike — never
 * its password or a URL parameter (`sslmode`, `password=`), which say nothing about where.
 */
export function describeServer(connection: Connection, writer: "postgres" | "mysql"): string {
  const port = writer === "postgres" ? 5432 : 3306;
  const url = stringKey(connection, "url");
  if (url) {
    let u: URL;
    try {
      u = new URL(url);
    } catch {
      return `${writer} (url is not a valid URL)`;
    }
    const database = decodeURIComponent(u.pathname.replace(/^\//, ""));
    return `${writer} ${where(decodeURIComponent(u.username), decodeURIComponent(u.hostname) || "localhost", u.port || String(port), database)}`;
  }
  return `${writer} ${where(stringKey(connection, "user", "username"), stringKey(connection, "host") ?? "localhost", stringKey(connection, "port") ?? String(port), stringKey(connection, "database") ?? "")}`;
}

/** `user@host:port/database`; without a user, `host:port/database`. */
function where(user: string | undefined, host: string, port: string, database: string): string {
  return `${user ? `${user}@` : ""}${host}:${port}/${database}`;
}
