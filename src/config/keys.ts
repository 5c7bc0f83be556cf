import { hostname } from "node:os";
import { DEFAULT_FILE_MODE, DIALECTS, type Durability } from "../vocabulary.ts";
import type { BuiltinWriterName } from "../writers/registry.ts";
import { boolean, choice, described, integer, key, limit, number, own, string, type Input } from "./declaration.ts";

// Every key of outbox.toml, declared once, table by table: its kind (type, range or choices),
// default, unit and meaning. The loader's key lists and checks (build.ts, target.ts, tables.ts,
// tracing.ts), the resolved config's fields and DEFAULTS (types.ts) and defineConfig's input types
// come from here; test/config-example.test.ts holds docs/configuration.md to it. A key of kind
// `own` is a structure its section's code reads itself. Object order is the order keys are read.

/**
 * The most connections to one target (`connections`): each carries a batch or two in flight, up to
 * batch_max_bytes between them.
 */
export const MAX_CONNECTIONS = 64;

function connectionsProblem(n: number): string | undefined {
  return n <= MAX_CONNECTIONS ? undefined : `must be at most ${MAX_CONNECTIONS}, got ${n}`;
}

/** The ledger's label column holds up to 255 characters (MySQL VARCHAR(255)): `origin_label`'s limit. */
const MAX_LABEL_LENGTH = 255;

/** The OTLP/HTTP encodings the drain can export in. */
export type TraceProtocol = "http/protobuf" | "http/json";
export const TRACE_PROTOCOLS: readonly TraceProtocol[] = ["http/protobuf", "http/json"];

/** An inline entry of `tables`: one table's overrides of its target's settings. */
export const TABLE_KEYS = {
  name: key(own<string>("string"), { required: true, doc: "The table name." }),
  inject_outbox_seq: key(boolean, {
    default: described("the target's"),
    doc: "Overrides the target's inject_outbox_seq for this table.",
  }),
  retain_log_days: key(number({ min: 0 }), {
    unit: "days",
    default: described("the target's"),
    doc: "Overrides the target's retain_log_days.",
  }),
  lanes: key(integer({ min: 1 }), {
    default: described("the app's"),
    doc: "Overrides the app's lanes for this table.",
  }),
};
export type TableInput = string | Input<typeof TABLE_KEYS>;

/** `[app.NAME.db.DB]`: one remote database. */
export const TARGET_KEYS = {
  writer: key(own<BuiltinWriterName>("string"), { default: described("—"), doc: "A built-in writer" }),
  writer_class: key(own<string>("string"), { default: described("—"), doc: "A custom writer" }),
  tables: key(own<TableInput[]>("array"), {
    required: true,
    doc: "The tables (= outbox namespaces = {db_dir}/{table}.db files) delivered here, at least one.",
  }),
  inject_outbox_seq: key(own<boolean | string[]>("boolean or array of names"), {
    default: false,
    doc: "The compatibility mode: rewrite statements to carry outbox_seq, for remote schemas built for the Python reference.",
  }),
  retain_log_days: key(number({ min: 0 }), {
    unit: "days",
    default: described("the app's"),
    doc: "Default retain_log_days of this target's tables.",
  }),
  dialect: key(choice(DIALECTS), {
    default: described("the writer's"),
    doc: "How placeholders are converted and DDL is generated; overrides the writer's own dialect.",
  }),
  compat: key(boolean, {
    default: false,
    doc: "For injected tables on sqlite/libsql targets: produce the reference's exact SQL",
  }),
  ledger: key(boolean, {
    default: true,
    doc: "Keep a delivery ledger in this target and fence every batch with it: exactly once in effect.",
  }),
  ledger_table: key(string, {
    default: "sqloutbox_ledger",
    check: ledgerTableProblem,
    doc: "The ledger table's name in this target",
  }),
  trace_comments: key(boolean, {
    default: false,
    doc: "Append each row's traceparent to its statement as a sqlcommenter comment",
  }),
  connections: key(integer({ min: 1 }), {
    default: 1,
    check: connectionsProblem,
    type: `integer, 1–${MAX_CONNECTIONS}`,
    doc: "Connections to this target, each carrying up to two batches in flight, the second queued behind the first (so 1 already keeps two in flight)",
  }),
  connection: key(own<Record<string, unknown>>("table"), { default: described("{}"), doc: "Passed to the writer." }),
  max_open_tenants: key(integer({ min: 1 }), {
    default: 64,
    doc: "A tenant template only: at most this many tenant databases open at once, the least recently used closed first",
  }),
};
export type TargetInput = Input<typeof TARGET_KEYS>;

