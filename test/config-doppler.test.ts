import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import { DOPPLER_DEFAULT_MAX_BYTES, fetchDopplerSecrets, type DopplerOptions } from "../src/config/doppler.ts";
import { SecretsError } from "../src/errors.ts";
import type { Logger } from "../src/logger.ts";

// A real local HTTP server stands in for Doppler; each test sets `handler`.
const TOKEN = "dp.st.prd.VeryPrivateDopplerToken9876";
let server: ReturnType<typeof Bun.serve>;
let handler: (req: Request, n: number) => Response | Promise<Response>;
let requests: string[] = [];

beforeAll(() => {
  server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    idleTimeout: 0,
    fetch: (req) => {
      requests.push(req.headers.get("authorization") ?? "");
      return handler(req, requests.length);
    },
  });
});
afterAll(() => server.stop(true));
beforeEach(() => {
  requests = [];
});

const local = () => `http://127.0.0.1:${server.port}`;
/** Quick retries so the retry tests take milliseconds; each test may override any option. */
const download = (options: Partial<DopplerOptions> = {}) =>
  fetchDopplerSecrets({ token: TOKEN, baseUrl: local(), retryDelaysMs: [5, 5], ...options });

/** The SecretsError `options` fail with, checked for the code and for the token in every message of its chain. */
async function failure(options: Partial<DopplerOptions> = {}): Promise<SecretsError> {
  const error = await download(options).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(SecretsError);
  expect((error as SecretsError).code).toBe("E_SECRETS");
  for (let e = error as Error | undefined; e; e = e.cause as Error | undefined) {
    expect(e.message).not.toContain(TOKEN);
    expect(String(e.stack)).not.toContain(TOKEN);
  }
  return error as SecretsError;
}

/** A fetch that records each call and answers `answer`, so a test can prove no request left the process. */
function spyFetch(answer: () => Response | Promise<Response> = () => Response.json({ A: "1" })) {
  const calls: string[] = [];
  const fetch = (async (input: string | URL | Request) => {
    calls.push(String(input));
    return answer();
  }) as typeof globalThis.fetch;
  return { calls, fetch };
}

/** A stream of `totalBytes` in 64 KiB chunks, made only as fast as the client reads; `sent()` says how much was made. */
function endless(totalBytes: number) {
  const chunk = new Uint8Array(64 * 1024).fill(0x20);
  let made = 0;
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (made >= totalBytes) return controller.close();
      controller.enqueue(chunk);
      made += chunk.byteLength;
    },
  });
  return { body, sent: () => made };
}

describe("the base URL", () => {
  test.each([
    "http://api.doppler.com",
    "http://10.0.0.5:8080",
    "http://[::2]/",
    "http://localhost.evil.example",
    "http://128.0.0.1",
  ])("plain http to the non-loopback %s is refused before any request is made", async (baseUrl) => {
    const spy = spyFetch();
    const error = await failure({ baseUrl, fetch: spy.fetch });
    expect(spy.calls).toEqual([]);
    expect(error.message).toContain("refused to send DOPPLER_TOKEN in clear over plain http");
    expect(error.message).toContain("use https");
  });

  test.each([
    ["ftp://api.doppler.com", "must be https, got ftp:"],
    ["api.doppler.com", "is not a valid URL"],
  ])("%s is refused before any request is made", async (baseUrl, message) => {
    const spy = spyFetch();
    expect((await failure({ baseUrl, fetch: spy.fetch })).message).toContain(message);
    expect(spy.calls).toEqual([]);
  });

  test.each([
    "https://api.doppler.com",
    "https://10.0.0.5:8443/",
    "http://127.0.0.1:9",
    "http://127.8.9.10",
    "http://localhost:8080",
    "http://[::1]:8080",
  ])("%s is allowed", async (baseUrl) => {
    const spy = spyFetch();
    expect(await download({ baseUrl, fetch: spy.fetch })).toEqual({ A: "1" });
    expect(spy.calls).toEqual([`${baseUrl.replace(/\/$/, "")}/v3/configs/config/secrets/download?format=json`]);
  });

  test("a redirect is not followed, so the token is not sent where Location points", async () => {
    handler = () => new Response(null, { status: 302, headers: { Location: "http://203.0.113.7/steal" } });
    const error = await failure();
    expect(error.message).toContain("HTTP 302");
    expect(error.message).toContain("redirected to http://203.0.113.7/steal, not followed");
    expect(requests).toHaveLength(1);
  });
});

