import { defineCommand, runMain } from "citty";
import { VERSION } from "../version.ts";

/** The root `sqloutbox` command; subcommands are added in src/cli/<command>.ts. */
export const main = defineCommand({
  meta: {
    name: "sqloutbox",
    version: VERSION,
    description: "Durable SQLite transactional outbox: drain, inspect and repair.",
  },
  subCommands: {},
});

/** Runs the CLI with `argv` (without the executable and script) and exits with its code. */
export async function runCli(argv: string[]): Promise<void> {
  await runMain(main, { rawArgs: argv });
}
