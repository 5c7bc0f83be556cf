// Strict command-line checking in front of citty, whose parser accepts unknown flags silently.
// A typo such as `status --db_dirr x` must be a usage error (exit 2), not a run with defaults.
import type { ArgsDef, CommandDef } from "citty";
import { UsageError } from "../errors.ts";
import { logArgs } from "./args.ts";

/** The command a command line resolves to and the words that led there. */
export interface ResolvedCommand {
  cmd: CommandDef<any>;
  path: string[];
  /** Set when the line has a problem; reported unless --help wins. */
  problem?: UsageError;
  help: boolean;
  version: boolean;
}

const resolve = async <T>(v: T | (() => T | Promise<T>) | Promise<T> | undefined) =>
  typeof v === "function" ? await (v as () => T | Promise<T>)() : await v;

const camel = (s: string) => s.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());

/** Walks argv down the command tree, checking every flag and positional against the definitions. */
export async function resolveCommandLine(root: CommandDef<any>, argv: readonly string[]): Promise<ResolvedCommand> {
  let cmd = root;
  const path: string[] = [];
  const out: ResolvedCommand = { cmd, path, help: false, version: false };
  let positionals = 0;
  const given = new Set<unknown>();
  let problem: UsageError | undefined;
  const fail = (message: string) => (problem ??= new UsageError(message));

  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const args = ((await resolve(cmd.args)) ?? {}) as ArgsDef;
    const where = ["sqloutbox", ...path].join(" ");
    if (arg === "--") break;
    if (arg.startsWith("-") && arg !== "-") {
      const [rawName, inline] = splitFlag(arg);
      if (rawName === "help" || rawName === "h") { out.help = true; continue; }
      if (rawName === "version" || rawName === "v") { out.version = true; continue; }
      const def = findArg({ ...logArgs, ...args }, rawName);
      if (!def) { fail(`unknown option ${arg.split("=")[0]} for "${where}"`); continue; }
      given.add(def);
      if (def.type === "string" || def.type === "enum") {
        if (inline !== undefined) {
          if (inline === "") fail(`option --${rawName} needs a value`);
          continue;
        }
        const value = argv[i + 1];
        // A negative number is a (wrong) value, not a flag: `--seq -1` is judged by the command.
        if (value === undefined || (value.startsWith("-") && value !== "-" && !/^-\d/.test(value))) fail(`option --${rawName} needs a value`);
        else i++;
      }
      continue;
    }
    const subs = (await resolve(cmd.subCommands)) as Record<string, unknown> | undefined;
    if (subs && Object.keys(subs).length > 0) {
      const sub = subs[arg];
      if (!sub) { fail(`unknown command "${arg}" for "${where}"`); break; }
      cmd = (await resolve(sub)) as CommandDef<any>;
      path.push(arg);
      positionals = 0;
      given.clear();
      continue;
    }
    const allowed = Object.values(args).filter((d) => d.type === "positional").length;
    if (++positionals > allowed) fail(`unexpected argument "${arg}" for "${where}"`);
  }
  const subs = (await resolve(cmd.subCommands)) as Record<string, unknown> | undefined;
  if (!problem && subs && Object.keys(subs).length > 0 && !cmd.run) {
    fail(`"${["sqloutbox", ...path].join(" ")}" needs a command: ${Object.keys(subs).join(", ")}`);
  }
  // Said here rather than by citty, so every usage error reads alike.
  const defs = ((await resolve(cmd.args)) ?? {}) as ArgsDef;
  for (const [name, def] of Object.entries(defs)) {
    if (def.type !== "positional" && (def as { required?: boolean }).required && !given.has(def)) fail(`missing required option --${name}`);
  }
  return { ...out, cmd, path, problem };
}

function splitFlag(arg: string): [string, string | undefined] {
  const body = arg.replace(/^--?/, "");
  const eq = body.indexOf("=");
  return eq === -1 ? [body, undefined] : [body.slice(0, eq), body.slice(eq + 1)];
}

function findArg(args: ArgsDef, name: string): ArgsDef[string] | undefined {
  for (const [key, def] of Object.entries(args)) {
    if (def.type === "positional") continue;
    const aliases = [(def as { alias?: string | string[] }).alias ?? []].flat();
    if (key === name || camel(key) === camel(name) || aliases.includes(name)) return def;
    // `--no-json` style negation of booleans.
    if ((def.type === "boolean" || def.type === undefined) && name.startsWith("no-") && camel(key) === camel(name.slice(3))) {
      return def;
    }
  }
  return undefined;
}
