import { createHash, timingSafeEqual } from "node:crypto";
import { isLoopbackHost } from "../../config/admin.ts";

/** What a caller may do: read (status, dead letters) or also act (replay, skip, retry, kick). */
export type Access = "read" | "write";

/** The admin API's tokens; null: not configured. */
export interface AdminTokens {
  readToken: string | null;
  writeToken: string | null;
}

/** What one request brings to the door. */
export interface Knock {
  /** The Authorization header, if any. */
  authorization: string | null;
  /** The peer's address is this host's loopback. */
  loopbackPeer: boolean;
  /**
   * The Host header names a loopback address (a page of another site reached through DNS rebinding names its
   * own host).
   */
  loopbackHost: boolean;
}

/** Who a caller is, for the log: the token it presented, or "loopback" for a tokenless read. */
export type Who = "write token" | "read token" | "loopback";

/** The door's answer: the caller and what it may do, or why not (401: who are you; 403: not you). */
export type Decision =
  | { kind: "allowed"; who: Who; access: Access }
  | { kind: "unauthorized"; why: string }
  | { kind: "forbidden"; why: string };

/**
 * Decides a request (pure): a bearer token is compared with both tokens in constant time; without
 * one, a caller may read only when no read token is set and it came from loopback, naming a
 * loopback host; every action needs the write token, on loopback too.
 */
export function decideAccess(tokens: AdminTokens, knock: Knock, needs: Access): Decision {
  const presented = bearerOf(knock.authorization);
  if (presented === "malformed")
    return { kind: "unauthorized", why: "expected the header Authorization: Bearer <token>" };
  let caller: { who: Who; access: Access } | null = null;
  if (presented !== null) {
    // Both compared, whatever the first gave: the time taken must not tell which token was close.
    const isWrite = sameSecret(presented, tokens.writeToken);
    const isRead = sameSecret(presented, tokens.readToken);
    if (isWrite) caller = { who: "write token", access: "write" };
    else if (isRead) caller = { who: "read token", access: "read" };
    else return { kind: "unauthorized", why: "the bearer token is not one of this drain's tokens" };
  } else if (tokens.readToken === null && knock.loopbackPeer && knock.loopbackHost) {
    caller = { who: "loopback", access: "read" };
  } else {
    return {
      kind: "unauthorized",
      why:
        tokens.readToken === null
          ? "reading without a token is for loopback only: send Authorization: Bearer <token>"
          : "this admin API needs Authorization: Bearer <token>",
    };
  }
  if (needs === "read" || caller.access === "write") return { kind: "allowed", ...caller };
  if (tokens.writeToken === null)
    return { kind: "forbidden", why: "no write_token is configured: this admin API is read-only" };
  if (caller.who === "loopback")
    return { kind: "unauthorized", why: "every action needs the write token: send Authorization: Bearer <token>" };
  return { kind: "forbidden", why: "the read token may not act: actions need the write token" };
}

/** The token of `Bearer <token>`; null without a header; "malformed" for another scheme or shape. */
function bearerOf(header: string | null): string | null | "malformed" {
  if (header === null) return null;
  const m = /^Bearer +([!-~]+) *$/i.exec(header);
  return m ? m[1]! : "malformed";
}

/**
 * Whether `presented` is `secret`, in time that depends on neither: both are hashed to equal-length
 * digests first (timingSafeEqual needs equal lengths, and comparing lengths would leak one).
 */
function sameSecret(presented: string, secret: string | null): boolean {
  const a = createHash("sha256").update(presented).digest();
  const b = createHash("sha256")
    .update(secret ?? "")
    .digest();
  return timingSafeEqual(a, b) && secret !== null;
}

/** Whether a Host header (`127.0.0.1:9465`, `[::1]:9465`, `localhost:9465`) names a loopback address. */
export function isLoopbackHostHeader(host: string | null): boolean {
  if (host === null) return false;
  const name = host.startsWith("[") ? host.slice(0, host.indexOf("]") + 1) : host.replace(/:\d+$/, "");
  return isLoopbackHost(name);
}
