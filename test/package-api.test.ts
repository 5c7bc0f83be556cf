// The public API is exactly the names src/index.ts exports: listed here, so adding or dropping one
// fails until this list is changed with it — a new export is a decision, and a documented one.
import { describe, expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";
import * as api from "../src/index.ts";

const REPO = path.join(import.meta.dir, "..");
const INDEX = fs.readFileSync(path.join(REPO, "src", "index.ts"), "utf8");

const VALUES = [
  "ConfigError",
  "ConfigIssuesError",
  "CrossTableTransactionError",
  "CrossTenantTransactionError",
  "DEFAULTS",
  "DEFAULT_MAX_PAYLOAD_BYTES",
  "ForeignTransactionError",
  "InvalidArgumentError",
  "InvalidStatementError",
  "LockedError",
  "NotFoundError",
  "Outbox",
  "OutboxClosedError",
  "OutboxError",
  "OutboxSyncService",
  "QueueFullError",
  "ReplayRefusedError",
  "SQLMiddleware",
  "SecretsError",
  "ServiceStoppedError",
  "StorageError",
  "UnsupportedStatementError",
  "UsageError",
  "WriteError",
  "builtinWriters",
  "checkStatement",
  "checkTraceContext",
  "closeSharedOutboxes",
  "configSecrets",
  "createDrainMetrics",
  "createSystemdNotifier",
  "createTracing",
  "createWriter",
  "createWriters",
  "decodeArgs",
  "defineConfig",
  "dropSchemaSql",
  "encodeArgs",
  "findDeadLetters",
  "healthAll",
  "injectOutboxSeq",
  "isTenantWriters",
  "ledgerDdl",
  "listOutboxFiles",
  "loadConfigToml",
  "maskSecrets",
  "outageBackoffMs",
  "parseConfigToml",
  "parseTraceparent",
  "readDrainState",
  "resolveEnv",
  "rowBackoffMs",
  "runService",
  "schemaSql",
  "serveOps",
  "tenantNameProblem",
  "toDialect",
  "traceSettings",
  "validateStatement",
  "verifyFile",
];

const TYPES = [
  "AppConfig",
  "AppInput",
  "BatchEvent",
  "BindValue",
  "BuiltinWriterName",
  "ChainGap",
  "ConfigInput",
  "ConnectionKey",
  "CreateWritersOptions",
  "CycleReport",
  "DeadLetter",
  "DeadLetterFilter",
  "DeadReason",
  "DeliveryObserver",
  "Dialect",
  "DrainMetrics",
  "DrainState",
  "Durability",
  "FileVerification",
  "FiledDeadLetter",
  "HealthOptions",
  "HoldReason",
  "InjectOptions",
  "LedgerRow",
  "LoadConfigOptions",
  "LoadedConfig",
  "LockHoldEvent",
  "Logger",
  "NamespaceHealth",
  "NamespaceVerification",
  "ObservedBatch",
  "ObservedRow",
  "ObservedSlice",
  "OpsServer",
  "OutboxConfig",
  "OutboxErrorCode",
  "OutboxOptions",
  "OutboxRow",
  "OutboxWriter",
  "PushOptions",
  "RewrittenStatement",
  "RowEvent",
  "RowTrace",
  "RunServiceOptions",
  "SQLMiddlewareOptions",
  "SecretsOptions",
  "Statement",
  "SyncServiceOptions",
  "SystemdNotifier",
  "TableConfig",
  "TableInput",
  "TableView",
  "TargetActivity",
  "TargetConfig",
  "TargetCycle",
  "TargetInput",
  "TargetState",
  "TargetView",
  "TenantHoldView",
  "TenantWriters",
  "TenantsView",
  "TraceContextInput",
  "TraceCounts",
  "TraceSettings",
  "Tracing",
  "TracingOptions",
  "WriteOptions",
  "WriteResult",
  "WriterSpec",
];

const NAMED_REEXPORT = /export\s+(type\s+)?\{([^}]*)\}\s*from\s*"[^"]+";/g;

/** The names index.ts exports, values and types apart, each sorted; what is not a named re-export is left in `rest`. */
function exportsOf(text: string): { values: string[]; types: string[]; rest: string } {
  const code = text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/\/\/.*$/gm, "");
  const values: string[] = [];
  const types: string[] = [];
  for (const [, typeOnly, names] of code.matchAll(NAMED_REEXPORT)) {
    for (const entry of names!.split(",").map((e) => e.trim())) {
      if (entry === "") continue;
      const isType = typeOnly !== undefined || entry.startsWith("type ");
      const name = entry
        .replace(/^type\s+/, "")
        .split(/\s+as\s+/)
        .at(-1)!;
      (isType ? types : values).push(name);
    }
  }
  return { values: values.sort(), types: types.sort(), rest: code.replace(NAMED_REEXPORT, "").trim() };
}

describe("the public API", () => {
  test("src/index.ts exports exactly the listed values and types, by named re-exports only", () => {
    expect(exportsOf(INDEX)).toEqual({ values: VALUES, types: TYPES, rest: "" });
  });

  test("the listed values are what the module exports at run time", () => {
    expect(Object.keys(api).sort()).toEqual(VALUES);
  });

  test("every export is named in docs/library.md or, for the writers, in docs/writers.md", () => {
    const docs = ["library.md", "writers.md"].map((page) => fs.readFileSync(path.join(REPO, "docs", page), "utf8"));
    const undocumented = [...VALUES, ...TYPES].filter(
      (name) => !docs.some((text) => new RegExp(`\\b${name}\\b`).test(text)),
    );
    expect(undocumented).toEqual([]);
  });
});
