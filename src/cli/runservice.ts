import { defineCommand } from "citty";
import fs from "node:fs";
import path from "node:path";
import { loadConfigToml } from "../config/load.ts";
import { maskError } from "../config/mask.ts";
import { runService } from "../drain/run.ts";
import { NotFoundError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import { VERSION } from "../version.ts";
import { logArgs } from "./_log.ts";
import { log } from "./_context.ts";
import { DEFAULT_CONFIG } from "./_targets.ts";

/** How long a stop signal may take to finish and confirm the in-flight batch (systemd's TimeoutStopSec is 45 s). */
export const STOP_TIMEOUT_MS = 30_000;

/** `sqloutbox runservice`: load outbox.toml, drain until SIGTERM/SIGINT/SIGHUP, exit 0 after a clean stop. */
export const runservice = defineCommand({
  meta: { name: "runservice", description: "Run the drain from outbox.toml until SIGTERM/SIGINT/SIGHUP (SIGUSR1: integrity scan)" },
  args: {
    config: { type: "string", valueHint: "FILE", description: `The config file (default ./${DEFAULT_CONFIG})` },
    ...logArgs,
  },
  async run({ args }) {
    const file = path.resolve(args.config ?? DEFAULT_CONFIG);
    if (!fs.existsSync(file)) {
      throw new NotFoundError(`config file ${file} does not exist (give --config FILE, or scaffold one with "sqloutbox init")`);
    }
    const base = log();
    const { config, writers, secrets } = await loadConfigToml(file, { logger: base });
    const logger = maskingLogger(base, secrets);
    const targets = config.apps.flatMap((a) => a.targets.map((t) => t.name));
    // runService owns the signals: SIGTERM/SIGINT/SIGHUP (also during startup) stop cleanly, SIGUSR1 scans.
    await runService(config, writers, {
      logger,
      stopTimeoutMs: STOP_TIMEOUT_MS,
      onStarted: () => logger.info(`sqloutbox ${VERSION} draining ${config.apps.map((a) => a.dbDir).join(", ")} to ${targets.join(", ")}`),
    });
  },
});

/** A logger that masks every credential in what it prints (driver errors may quote a URL or DSN). */
function maskingLogger(logger: Logger, secrets: readonly string[]): Logger {
  if (secrets.length === 0) return logger;
  const clean = (v: unknown): unknown => maskError(v, secrets); // strings and Errors (cause chain) masked
  const wrap = (fn: (m: string, ...r: unknown[]) => void) => (m: string, ...r: unknown[]) =>
    fn(clean(m) as string, ...r.map(clean));
  return {
    debug: wrap(logger.debug.bind(logger)),
    info: wrap(logger.info.bind(logger)),
    warn: wrap(logger.warn.bind(logger)),
    error: wrap(logger.error.bind(logger)),
  };
}
