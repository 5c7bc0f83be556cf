/** Where an HTTP endpoint listens. */
export interface ListenAddress {
  hostname: string;
  port: number;
}

/**
 * Parses `HOST:PORT`, `[IPV6]:PORT` or a bare `PORT` (then on 127.0.0.1: metrics are not for the
 * world unless asked). Returns the address, or why the text is not one.
 */
export function parseListenAddress(text: string | number): ListenAddress | { problem: string } {
  const value = String(text).trim();
  const m = /^(?:(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):)?(\d{1,5})$/.exec(value);
  const port = m ? Number(m[2]) : Number.NaN;
  if (!m || port > 65535)
    return {
      problem: `expected HOST:PORT or PORT (e.g. 127.0.0.1:9464, [::1]:9464, 0.0.0.0:9464 or 9464), got ${JSON.stringify(value)}`,
    };
  const host = m[1] ?? "127.0.0.1";
  return { hostname: host.startsWith("[") ? host.slice(1, -1) : host, port };
}
