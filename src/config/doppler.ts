import { SecretsError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import { maskError, maskSecrets } from "../masking.ts";
import { formatDuration } from "../duration.ts";

/** Doppler's API, unless `DOPPLER_API_URL` or the `dopplerBaseUrl` option says otherwise. */
export const DOPPLER_DEFAULT_BASE_URL = "https://api.doppler.com";

/** The largest secrets download read by default: 4 MiB, a thousand times a typical config's few KiB. */
export const DOPPLER_DEFAULT_MAX_BYTES = 4 * 1024 * 1024;

/** The waits before each retry by default: 3 attempts, 250 ms then 500 ms apart. */
const DOPPLER_DEFAULT_RETRY_DELAYS_MS: readonly number[] = [250, 500];

/** How to reach Doppler; defaults: `timeoutMs` 10 000 per attempt, `maxBytes` 4 MiB, `retryDelaysMs` [250, 500]. */
export interface DopplerOptions {
  token: string;
  /** https, or plain http only to a loopback host (127.0.0.0/8, ::1, localhost); default https://api.doppler.com. */
  baseUrl?: string;
  /** Per attempt, covering the response headers and the whole body. */
  timeoutMs?: number;
  /** The largest body read, in bytes after decompression; a larger one fails without being buffered. */
  maxBytes?: number;
  /** The wait before each retry, in order; its length is the number of retries (`[]`: one attempt). */
  retryDelaysMs?: readonly number[];
  fetch?: typeof fetch;
  /** Told about each retry (default: silent). */
  logger?: Logger;
}

/** One attempt's result: the body, or why it failed and whether trying again could help. */
type Attempt = { body: string; status: number } | { why: string; retryable: boolean; cause?: unknown };

/** Error bodies are only read for Doppler's `messages`, which are short. */
const ERROR_BODY_MAX_BYTES = 64 * 1024;

/**
 * Downloads the secrets of the config a Doppler service token belongs to
 * (`GET {base}/v3/configs/config/secrets/download?format=json`), retrying network errors,
 * timeouts and HTTP 408/429/5xx. Any failure — an insecure base URL, a refused token, a body over
 * `maxBytes`, a body that is not a JSON object of strings — throws `SecretsError` with the token masked.
 */
export async function fetchDopplerSecrets(options: DopplerOptions): Promise<Record<string, string>> {
  const base = (options.baseUrl ?? DOPPLER_DEFAULT_BASE_URL).replace(/\/+$/, "");
  const url = `${base}/v3/configs/config/secrets/download?format=json`;
  const mask = (text: string) => maskSecrets(text, [options.token]);
  const fail = (why: string, attempts = 1, cause?: unknown) =>
    new SecretsError(
      mask(
        `Doppler secrets download from ${url} failed${attempts > 1 ? ` after ${attempts} attempts` : ""}: ${why} (DOPPLER_TOKEN is set; unset it to skip Doppler)`,
      ),
      cause === undefined ? undefined : { cause: maskError(cause, [options.token]) },
    );

  const insecure = baseUrlProblem(base);
  if (insecure) throw fail(insecure);
  const timeoutMs = options.timeoutMs ?? 10_000;
  const maxBytes = options.maxBytes ?? DOPPLER_DEFAULT_MAX_BYTES;
  const delays = options.retryDelaysMs ?? DOPPLER_DEFAULT_RETRY_DELAYS_MS;
  // A NaN cap would compare false against every size and read without limit.
  if (!(timeoutMs > 0) || !(maxBytes > 0) || !delays.every((ms) => ms >= 0)) {
    throw fail(
      `timeoutMs (${timeoutMs}) and maxBytes (${maxBytes}) must be > 0 and every retry delay ≥ 0 (${delays.join(", ")})`,
    );
  }

  for (let attempt = 1; ; attempt++) {
    const result = await download(url, options, timeoutMs, maxBytes);
    if ("body" in result) return parseSecrets(result, (why) => fail(why, attempt));
    const delay = delays[attempt - 1];
    if (!result.retryable || delay === undefined) throw fail(result.why, attempt, result.cause);
    options.logger?.warn(
      mask(
        `Doppler secrets download attempt ${attempt} of ${delays.length + 1} failed: ${result.why}; retrying in ${formatDuration(delay)}`,
      ),
    );
    await Bun.sleep(delay);
  }
}

/**
 * Why the token must not be sent to `base`, or null: plain http would carry it in clear across
 * the network, so http is allowed only to this machine (a local stand-in for Doppler in tests).
 */
function baseUrlProblem(base: string): string | null {
  let parsed: URL;
  try {
    parsed = new URL(base);
  } catch {
    return `the base URL ${JSON.stringify(base)} is not a valid URL`;
  }
  if (parsed.protocol === "https:") return null;
  if (parsed.protocol === "http:" && isLoopback(parsed.hostname)) return null;
  const allowed = "use https (plain http is allowed only to 127.0.0.0/8, ::1 or localhost)";
  if (parsed.protocol !== "http:") return `the base URL must be https, got ${parsed.protocol}; ${allowed}`;
  return `refused to send DOPPLER_TOKEN in clear over plain http to ${parsed.hostname}; ${allowed}`;
}

/** `hostname` as the URL parser normalises it (`127.1` → `127.0.0.1`, IPv6 in brackets). */
function isLoopback(hostname: string): boolean {
  return hostname === "localhost" || hostname === "[::1]" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(hostname);
}

async function download(url: string, options: DopplerOptions, timeoutMs: number, maxBytes: number): Promise<Attempt> {
  const signal = AbortSignal.timeout(timeoutMs);
  try {
    const response = await (options.fetch ?? fetch)(url, {
      headers: { Authorization: `Bearer ${options.token}`, Accept: "application/json" },
      signal,
      // A followed redirect would carry the Bearer token to wherever Location points (http included).
      redirect: "manual",
    });
    const status = `HTTP ${response.status} ${response.statusText}`.trimEnd();
    if (response.ok) {
      const body = await readCapped(response, maxBytes, signal);
      if (typeof body === "string") return { body, status: response.status };
      return {
        why: `${status} with a body larger than the ${maxBytes}-byte limit (${body.over}); a secrets download is a few KiB: is the base URL right?`,
        retryable: false,
      };
    }
    const read = await readCapped(response, ERROR_BODY_MAX_BYTES, signal).catch(() => "");
    const detail = `${status}${typeof read === "string" ? dopplerMessages(read) : ""}`;
    if (response.status === 401 || response.status === 403) {
      return {
        why: `${detail}: DOPPLER_TOKEN is invalid, expired or revoked, or has no access to this config (not retried)`,
        retryable: false,
      };
    }
    if (response.status >= 300 && response.status < 400) {
      return {
        why: `${status}: redirected to ${response.headers.get("location") ?? "nowhere"}, not followed so the token goes nowhere else`,
        retryable: false,
      };
    }
    return { why: detail, retryable: response.status === 408 || response.status === 429 || response.status >= 500 };
  } catch (error) {
    const name = (error as Error)?.name;
    if (name === "TimeoutError" || name === "AbortError")
      return { why: `no response within ${formatDuration(timeoutMs)}`, retryable: true };
    return { why: String((error as Error)?.message ?? error), retryable: true, cause: error };
  }
}

/**
 * The body as text, or how it exceeded `maxBytes`: a Content-Length over the limit is refused
 * unread, and a stream is cancelled at the first chunk past it, so memory stays near `maxBytes`
 * whatever the server sends (a 2 GB body was buffered whole before, 2.6 GB RSS). Counting the
 * decoded stream, not the header, also stops a small gzip body that inflates to gigabytes.
 */
async function readCapped(
  response: Response,
  maxBytes: number,
  signal: AbortSignal,
): Promise<string | { over: string }> {
  const declared = Number(response.headers.get("content-length") ?? Number.NaN);
  if (declared > maxBytes) {
    await response.body?.cancel().catch(() => {});
    return { over: `Content-Length ${declared}, not read` };
  }
  if (!response.body) return "";
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let received = 0;
  for (;;) {
    const { done, value } = await reader.read();
    // A fetch that ignores the signal still cannot read past the deadline.
    signal.throwIfAborted();
    if (done) break;
    received += value.byteLength;
    if (received > maxBytes) {
      await reader.cancel().catch(() => {});
      return { over: `stopped reading at ${received} bytes` };
    }
    chunks.push(value);
  }
  const bytes = new Uint8Array(received);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return new TextDecoder().decode(bytes);
}

/** A JSON object of secrets; null values are skipped, numbers and booleans become strings. */
function parseSecrets(
  { body, status }: { body: string; status: number },
  fail: (why: string) => SecretsError,
): Record<string, string> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    throw fail(`HTTP ${status} but the body is not JSON`);
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    throw fail(`expected a JSON object of secrets, got ${Array.isArray(parsed) ? "an array" : typeof parsed}`);
  }
  const secrets: Record<string, string> = {};
  for (const [key, value] of Object.entries(parsed)) {
    if (value === null || value === undefined) continue;
    if (typeof value === "object") throw fail(`secret "${key}" is not a string`);
    secrets[key] = String(value);
  }
  return secrets;
}

/** Doppler error bodies look like `{"messages":["Invalid Auth token"],"success":false}`. */
function dopplerMessages(body: string): string {
  try {
    const messages = (JSON.parse(body) as { messages?: unknown }).messages;
    if (Array.isArray(messages) && messages.length > 0) return `: ${messages.map(String).join("; ").slice(0, 300)}`;
  } catch {
    // not JSON: the status line says enough
  }
  return "";
}
