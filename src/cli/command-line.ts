// The command line, parsed once from the commands' citty definitions: which command it names,
// the value of every flag, and the first usage problem. citty's own parser accepts unknown flags
// silently; here a typo such as `status --confg x` is a usage error (exit 2) with a suggestion,
// not a run with defaults.
import type { ArgDef, ArgsDef, CommandDef } from "citty";
import { didYouMean } from "../config/suggest.ts";
import { UsageError } from "../errors.ts";
import { logArgs } from "./args.ts";

/**
 * Any command's definition. citty's CommandDef is invariant in its args, so a list of commands
 * with different flags can only be typed with `any` here.
 */
// biome-ignore lint/suspicious/noExplicitAny: see above
export type AnyCommandDef = CommandDef<any>;

/** Flag values by definition name (a boolean flag true/false, a string flag its text), positionals by theirs. */
export type ArgValues = Record<string, string | boolean | undefined>;

/** What a command line asks for. */
export interface CommandLine {
  /** The command it names (the root when it names none). */
  cmd: AnyCommandDef;
  /** The command words that led there (`["dead-letter", "list"]`). */
  path: string[];
  /** Every flag given, at any level (`sqloutbox --log-level debug status --json`), and the positionals. */
  args: ArgValues;
  help: boolean;
  version: boolean;
  /** The first usage problem; reported unless --help or --version wins. */
  problem?: UsageError;
}

/** A citty definition that may be a value, a promise or a function returning either. */
export async function resolveDef<T>(
  value: T | Promise<T> | (() => T | Promise<T>) | undefined,
): Promise<T | undefined> {
  return typeof value === "function" ? await (value as () => T | Promise<T>)() : await value;
}

/** A command's flags and positionals, as defined. */
export async function argsOf(cmd: AnyCommandDef): Promise<ArgsDef> {
  return ((await resolveDef(cmd.args)) ?? {}) as ArgsDef;
}

/** A command's subcommands by name, each loaded (they are lazy imports); empty for a leaf. */
export async function subCommandsOf(cmd: AnyCommandDef): Promise<Array<[string, AnyCommandDef]>> {
  const subs = ((await resolveDef(cmd.subCommands)) ?? {}) as Record<string, unknown>;
  return Promise.all(
    Object.entries(subs).map(
      async ([name, sub]) => [name, (await resolveDef(sub)) as AnyCommandDef] as [string, AnyCommandDef],
    ),
  );
}

/** Walks argv down the command tree once, reading every flag and positional against the definitions. */
export async function parseCommandLine(root: AnyCommandDef, argv: readonly string[]): Promise<CommandLine> {
  let cmd = root;
  const path: string[] = [];
  const args: ArgValues = {};
  const line: CommandLine = { cmd, path, args, help: false, version: false };
  let positionals = 0;
  const given = new Set<string>();
  const fail = (message: string) => (line.problem ??= new UsageError(message));

  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const defs = await argsOf(cmd);
    const where = ["sqloutbox", ...path].join(" ");
    if (arg === "--") break;
    if (arg.startsWith("-") && arg !== "-") {
      const [rawName, inline] = splitFlag(arg);
      if (rawName === "help" || rawName === "h") {
        line.help = true;
        continue;
      }
      if (rawName === "version" || rawName === "v") {
        line.version = true;
        continue;
      }
      const flags: ArgsDef = { ...logArgs, ...defs };
      const found = findFlag(flags, rawName);
      if (!found) {
        const names = Object.entries(flags)
          .filter(([, d]) => d.type !== "positional")
          .map(([n]) => `--${n}`);
        const shown = arg.split("=")[0]!;
        fail(`unknown option ${shown} for "${where}"${didYouMean(shown, [...names, "--help", "--version"])}`);
        continue;
      }
      const { name, def, negated } = found;
      given.add(name);
      if (def.type !== "string" && def.type !== "enum") {
        args[name] = !negated && inline !== "false";
        continue;
      }
      if (inline !== undefined) {
        if (inline === "") fail(`option --${rawName} needs a value`);
        else args[name] = inline;
        continue;
      }
      const value = argv[i + 1];
      // A negative number is a (wrong) value, not a flag: `--seq -1` is judged by the command.
      if (value === undefined || (value.startsWith("-") && value !== "-" && !/^-\d/.test(value)))
        fail(`option --${rawName} needs a value`);
      else args[name] = argv[++i];
      continue;
    }
    const subs = await subCommandsOf(cmd);
    if (subs.length > 0) {
      const sub = subs.find(([name]) => name === arg);
      if (!sub) {
        fail(
          `unknown command "${arg}" for "${where}"${didYouMean(
            arg,
            subs.map(([name]) => name),
          )}`,
        );
        break;
      }
      cmd = sub[1];
      path.push(arg);
      positionals = 0;
      given.clear();
      continue;
    }
    const slots = Object.entries(defs).filter(([, d]) => d.type === "positional");
    const slot = slots[positionals++];
    if (slot) args[slot[0]] = arg;
    else fail(`unexpected argument "${arg}" for "${where}"`);
  }
  const subs = await subCommandsOf(cmd);
  if (!line.problem && subs.length > 0 && !cmd.run)
    fail(`"${["sqloutbox", ...path].join(" ")}" needs a command: ${subs.map(([name]) => name).join(", ")}`);
  // Said here rather than by citty, so every usage error reads alike.
  for (const [name, def] of Object.entries(await argsOf(cmd))) {
    if (def.type !== "positional" && (def as { required?: boolean }).required && !given.has(name))
      fail(`missing required option --${name}`);
  }
  return { ...line, cmd, path };
}

function splitFlag(arg: string): [string, string | undefined] {
  const body = arg.replace(/^--?/, "");
  const eq = body.indexOf("=");
  return eq === -1 ? [body, undefined] : [body.slice(0, eq), body.slice(eq + 1)];
}

const camel = (s: string) => s.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());

/** The flag `name` denotes: by its name, its camelCase spelling or an alias; `no-x` negates a boolean `x`. */
function findFlag(defs: ArgsDef, name: string): { name: string; def: ArgDef; negated: boolean } | undefined {
  for (const [key, def] of Object.entries(defs)) {
    if (def.type === "positional") continue;
    const aliases = [(def as { alias?: string | string[] }).alias ?? []].flat();
    if (key === name || camel(key) === camel(name) || aliases.includes(name)) return { name: key, def, negated: false };
    if (
      (def.type === "boolean" || def.type === undefined) &&
      name.startsWith("no-") &&
      camel(key) === camel(name.slice(3))
    ) {
      return { name: key, def, negated: true };
    }
  }
  return undefined;
}