/** `[app.NAME]`: where its queues are, and the tuning of its targets. */
export const APP_KEYS = {
  db_dir: key(own<string>("string"), {
    default: described("one of db_dir / db_file"),
    doc: "Directory of the local queue files, one per table: {db_dir}/{table}.db.",
  }),
  db_file: key(own<string>("string"), {
    default: described("one of db_dir / db_file"),
    doc: "One file holding every table of the app as a namespace, so a transaction may span tables",
  }),
  origin_label: key(string, {
    default: described("the host name", () => hostname().slice(0, MAX_LABEL_LENGTH)),
    check: originLabelProblem,
    type: `string, 1–${MAX_LABEL_LENGTH} characters`,
    doc: "The label this app's queue files carry in each target's delivery ledger",
  }),
  batch_size: key(integer({ min: 1 }), { default: 500, doc: "Most rows taken from one table into one batch." }),
  batch_max_bytes: key(integer({ min: 1024 }), {
    default: 16 * 1024 * 1024,
    doc: "Most SQL text plus encoded arguments (counted in characters) in one target's batch, whatever the row count",
  }),
  flush_interval: key(number({ above: 0 }), { unit: "seconds", default: 1.0, doc: "How quickly the drain reacts" }),
  table_flush_threshold: key(integer({ min: 1 }), {
    default: 15,
    doc: "A table with at least this many pending rows is sent at once…",
  }),
  table_max_wait: key(number({ min: 0 }), {
    unit: "seconds",
    default: 6.0,
    doc: "…otherwise when its oldest pending row has waited this long.",
  }),
  auto_schema: key(boolean, { default: true, doc: "At startup, create what a target lacks" }),
  cleanup_every: key(integer({ min: 1 }), {
    default: 500,
    doc: "Every this many batches a target sends, prune the delivered log and the replayed dead letters of its tables.",
  }),
  retain_log_days: key(number({ min: 0 }), { unit: "days", default: 30, doc: "How long the delivered log is kept" }),
  lanes: key(integer({ min: 1 }), {
    default: 1,
    doc: "Lanes per table: rows of one key (push's key) keep their order in their lane, a failing head holds only its lane; 1 is one strict order per table",
  }),
  retain_replayed_days: key(number({ min: 0 }), {
    unit: "days",
    default: 30,
    doc: "Replayed dead letters are deleted by the drain this many days after their replay",
  }),
  max_pending: key(limit, {
    default: null,
    doc: "The pending-row cap of this app's tables, as status shows capacity against it",
  }),
  max_attempts: key(limit, {
    default: 10,
    doc: "A head that failed this many times is moved to the dead-letter log and its table moves on.",
  }),
  backoff_cap_minutes: key(number({ above: 0 }), {
    unit: "minutes",
    default: 64,
    doc: "The longest a failed head waits.",
  }),
  backoff_unit_seconds: key(number({ above: 0 }), {
    unit: "seconds",
    default: 60,
    doc: "A head that failed n times waits 2^n units before its next try",
  }),
  outage_backoff_cap_minutes: key(number({ above: 0 }), {
    unit: "minutes",
    default: 5,
    doc: "An unreachable target is retried after 1 s, doubling, jittered to between half and all of that, never later than this.",
  }),
  write_timeout: key(number({ above: 0 }), {
    unit: "seconds",
    default: 30,
    doc: "How long one writeBatch may take before the target counts as down",
  }),
  durability: key(choice<Durability>(["normal", "full"]), {
    default: "normal",
    doc: "synchronous of the drain's own connections to the queue files",
  }),
  file_mode: key(integer({ min: 0 }), {
    default: DEFAULT_FILE_MODE,
    check: fileModeProblem,
    type: "integer",
    doc: "Permission bits of the queue files (and their -wal/-shm), the lock file and the state file the drain creates",
  }),
  db: key(own<Record<string, TargetInput>>("table"), {
    required: true,
    doc: "The targets, [app.NAME.db.DB]; at least one.",
  }),
};
export type AppInput = Input<typeof APP_KEYS>;

