import { defineCommand } from "citty";
import { loadConfigToml } from "../../config/load.ts";
import { layoutOf } from "../../config/layout.ts";
import { runService } from "../../drain/run.ts";
import { parseListenAddress, type ListenAddress } from "../../config/listen-address.ts";
import { maskError, maskSecrets } from "../../masking.ts";
import type { OutboxSyncService } from "../../drain/service.ts";
import { UsageError } from "../../errors.ts";
import { serveOps, type OpsServer } from "../../ops/http.ts";
import { serveAdmin, type AdminServer } from "../../ops/admin/server.ts";
import { createDrainMetrics } from "../../ops/metrics.ts";
import { createSystemdNotifier } from "../../ops/systemd.ts";
import { traceSettings } from "../../ops/tracing/settings.ts";
import { createTracing, type Tracing } from "../../ops/tracing/tracing.ts";
import { isFieldBag, type Logger, takesFieldBags } from "../../logger.ts";
import { VERSION } from "../../version.ts";
import { configArg, configFile, logArgs } from "../args.ts";
import { log } from "../cli-logger.ts";
import { redact } from "../text-output.ts";
import { type Locations, locationsOf } from "../locations.ts";
import { collectStatus, collectTenantStatus } from "../status-report.ts";

/** How long a stop signal may take to finish and confirm the in-flight batch (systemd's TimeoutStopSec is 45 s). */
export const STOP_TIMEOUT_MS = 30_000;

/**
 * `sqloutbox runservice`: load outbox.toml, drain until SIGTERM/SIGINT/SIGHUP, exit 0 after a clean
 * stop. With `--metrics-addr` (or `metrics_addr`) it serves /metrics, /healthz and /readyz; under
 * systemd (`NOTIFY_SOCKET`) it reports READY=1 once draining, STOPPING=1 on a stop signal, and
 * feeds the watchdog while every target's loop is alive. With `[tracing]` or the OTEL_EXPORTER_OTLP_*
 * variables it exports delivery spans over OTLP/HTTP (see docs/operations.md#tracing). With
 * `--admin-addr` (or `[admin] addr`) it serves the admin API and the console (docs/admin.md).
 */