describe("the response size limit", () => {
  test("a streamed body far over the limit is abandoned early, without buffering it", async () => {
    const total = 200 * 1024 * 1024;
    const maxBytes = 1024 * 1024;
    let stream: ReturnType<typeof endless> | undefined;
    handler = () => {
      stream = endless(total);
      return new Response(stream.body, { headers: { "Content-Type": "application/json" } });
    };
    Bun.gc(true);
    const rssBefore = process.memoryUsage().rss;
    const error = await failure({ maxBytes });
    const rssGrowth = process.memoryUsage().rss - rssBefore;

    expect(error.message).toContain(
      `HTTP 200 OK with a body larger than the ${maxBytes}-byte limit (stopped reading at `,
    );
    expect(error.message).not.toContain("after 3 attempts");
    expect(requests).toHaveLength(1);
    // Reading the whole body (the old response.text()) made all 200 MB and grew RSS by ~210 MB.
    expect(stream!.sent()).toBeLessThan(32 * 1024 * 1024);
    expect(rssGrowth).toBeLessThan(64 * 1024 * 1024);
  });

  test("a Content-Length over the limit is refused before the body is read", async () => {
    // Bun.serve writes its own Content-Length, so a raw socket declares 5 GB and then sends a
    // single byte and stalls: only a client that trusts the header can fail before the timeout.
    const raw = Bun.listen({
      hostname: "127.0.0.1",
      port: 0,
      socket: {
        data(socket) {
          socket.write("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5000000000\r\n\r\n{");
        },
      },
    });
    try {
      const error = await failure({ baseUrl: `http://127.0.0.1:${raw.port}`, timeoutMs: 4_000 });
      expect(error.message).toContain(
        `with a body larger than the ${DOPPLER_DEFAULT_MAX_BYTES}-byte limit (Content-Length 5000000000, not read)`,
      );
    } finally {
      raw.stop(true);
    }
  });

  test("the default limit is 4 MiB, and a body of exactly maxBytes is accepted", async () => {
    const json = JSON.stringify({ A: "x".repeat(DOPPLER_DEFAULT_MAX_BYTES) });
    handler = () => new Response(json);
    expect((await failure()).message).toContain(`larger than the ${DOPPLER_DEFAULT_MAX_BYTES}-byte limit`);
    expect(await download({ maxBytes: Buffer.byteLength(json) })).toEqual({ A: "x".repeat(DOPPLER_DEFAULT_MAX_BYTES) });
  });

  test("an error response's huge body is not buffered either", async () => {
    let stream: ReturnType<typeof endless> | undefined;
    handler = () => {
      stream = endless(200 * 1024 * 1024);
      return new Response(stream.body, { status: 401 });
    };
    expect((await failure()).message).toContain("HTTP 401 Unauthorized: DOPPLER_TOKEN is invalid");
    expect(stream!.sent()).toBeLessThan(32 * 1024 * 1024);
  });

  test("a maxBytes that is not a positive number is refused rather than read without limit", async () => {
    const spy = spyFetch();
    expect((await failure({ maxBytes: Number.NaN, fetch: spy.fetch })).message).toContain("maxBytes (NaN) must be > 0");
    expect(spy.calls).toEqual([]);
  });
});

