import { defineCommand } from "citty";
import type { AnyCommandDef } from "../command-line.ts";
import { UsageError } from "../../errors.ts";
import { logArgs } from "../args.ts";
import { commandTree, completionScript, SHELLS, type Shell } from "../shell-completion.ts";
import { print } from "../text-output.ts";

/**
 * `sqloutbox completion SHELL`: prints a completion script for bash, zsh or fish, written from the
 * command definitions. main.ts hands it the root command as `data.root`: a command does not
 * import main.ts.
 */
export const completion = defineCommand({
  meta: {
    name: "completion",
    description: `Print a shell completion script (${SHELLS.join(", ")}): eval "$(sqloutbox completion bash)"`,
  },
  args: {
    shell: {
      type: "positional",
      required: false,
      valueHint: SHELLS.join("|"),
      description: `The shell: ${SHELLS.join(", ")}`,
    },
    ...logArgs,
  },
  async run({ args, data }) {
    const shell = args.shell as string | undefined;
    if (shell === undefined) throw new UsageError(`completion needs a shell: ${SHELLS.join(", ")}`);
    if (!(SHELLS as readonly string[]).includes(shell))
      throw new UsageError(`completion: unknown shell "${shell}": expected one of ${SHELLS.join(", ")}`);
    const root = (data as { root: AnyCommandDef }).root;
    print(completionScript(shell as Shell, "sqloutbox", await commandTree(root)).trimEnd());
  },
});
