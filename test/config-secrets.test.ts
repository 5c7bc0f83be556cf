import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import fs from "node:fs";
import { parseDotenv } from "../src/config/dotenv.ts";
import { ConfigError, loadConfigToml, maskSecrets, parseConfigToml, SecretsError } from "../src/index.ts";
import { errorOf } from "./support/errors.ts";
import { makeTempDir, type TempDir } from "./support/tmp.ts";

const FILE = "/srv/outbox.toml";

function withConnection(lines: string, dbDir = "data"): string {
  return `
[app.myapp]
db_dir = "${dbDir}"

[app.myapp.db.primary]
writer_class = "./w.ts:W"
tables = ["events"]

[app.myapp.db.primary.connection]
${lines}
`;
}

describe("${VAR} interpolation", () => {
  test("replaces variables in connection values, db_dir and table names", () => {
    const text = withConnection('url = "libsql://${HOST}:${PORT}/x"\ntoken = "${TOKEN}"', "${DATA}/q").replace(
      '"events"',
      '"${TABLE}"',
    );
    const config = parseConfigToml(text, FILE, {
      HOST: "h",
      PORT: "8080",
      TOKEN: "t0k3n",
      DATA: "/var/lib",
      TABLE: "orders",
    });
    const target = config.apps[0]!.targets[0]!;
    expect(target.connection).toEqual({ url: "libsql://h:8080/x", token: "t0k3n" });
    expect(config.apps[0]!.dbDir).toBe("/var/lib/q");
    expect(target.tables[0]!.name).toBe("orders");
  });

  test("reaches strings nested in arrays and sub-tables of the connection", () => {
    const config = parseConfigToml(withConnection('hosts = ["${A}", "b"]\nopts = { user = "${U}" }'), FILE, {
      A: "a1",
      U: "me",
    });
    expect(config.apps[0]!.targets[0]!.connection).toEqual({ hosts: ["a1", "b"], opts: { user: "me" } });
  });

  test("$${ yields a literal ${ and is not interpolated", () => {
    const config = parseConfigToml(
      withConnection('a = "$${HOME}"\nb = "x$${"\nc = "cost: $5 and $${Y} and ${Y}"'),
      FILE,
      { Y: "why" },
    );
    expect(config.apps[0]!.targets[0]!.connection).toEqual({ a: "${HOME}", b: "x${", c: "cost: $5 and ${Y} and why" });
  });

  test("an empty variable is a value, not a missing one", () => {
    const config = parseConfigToml(withConnection('a = "[${EMPTY}]"'), FILE, { EMPTY: "" });
    expect(config.apps[0]!.targets[0]!.connection.a).toBe("[]");
  });

  test("a missing variable fails fast naming the variable and the key path", () => {
    const error = errorOf<ConfigError>(() =>
      parseConfigToml(withConnection('db_token = "${PRIMARY_DB_TOKEN}"'), FILE, { OTHER: "x" }),
    );
    expect(error).toBeInstanceOf(ConfigError);
    expect(error.code).toBe("E_CONFIG");
    expect(error.keyPath).toBe("app.myapp.db.primary.connection.db_token");
    expect(error.message).toContain('environment variable "PRIMARY_DB_TOKEN" is not set');
  });

  test("a missing variable in db_dir is reported at db_dir", () => {
    expect(() => parseConfigToml(withConnection("", "${NOPE}"), FILE, {})).toThrow(
      expect.objectContaining({ keyPath: "app.myapp.db_dir" }),
    );
  });

  test.each([
    ['a = "${UNCLOSED"', 'unclosed "${"'],
    ['a = "${}"', 'invalid variable name "${}"'],
    ['a = "${MY-VAR}"', 'invalid variable name "${MY-VAR}"'],
  ])("malformed reference %s is rejected", (line, message) => {
    expect(() => parseConfigToml(withConnection(line), FILE, {})).toThrow(
      expect.objectContaining({
        keyPath: "app.myapp.db.primary.connection.a",
        message: expect.stringContaining(message),
      }),
    );
  });
});