/** `[tracing]`: every key null when absent (where a default says so), so the OTEL_* variables decide. */
export const TRACING_KEYS = {
  enabled: key(boolean, {
    default: described("on with an endpoint"),
    doc: "false: off, whatever the variables say. true: on, at http://localhost:4318 without an endpoint.",
  }),
  endpoint: key(string, {
    default: described("OTEL_EXPORTER_OTLP_ENDPOINT"),
    check: endpointProblem,
    doc: "The collector's OTLP/HTTP base URL (http://collector:4318); spans go to {endpoint}/v1/traces.",
  }),
  protocol: key(
    choice(TRACE_PROTOCOLS, {
      grpc: `OTLP over gRPC is not supported: use "http/protobuf" (the collector's port 4318) or "http/json"`,
    }),
    {
      default: described('OTEL_EXPORTER_OTLP_PROTOCOL, else "http/protobuf"'),
      doc: "How spans are encoded.",
    },
  ),
  headers: key(own<Record<string, string>>("table of strings"), {
    default: described("OTEL_EXPORTER_OTLP_HEADERS"),
    doc: "Sent with every export",
  }),
  service_name: key(string, {
    default: described('OTEL_SERVICE_NAME, else "sqloutbox"'),
    doc: "The resource's service.name",
  }),
  max_queue_spans: key(integer({ min: 1 }), {
    default: 8192,
    doc: "Spans waiting for the collector beyond this are dropped",
  }),
  max_spans_per_second: key(number({ min: 1 }), {
    default: 2000,
    doc: "The most spans the drain makes a second, bursts of a second's worth allowed",
  }),
  export_timeout: key(number({ above: 0 }), {
    unit: "seconds",
    default: 10,
    doc: "How long one export (its retries included) may take before its spans count as lost.",
  }),
};
export type TracingInput = Input<typeof TRACING_KEYS>;

/** `[admin]`: the admin API and the operator console (docs/admin.md); off without `addr`. */
export const ADMIN_KEYS = {
  addr: key(own<string | number>("string or integer"), {
    default: described("off"),
    doc: "Where runservice serves the admin API and the console (HOST:PORT; a port alone listens on 127.0.0.1)",
  }),
  read_token: key(string, {
    default: described("none: loopback reads without a token"),
    check: tokenProblem,
    doc: "The bearer token that may read (required unless addr is a loopback address).",
  }),
  write_token: key(string, {
    default: described("none: read-only"),
    check: tokenProblem,
    doc: "The bearer token that may read and act: replay, skip, retry, kick.",
  }),
};
export type AdminInput = Input<typeof ADMIN_KEYS>;

/** The top level of outbox.toml. */
export const TOP_KEYS = {
  app: key(own<Record<string, AppInput>>("table"), { required: true, doc: "The apps, [app.NAME]; at least one." }),
  metrics_addr: key(own<string | number>("string or integer"), {
    default: described("off"),
    doc: "Where runservice serves /metrics, /healthz and /readyz",
  }),
  tracing: key(own<TracingInput>("table"), {
    default: described("off"),
    doc: "[tracing]: the export of delivery spans over OpenTelemetry's OTLP/HTTP",
  }),
  admin: key(own<AdminInput>("table"), {
    default: described("off"),
    doc: "[admin]: the admin API and the operator console",
  }),
};

/** Fewer characters than this is guessable: a token is a password sent with every request. */
const MIN_TOKEN_LENGTH = 16;

function tokenProblem(token: string): string | undefined {
  if (token.length >= MIN_TOKEN_LENGTH && !/\s/.test(token)) return undefined;
  return `must be at least ${MIN_TOKEN_LENGTH} characters without spaces (e.g. the output of "openssl rand -hex 32"), got ${token.length} character(s)`;
}

function originLabelProblem(label: string): string | undefined {
  if (label.trim() === "") return "must not be empty";
  return label.length > MAX_LABEL_LENGTH
    ? `must be at most ${MAX_LABEL_LENGTH} characters, got ${label.length}`
    : undefined;
}

/** Permission bits such as 0o600 (TOML octal): the owner must keep read and write. */
function fileModeProblem(mode: number): string | undefined {
  if (mode <= 0o777 && (mode & 0o600) === 0o600) return undefined;
  return `must be permission bits between 0o600 and 0o777 that let the owner read and write (e.g. 0o600 or 0o640), got 0o${mode.toString(8)}`;
}

/** A plain identifier: it is quoted in every dialect, but a DBA must be able to type it. */
function ledgerTableProblem(name: string): string | undefined {
  if (/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(name)) return undefined;
  return `must be a plain table name (letters, digits and _, not starting with a digit, at most 63 characters), got ${JSON.stringify(name)}`;
}

function endpointProblem(endpoint: string): string | undefined {
  if (isHttpUrl(endpoint)) return undefined;
  return `expected an http:// or https:// URL (the collector's OTLP/HTTP base, e.g. "http://127.0.0.1:4318"), got ${JSON.stringify(endpoint)}`;
}

/** True for an absolute http(s) URL: `endpoint`, and the OTEL_* variables that stand in for it. */
export function isHttpUrl(text: string): boolean {
  try {
    const url = new URL(text);
    return url.protocol === "http:" || url.protocol === "https:";
  } catch {
    return false;
  }
}
