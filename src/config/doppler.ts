import { SecretsError } from "../errors.ts";
import { maskSecrets } from "./mask.ts";

/** Doppler's API, unless `DOPPLER_API_URL` or the `dopplerBaseUrl` option says otherwise. */
export const DOPPLER_DEFAULT_BASE_URL = "https://api.doppler.com";

/** How to reach Doppler; `timeoutMs` defaults to 10 000. */
export interface DopplerOptions {
  token: string;
  baseUrl?: string;
  timeoutMs?: number;
  fetch?: typeof fetch;
}

/**
 * Downloads the secrets of the config a Doppler service token belongs to
 * (`GET {base}/v3/configs/config/secrets/download?format=json`). Any failure — non-2xx, timeout,
 * network, a body that is not a JSON object of strings — throws `SecretsError` with the token masked.
 */
export async function fetchDopplerSecrets(options: DopplerOptions): Promise<Record<string, string>> {
  const base = (options.baseUrl ?? DOPPLER_DEFAULT_BASE_URL).replace(/\/+$/, "");
  const url = `${base}/v3/configs/config/secrets/download?format=json`;
  const timeoutMs = options.timeoutMs ?? 10_000;
  const fail = (why: string, cause?: unknown) =>
    new SecretsError(maskSecrets(`Doppler secrets download from ${url} failed: ${why} (DOPPLER_TOKEN is set; unset it to skip Doppler)`, [options.token]), { cause });

  let body: string;
  let status: number;
  try {
    const response = await (options.fetch ?? fetch)(url, {
      headers: { Authorization: `Bearer ${options.token}`, Accept: "application/json" },
      signal: AbortSignal.timeout(timeoutMs),
    });
    status = response.status;
    body = await response.text();
    if (!response.ok) throw fail(`HTTP ${status} ${response.statusText}${dopplerMessages(body)}`);
  } catch (error) {
    if (error instanceof SecretsError) throw error;
    const name = (error as Error)?.name;
    if (name === "TimeoutError" || name === "AbortError") throw fail(`no response within ${timeoutMs} ms`);
    throw fail(maskSecrets(String((error as Error)?.message ?? error), [options.token]));
  }

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