describe(".env parsing", () => {
  test("reads plain, exported, quoted and commented values", () => {
    const text = [
      "# a comment",
      "",
      "PLAIN=value",
      "export EXPORTED=yes",
      "SPACED = padded value  ",
      "SINGLE='literal $HOME \\n # not a comment'",
      'DOUBLE="line1\\nline2\\t\\"q\\" \\\\ end"',
      "COMMENTED=abc # trailing comment",
      "HASH=a#b",
      "EMPTY=",
      "QUOTED_COMMENT='x' # after quote",
      "  INDENTED=1",
      "DOTTED.KEY=ok",
      "URL=postgres://u:p@h/db?sslmode=require",
      'HASH_IN_QUOTES="a # b"',
      "export=plain-key-named-export",
    ].join("\n");
    expect(parseDotenv(text, "/x/.env")).toEqual({
      PLAIN: "value",
      EXPORTED: "yes",
      SPACED: "padded value",
      SINGLE: "literal $HOME \\n # not a comment",
      DOUBLE: 'line1\nline2\t"q" \\ end',
      COMMENTED: "abc",
      HASH: "a#b",
      EMPTY: "",
      QUOTED_COMMENT: "x",
      INDENTED: "1",
      "DOTTED.KEY": "ok",
      URL: "postgres://u:p@h/db?sslmode=require",
      HASH_IN_QUOTES: "a # b",
      export: "plain-key-named-export",
    });
  });

  test("handles CRLF line endings and lets a later duplicate win", () => {
    expect(parseDotenv("A=1\r\nB='two'\r\nA=3\r\n", "/x/.env")).toEqual({ A: "3", B: "two" });
  });

  test.each([
    ["GOOD=1\nnot a line\n", 2],
    ["A=1\nB='unterminated\n", 2],
    ['X="open\n', 1],
    ["A=1\n\n\nB='x' trailing\n", 4],
    ["1BAD=x\n", 1],
  ])("a malformed line is an error naming the file and line (%#)", (text, line) => {
    const error = errorOf<SecretsError>(() => parseDotenv(text, "/cfg/.env"));
    expect(error).toBeInstanceOf(SecretsError);
    expect(error.code).toBe("E_SECRETS");
    expect(error.message).toStartWith(`/cfg/.env:${line}: `);
  });

  test("a malformed line's error does not echo the value", () => {
    expect(() => parseDotenv("TOKEN='s3cr3t-value\n", "/cfg/.env")).toThrow(
      expect.not.objectContaining({ message: expect.stringContaining("s3cr3t") }),
    );
  });
});

describe("maskSecrets", () => {
  test("replaces every occurrence, longest secret first", () => {
    expect(maskSecrets("a=abc123 b=abc123456 c=abc123", ["abc123", "abc123456", ""])).toBe("a=*** b=*** c=***");
  });
});

// ---------------------------------------------------------------------------------------------
// loadConfigToml: env > .env > Doppler, with a local HTTP server standing in for Doppler.

let dir: TempDir;
let server: ReturnType<typeof Bun.serve>;
let handler: (req: Request) => Response | Promise<Response>;
let requests: Array<{ url: string; authorization: string | null }> = [];
const TOKEN = "dp.st.dev.SuperSecretDopplerToken1234";

beforeAll(() => {
  server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch: (req) => {
      requests.push({ url: req.url, authorization: req.headers.get("authorization") });
      return handler(req);
    },
  });
});
afterAll(() => server.stop(true));
beforeEach(() => {
  dir = makeTempDir();
  requests = [];
  fs.writeFileSync(
    dir.file("w.ts"),
    "export class W { constructor(readonly c: unknown) {} async writeBatch() { return []; } }\n",
  );
  fs.writeFileSync(dir.file("outbox.toml"), withConnection('a = "${A}"\nb = "${B}"\nc = "${C}"'));
});
afterEach(() => dir.cleanup());

const baseUrl = () => `http://127.0.0.1:${server.port}`;
type DopplerExtra = {
  dopplerTimeoutMs?: number;
  dopplerMaxBytes?: number;
  dopplerRetryDelaysMs?: number[];
  fetch?: typeof fetch;
};
const connectionOf = async (env: Record<string, string>, extra: DopplerExtra = {}) => {
  const loaded = await loadConfigToml(dir.file("outbox.toml"), { env, dopplerBaseUrl: baseUrl(), ...extra });
  return { connection: loaded.config.apps[0]!.targets[0]!.connection, loaded };
};

