import { renderUsage, defineCommand, type ArgsDef, type CommandContext, type CommandDef } from "citty";
import { OutboxError, UsageError } from "../errors.ts";
import { VERSION } from "../version.ts";
import { logArgs } from "./args.ts";
import { createCliLogger, log, logFormat, setLogger } from "./cli-logger.ts";
import { parseCommandLine } from "./command-line.ts";
import { logOptionsFrom } from "./log-options.ts";
import { print, stripAnsi } from "./text-output.ts";

/** The root `sqloutbox` command; each subcommand lives in src/cli/commands/<command>.ts. */
export const main = defineCommand({
  meta: {
    name: "sqloutbox",
    version: VERSION,
    description: "Durable SQLite transactional outbox: drain, inspect and repair.",
  },
  // The logging flags are accepted before the command too (`sqloutbox --log-level debug status`).
  // --help and --version are read by command-line.ts everywhere; listed here for the root's help.
  args: {
    ...logArgs,
    version: { type: "boolean", alias: "v", description: "Print the version and exit" },
    help: { type: "boolean", alias: "h", description: "Show this help (after a command: that command's usage)" },
  },
  // Loaded on demand: `--version` and `status` stay fast, and one command's dependencies
  // (drivers, the drain) are not loaded by another.
  subCommands: {
    runservice: () => import("./commands/runservice.ts").then((m) => m.runservice),
    init: () => import("./commands/init.ts").then((m) => m.init),
    status: () => import("./commands/status.ts").then((m) => m.status),
    verify: () => import("./commands/verify.ts").then((m) => m.verify),
    "dead-letter": () => import("./commands/dead-letter.ts").then((m) => m.deadLetter),
    skip: () => import("./commands/skip.ts").then((m) => m.skip),
    kick: () => import("./commands/kick.ts").then((m) => m.kick),
    schema: () => import("./commands/schema.ts").then((m) => m.schema),
    completion: () => import("./commands/completion.ts").then((m) => m.completion),
  },
});

/** Exit codes: 0 ok, 1 failure or integrity problem, 2 usage. */
export const EXIT = { ok: 0, failure: 1, usage: 2 } as const;

/**
 * Runs the CLI with `argv` (without the executable and script) and returns the exit code.
 * This is the only place where errors become exit codes.
 */
export async function runCli(argv: string[]): Promise<number> {
  let path: string[] = [];
  try {
    // The command line first, so that even a bad --log-level points at the right command's help.
    const line = await parseCommandLine(main, argv);
    path = line.path;
    const options = logOptionsFrom(line.args, process.env);
    setLogger(createCliLogger({ ...options, timestamps: path[0] === "runservice" }), options.format);
    if (line.help) {
      const parent =
        path.length > 0
          ? ({ meta: { name: ["sqloutbox", ...path.slice(0, -1)].join(" "), version: VERSION } } as CommandDef)
          : undefined;
      // citty right-aligns the first column of its option tables; left-align it for reading.
      const usage = stripAnsi(await renderUsage(line.cmd, parent))
        .replace(/^ {2}( +)(\S+(?:, \S+)*) {2}/gm, (_m, pad: string, first: string) => `  ${first}${pad}  `)
        .replace(/[ \t]+$/gm, "");
      print(usage);
      return EXIT.ok;
    }
    if (line.version) {
      print(VERSION);
      return EXIT.ok;
    }
    if (line.problem) throw line.problem;
    // The values parsed above, not a second parse by citty; `data.root` lets `completion` walk the
    // command tree without importing this file.
    const context = { rawArgs: argv, args: { _: [], ...line.args }, cmd: line.cmd, data: { root: main } };
    await line.cmd.run?.(context as unknown as CommandContext<ArgsDef>);
    return EXIT.ok;
  } catch (err) {
    return reportError(err, path);
  }
}

function reportError(err: unknown, path: string[]): number {
  // stdout closed by its reader (`| head`): nothing left to say, and nobody to say it to.
  if ((err as NodeJS.ErrnoException | undefined)?.code === "EPIPE") return EXIT.ok;
  // citty's own argument errors (missing required flag, bad enum value) are usage errors too.
  const isUsage = err instanceof UsageError || (err instanceof Error && err.name === "CLIError");
  if (isUsage) {
    const message = stripAnsi((err as Error).message);
    process.stderr.write(`error: ${message}\nRun "${["sqloutbox", ...path, "--help"].join(" ")}" for usage.\n`);
    return EXIT.usage;
  }
  const logger = log();
  if (err instanceof OutboxError) {
    if (logFormat() === "json") logger.error(describe(err), { code: err.code });
    else logger.error(describe(err));
  } else {
    // Unexpected: keep the stack for the operator, it is a bug report.
    logger.error(err instanceof Error ? (err.stack ?? err.message) : String(err));
  }
  return EXIT.failure;
}

/** The message plus every cause's message, so the operator sees the whole chain on one screen. */
function describe(err: Error): string {
  const parts = [err.message];
  let cause = err.cause;
  for (let depth = 0; cause instanceof Error && depth < 5; depth++, cause = cause.cause) {
    // Messages often quote their cause already; saying it twice only adds noise.
    const message = cause.message;
    if (!parts.some((p) => p.includes(message))) parts.push(`caused by: ${message}`);
  }
  return parts.join("\n  ");
}