export const runservice = defineCommand({
  meta: {
    name: "runservice",
    description:
      "Run the drain from outbox.toml until SIGTERM/SIGINT/SIGHUP (SIGUSR1: integrity scan; SIGUSR2: retry now)",
  },
  args: {
    ...configArg,
    "metrics-addr": {
      type: "string",
      valueHint: "HOST:PORT",
      description:
        "Serve /metrics, /healthz and /readyz here (a bare PORT listens on 127.0.0.1; overrides metrics_addr)",
    },
    "admin-addr": {
      type: "string",
      valueHint: "HOST:PORT",
      description:
        "Serve the admin API and the console here (a bare PORT listens on 127.0.0.1; overrides [admin] addr)",
    },
    ...logArgs,
  },
  async run({ args }) {
    const file = configFile(args.config, { hint: 'give --config FILE, or scaffold one with "sqloutbox init"' });
    let address: ListenAddress | null = null;
    if (args["metrics-addr"] !== undefined) {
      const parsed = parseListenAddress(args["metrics-addr"]);
      if ("problem" in parsed) throw new UsageError(`--metrics-addr: ${parsed.problem}`);
      address = parsed;
    }
    let adminAddress: ListenAddress | null = null;
    if (args["admin-addr"] !== undefined) {
      const parsed = parseListenAddress(args["admin-addr"]);
      if ("problem" in parsed) throw new UsageError(`--admin-addr: ${parsed.problem}`);
      adminAddress = parsed;
    }
    const base = log();
    const { config, writers, secrets } = await loadConfigToml(file, { logger: base });
    address ??= config.metricsAddr;
    adminAddress ??= config.admin.addr;
    const logger = maskingLogger(base, secrets);
    const targets = config.apps.flatMap((a) => a.targets.map((t) => t.name));
    let service: OutboxSyncService | null = null;
    const settings = traceSettings(config.tracing, process.env);
    const mask = (text: string) => maskSecrets(text, [...secrets, ...Object.values(settings?.headers ?? {})]);
    const tracing: Tracing | null = settings === null ? null : createTracing(settings, { logger, mask });
    if (settings !== null)
      logger.info(
        `tracing: exporting delivery spans to ${settings.url} (${settings.protocol}) as service ${settings.resource["service.name"]}`,
      );
    const metrics = createDrainMetrics(() => service, { tracing });
    let server: OpsServer | null = null;
    let admin: AdminServer | null = null;
    const notifier = createSystemdNotifier(process.env, { logger });
    let watchdog: ReturnType<typeof setInterval> | undefined;
    try {
      if (address) {
        server = serveOps(
          address,
          () => service,
          metrics,
          (text) => maskSecrets(text, secrets),
        );
        logger.info(`serving /metrics, /healthz and /readyz on ${server.url}`);
      }
      if (adminAddress) {
        const apps = layoutOf(config);
        const locations: Locations = { dirs: locationsOf(apps), secrets, configFile: file };
        admin = serveAdmin({
          address: adminAddress,
          tokens: { readToken: config.admin.readToken, writeToken: config.admin.writeToken },
          apps,
          // Without the tenants' backlog: the console polls this in the drain's own process, and
          // counting it reads every pending row's index entry.
          status: () => collectStatus(locations, new Date(), { tenantBacklog: false }),
          tenant: (tenant) => collectTenantStatus(locations, tenant),
          retryNow: () => service?.retryNow(),
          logger,
          mask: (text) => redact(text, secrets),
          version: VERSION,
          registry: metrics.registry,
          configFile: file,
        });
        logger.info(
          `serving the admin API and the console on ${admin.url}${config.admin.writeToken === null ? " (read-only: no write_token)" : ""}`,
        );
      }
      // runService owns the signals: SIGTERM/SIGINT/SIGHUP (also during startup) stop cleanly, SIGUSR1 scans,
      // SIGUSR2 retries now.
      await runService(config, writers, {
        logger,
        stopTimeoutMs: STOP_TIMEOUT_MS,
        onBatch: metrics.observeBatch,
        onLockHold: metrics.observeLockHold,
        ...(tracing === null ? {} : { observer: tracing.observer }),
        onCreated: (created) => (service = created),
        onStarted: (running) => {
          // A db_file app's dbDir is only the folder of its file: name what is drained.
          const queues = config.apps.map((a) => a.dbFile ?? a.dbDir);
          const line = `sqloutbox ${VERSION} draining ${queues.join(", ")} to ${targets.join(", ")}`;
          logger.info(line);
          notifier?.ready(line);
          const every = notifier?.watchdogIntervalMs;
          if (every) {
            // A hung loop must get the process restarted: feed the watchdog only while every target's loop runs.
            watchdog = setInterval(() => {
              if (running.targets().every((t) => t.liveness().ok)) notifier!.watchdog();
            }, every);
            watchdog.unref();
          }
        },
        onStopping: (why) => notifier?.stopping(`${why}: finishing the in-flight batch`),
      });
    } finally {
      clearInterval(watchdog);
      notifier?.close();
      // The spans of the last batches go out before the exit, bounded: a collector that is down must not hold the stop.
      await tracing?.shutdown(3_000);
      await server?.stop();
      await admin?.stop();
    }
  },
});

/**
 * The CLI's logger (which takes field bags) masking every credential in what it prints — driver
 * errors may quote a URL or DSN — field values included. Still one that takes field bags: else
 * the library would fold the fields into the message, and JSON lines would lose their keys
 * whenever the config holds a secret.
 */
function maskingLogger(logger: Logger, secrets: readonly string[]): Logger {
  if (secrets.length === 0) return logger;
  const clean = (v: unknown): unknown =>
    isFieldBag(v)
      ? Object.fromEntries(Object.entries(v).map(([k, f]) => [k, typeof f === "string" ? maskSecrets(f, secrets) : f]))
      : maskError(v, secrets); // strings and Errors (cause chain) masked
  const wrap =
    (fn: (m: string, ...r: unknown[]) => void) =>
    (m: string, ...r: unknown[]) =>
      fn(clean(m) as string, ...r.map(clean));
  return takesFieldBags({
    debug: wrap(logger.debug.bind(logger)),
    info: wrap(logger.info.bind(logger)),
    warn: wrap(logger.warn.bind(logger)),
    error: wrap(logger.error.bind(logger)),
  });
}