describe("secrets priority", () => {
  test("process env wins over .env, which wins over Doppler", async () => {
    fs.writeFileSync(dir.file(".env"), "A=from-dotenv\nB=from-dotenv\n");
    handler = () => Response.json({ A: "from-doppler", B: "from-doppler", C: "from-doppler" });
    const { connection } = await connectionOf({ A: "from-env", DOPPLER_TOKEN: TOKEN });
    expect(connection).toEqual({ a: "from-env", b: "from-dotenv", c: "from-doppler" });
  });

  test("DOPPLER_TOKEN may come from .env, and the request carries it as a Bearer token", async () => {
    fs.writeFileSync(dir.file(".env"), `export DOPPLER_TOKEN="${TOKEN}"\n`);
    handler = () => Response.json({ A: "1a", B: "2b", C: "3c" });
    const { connection } = await connectionOf({});
    expect(connection).toEqual({ a: "1a", b: "2b", c: "3c" });
    expect(requests).toHaveLength(1);
    const url = new URL(requests[0]!.url);
    expect(url.pathname).toBe("/v3/configs/config/secrets/download");
    expect(url.searchParams.get("format")).toBe("json");
    expect(requests[0]!.authorization).toBe(`Bearer ${TOKEN}`);
  });

  test("DOPPLER_API_URL from the environment selects the Doppler server", async () => {
    handler = () => Response.json({ A: "x1", B: "x2", C: "x3" });
    const loaded = await loadConfigToml(dir.file("outbox.toml"), {
      env: { DOPPLER_TOKEN: TOKEN, DOPPLER_API_URL: `${baseUrl()}/` },
    });
    expect(loaded.config.apps[0]!.targets[0]!.connection.c).toBe("x3");
    expect(requests).toHaveLength(1);
  });

  test("the fetch option makes the Doppler request instead of the global fetch", async () => {
    const seen: string[] = [];
    const viaOption = (async (input: string | URL | Request, init?: RequestInit) => {
      seen.push(`${String(input)} ${new Headers(init?.headers).get("authorization")}`);
      return Response.json({ A: "f1", B: "f2", C: "f3" });
    }) as typeof fetch;
    handler = () => new Response("the global fetch was used", { status: 500 });
    const { connection } = await connectionOf({ DOPPLER_TOKEN: TOKEN }, { fetch: viaOption });
    expect(connection).toEqual({ a: "f1", b: "f2", c: "f3" });
    expect(seen).toEqual([`${baseUrl()}/v3/configs/config/secrets/download?format=json Bearer ${TOKEN}`]);
    expect(requests).toHaveLength(0);
  });

  test("without DOPPLER_TOKEN Doppler is never called", async () => {
    handler = () => new Response("should not be called", { status: 500 });
    const { connection } = await connectionOf({ A: "1", B: "2", C: "3" });
    expect(connection).toEqual({ a: "1", b: "2", c: "3" });
    expect(requests).toHaveLength(0);
  });

  test("the caller's env map is not mutated and process.env is untouched", async () => {
    fs.writeFileSync(dir.file(".env"), "A=dot\nB=dot\nC=dot\nSQLOUTBOX_TEST_MARKER=1\n");
    const env = { X: "y" };
    await connectionOf(env);
    expect(env).toEqual({ X: "y" });
    expect(process.env.SQLOUTBOX_TEST_MARKER).toBeUndefined();
  });

  test("Doppler values and the token are reported as secrets", async () => {
    handler = () => Response.json({ A: "doppler-a-value", B: "doppler-b-value", C: "doppler-c-value" });
    const { loaded } = await connectionOf({ DOPPLER_TOKEN: TOKEN });
    expect(loaded.secrets).toEqual(expect.arrayContaining([TOKEN, "doppler-a-value", "doppler-c-value"]));
  });

  test("a malformed .env halts loading with its file and line", async () => {
    fs.writeFileSync(dir.file(".env"), "A=1\nB\n");
    const error = await loadConfigToml(dir.file("outbox.toml"), { env: {} }).catch((e) => e);
    expect(error).toBeInstanceOf(SecretsError);
    expect(error.message).toStartWith(`${dir.file(".env")}:2: `);
  });
});

