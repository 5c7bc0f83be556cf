import { readKeys } from "./declaration.ts";
import { ADMIN_KEYS } from "./keys.ts";
import { parseListenAddress, type ListenAddress } from "./listen-address.ts";
import { isTable, join, typeName, type Reader, type Table } from "./reader.ts";
import type { AdminConfig } from "./types.ts";

/**
 * Reads `[admin]` (the admin API and the console, docs/admin.md): where it listens, or null for
 * off, and its tokens, which are secrets (masked wherever the config's secrets are). A listener
 * other processes' users can reach needs `read_token` (see adminAccessProblem); the two tokens
 * must differ, or the read token could act.
 */
export function readAdmin(r: Reader, doc: Table): AdminConfig {
  const path = "admin";
  const raw = r.raw(doc, path);
  if (raw !== undefined && !isTable(raw)) r.fail(path, `expected a table ([admin]), got ${typeName(raw)}`);
  const table: Table = isTable(raw) ? raw : {};
  r.checkKeys(table, Object.keys(ADMIN_KEYS), path);
  const { readToken, writeToken } = readKeys(r, table, path, ADMIN_KEYS);
  for (const token of [readToken, writeToken]) if (token !== null) r.secretValues.add(token);
  const addr = readAddr(r, table, path);
  if (readToken !== null && readToken === writeToken)
    r.fail(join(path, r.key("write_token")), "must differ from read_token: whoever holds the read token could act");
  const problem = addr === null ? null : adminAccessProblem(addr, readToken);
  if (problem !== null) r.fail(join(path, r.key("read_token")), problem);
  return { addr, readToken, writeToken };
}

/**
 * Why the admin API may not listen on `addr` with these tokens, or null when it may: without a
 * read token only a loopback address is safe, where only this host's users can connect.
 */
export function adminAccessProblem(addr: ListenAddress, readToken: string | null): string | null {
  if (readToken !== null || isLoopbackHost(addr.hostname)) return null;
  return `required: the admin API listens on ${addr.hostname}, which other hosts can reach; set read_token (e.g. "\${SQLOUTBOX_READ_TOKEN}"), or listen on 127.0.0.1`;
}

/** True for a name that can only mean this host's loopback interface: 127.0.0.0/8, ::1, localhost. */
export function isLoopbackHost(hostname: string): boolean {
  const host = hostname.toLowerCase().replace(/^\[|\]$/g, "");
  return (
    host === "localhost" ||
    host === "::1" ||
    host === "0:0:0:0:0:0:0:1" ||
    /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host) ||
    /^::ffff:127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host)
  );
}

/** `addr`: `HOST:PORT`, `PORT` (127.0.0.1) or a TOML integer port. */
function readAddr(r: Reader, table: Table, path: string): ListenAddress | null {
  const raw = r.raw(table, "addr");
  if (raw === undefined) return null;
  const at = join(path, r.key("addr"));
  if (typeof raw !== "string" && typeof raw !== "number")
    return r.fail(at, `expected "HOST:PORT" or a port number, got ${typeName(raw)}`) ?? null;
  const text = typeof raw === "string" ? r.text(raw, at) : raw;
  if (text === undefined) return null;
  const parsed = parseListenAddress(text);
  return "problem" in parsed ? (r.fail(at, parsed.problem) ?? null) : parsed;
}