describe("retries", () => {
  test("an outage that clears by the third attempt is ridden out, each retry logged with the token masked", async () => {
    handler = (_, n) =>
      n < 3 ? new Response(`busy ${TOKEN}`, { status: n === 1 ? 503 : 429 }) : Response.json({ A: "third" });
    const warnings: string[] = [];
    const logger: Logger = { debug() {}, info() {}, warn: (m) => warnings.push(m), error() {} };
    expect(await download({ logger })).toEqual({ A: "third" });
    expect(requests).toEqual([`Bearer ${TOKEN}`, `Bearer ${TOKEN}`, `Bearer ${TOKEN}`]);
    expect(warnings).toHaveLength(2);
    expect(warnings[0]).toContain("attempt 1 of 3 failed: HTTP 503 Service Unavailable; retrying in 5ms");
    expect(warnings[1]).toContain("attempt 2 of 3 failed: HTTP 429 Too Many Requests; retrying in 5ms");
    for (const warning of warnings) expect(warning).not.toContain(TOKEN);
  });

  test("an outage that outlasts the attempts fails naming how many were made", async () => {
    handler = () => Response.json({ messages: ["upstream down"] }, { status: 502 });
    expect((await failure()).message).toContain("failed after 3 attempts: HTTP 502 Bad Gateway: upstream down");
    expect(requests).toHaveLength(3);
  });

  test("network errors are retried, and the last one is kept as the masked cause", async () => {
    let calls = 0;
    const flaky = (async () => {
      calls++;
      if (calls < 3) throw new TypeError(`ECONNRESET while talking to Doppler with ${TOKEN}`);
      return Response.json({ A: "ok" });
    }) as unknown as typeof fetch;
    expect(await download({ fetch: flaky })).toEqual({ A: "ok" });
    expect(calls).toBe(3);

    calls = -10;
    const error = await failure({ fetch: flaky });
    expect(error.message).toContain("failed after 3 attempts: ECONNRESET while talking to Doppler with ***");
    expect((error.cause as Error).message).toContain("with ***");
  });

  test("connection refused is retried", async () => {
    const closed = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("") });
    const baseUrl = `http://127.0.0.1:${closed.port}`;
    closed.stop(true);
    expect((await failure({ baseUrl })).message).toContain("failed after 3 attempts");
  });

  test.each([
    [401, "Unauthorized"],
    [403, "Forbidden"],
  ])("HTTP %d says the token is invalid at once, without retrying", async (status, text) => {
    handler = () => Response.json({ messages: [`Invalid Auth token ${TOKEN}`], success: false }, { status });
    const error = await failure();
    expect(error.message).toContain(
      `failed: HTTP ${status} ${text}: Invalid Auth token ***: DOPPLER_TOKEN is invalid, expired or revoked`,
    );
    expect(requests).toHaveLength(1);
  });

  test("another 4xx is not retried either", async () => {
    handler = () => new Response("no such thing", { status: 404 });
    expect((await failure()).message).toContain("failed: HTTP 404 Not Found (DOPPLER_TOKEN is set");
    expect(requests).toHaveLength(1);
  });

  test("retryDelaysMs [] makes a single attempt", async () => {
    handler = () => new Response("", { status: 503 });
    expect((await failure({ retryDelaysMs: [] })).message).toContain("failed: HTTP 503");
    expect(requests).toHaveLength(1);
  });
});

describe("timeouts", () => {
  test("a server that never answers fails each attempt at timeoutMs", async () => {
    handler = () => new Promise<Response>(() => {});
    expect((await failure({ timeoutMs: 50 })).message).toContain("failed after 3 attempts: no response within 50ms");
    expect(requests).toHaveLength(3);
  });

  test("a slow first attempt is retried and the next one succeeds", async () => {
    handler = (_, n) => (n === 1 ? new Promise<Response>(() => {}) : Response.json({ A: "second" }));
    expect(await download({ timeoutMs: 50 })).toEqual({ A: "second" });
    expect(requests).toHaveLength(2);
  });

  test("a body that stalls after the headers counts against the same deadline", async () => {
    handler = () =>
      new Response(
        new ReadableStream({
          start(controller) {
            controller.enqueue(new TextEncoder().encode('{"A":'));
          },
          pull: () => new Promise<void>(() => {}),
        }),
      );
    expect((await failure({ timeoutMs: 100, retryDelaysMs: [] })).message).toContain(
      "failed: no response within 100ms",
    );
  });
});