describe("Doppler failures halt loading with the token masked", () => {
  // Retries wait 1 ms here; their count and classification are test/config-doppler.test.ts's subject.
  async function failure(extra: DopplerExtra = {}): Promise<SecretsError> {
    const error = await connectionOf(
      { DOPPLER_TOKEN: TOKEN, A: "1", B: "2", C: "3" },
      { dopplerRetryDelaysMs: [1, 1], ...extra },
    ).catch((e) => e);
    expect(error).toBeInstanceOf(SecretsError);
    expect(error.code).toBe("E_SECRETS");
    expect(error.message).not.toContain(TOKEN);
    expect(String(error.stack)).not.toContain(TOKEN);
    return error;
  }

  test("HTTP 401", async () => {
    // Doppler echoes nothing secret, but a proxy might: the message is masked either way.
    handler = () => Response.json({ messages: [`Invalid Auth token ${TOKEN}`], success: false }, { status: 401 });
    const error = await failure();
    expect(error.message).toContain("HTTP 401");
    expect(error.message).toContain("Invalid Auth token ***");
    expect(error.message).toContain("DOPPLER_TOKEN is invalid");
    expect(requests).toHaveLength(1);
  });

  test("HTTP 500 with a non-JSON body", async () => {
    handler = () => new Response("<html>oops</html>", { status: 500 });
    expect((await failure()).message).toContain("failed after 3 attempts: HTTP 500");
    expect(requests).toHaveLength(3);
  });

  test("timeout", async () => {
    handler = () => new Promise<Response>((resolve) => setTimeout(() => resolve(Response.json({})), 2_000));
    expect((await failure({ dopplerTimeoutMs: 100 })).message).toContain("no response within 100ms");
  });

  test("a body that is not JSON", async () => {
    handler = () => new Response(`not json ${TOKEN}`, { status: 200 });
    expect((await failure()).message).toContain("not JSON");
  });

  test("JSON that is not an object of secrets", async () => {
    handler = () => Response.json(["A", "B"]);
    expect((await failure()).message).toContain("expected a JSON object of secrets, got an array");
  });

  test("a secret whose value is not a string", async () => {
    handler = () => Response.json({ A: { nested: true } });
    expect((await failure()).message).toContain('secret "A" is not a string');
  });

  test("connection refused", async () => {
    const closed = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("") });
    const url = `http://127.0.0.1:${closed.port}`;
    closed.stop(true);
    const error = await loadConfigToml(dir.file("outbox.toml"), {
      env: { DOPPLER_TOKEN: TOKEN },
      dopplerBaseUrl: url,
      dopplerRetryDelaysMs: [1, 1],
    }).catch((e) => e);
    expect(error).toBeInstanceOf(SecretsError);
    expect(error.message).not.toContain(TOKEN);
  });

  test("a body over dopplerMaxBytes", async () => {
    handler = () => Response.json({ A: "a".repeat(2_000), B: "b", C: "c" });
    expect((await failure({ dopplerMaxBytes: 1_000 })).message).toContain("larger than the 1000-byte limit");
  });

  test("DOPPLER_API_URL over plain http to another host, before any request", async () => {
    let calls = 0;
    const spy = (async () => {
      calls++;
      return Response.json({ A: "1", B: "2", C: "3" });
    }) as unknown as typeof fetch;
    const env = { DOPPLER_TOKEN: TOKEN, DOPPLER_API_URL: "http://doppler.internal.example:8080" };
    const error = await loadConfigToml(dir.file("outbox.toml"), { env, fetch: spy }).catch((e) => e);
    expect(error).toBeInstanceOf(SecretsError);
    expect(error.message).toContain(
      "refused to send DOPPLER_TOKEN in clear over plain http to doppler.internal.example",
    );
    expect(error.message).not.toContain(TOKEN);
    expect(calls).toBe(0);
  });
});
