// Shell completion scripts for bash, zsh and fish, written from the command tree (every command's
// citty definition), so a new command or flag completes without editing a script by hand.
import type { ArgDef, ArgsDef } from "citty";
import { logArgs } from "./args.ts";
import { argsOf, resolveDef, subCommandsOf, type AnyCommandDef } from "./command-line.ts";

/** The shells `sqloutbox completion` writes a script for. */
export const SHELLS = ["bash", "zsh", "fish"] as const;
/** One of SHELLS. */
export type Shell = (typeof SHELLS)[number];

/**
 * What a flag's value or a positional completes to: a file, a directory, one of some words, or anything (no
 * suggestion).
 */
type ValueKind = { kind: "file" } | { kind: "dir" } | { kind: "words"; words: string[] } | { kind: "any" };

/** One command of the tree: its words from the root, its subcommands, flags and positional. */
interface Node {
  path: string[];
  commands: Array<{ name: string; description: string }>;
  flags: Array<{ name: string; description: string; value: ValueKind | null }>;
  positional: ValueKind | null;
}

/** Every command of the tree under `root`, root first; `--help` (and at the root `--version`) included. */
export async function commandTree(root: AnyCommandDef): Promise<Node[]> {
  const nodes: Node[] = [];
  const visit = async (cmd: AnyCommandDef, path: string[]) => {
    const subs = await subCommandsOf(cmd);
    // The logging flags are accepted at every level (command-line.ts), whatever a command lists.
    const defs: Array<[string, ArgDef]> = Object.entries({ ...logArgs, ...(await argsOf(cmd)) } as ArgsDef);
    const flags = defs
      .filter(([, d]) => d.type !== "positional")
      .map(([name, d]) => ({ name, description: d.description ?? "", value: valueKindOf(d) }));
    if (!flags.some((f) => f.name === "help"))
      flags.push({ name: "help", description: "Show this command's usage", value: null });
    const positional = defs.find(([, d]) => d.type === "positional");
    nodes.push({
      path,
      commands: await Promise.all(
        subs.map(async ([name, sub]) => ({ name, description: (await resolveDef(sub.meta))?.description ?? "" })),
      ),
      flags,
      // Without a hint a positional's name is one (`dir` → DIR), as citty's usage shows it.
      positional: positional
        ? (valueKindOf({ valueHint: positional[0].toUpperCase(), ...positional[1] } as ArgDef) ?? { kind: "any" })
        : null,
    });
    for (const [name, sub] of subs) await visit(sub, [...path, name]);
  };
  await visit(root, []);
  return nodes;
}

/** A value hint (`FILE`, `DIR`, `error|warn|info|debug`) as what to complete; null for a boolean flag. */
function valueKindOf(def: ArgDef): ValueKind | null {
  if (def.type === "boolean") return null;
  const hint = (def as { valueHint?: string }).valueHint ?? "";
  if (hint === "FILE") return { kind: "file" };
  if (hint === "DIR") return { kind: "dir" };
  if (hint.includes("|")) return { kind: "words", words: hint.split("|") };
  return def.type === "positional" ? null : { kind: "any" };
}

/** The completion script for `shell`, completing `program`'s commands, flags and their values. */
export function completionScript(shell: Shell, program: string, nodes: readonly Node[]): string {
  return shell === "fish" ? fishScript(program, nodes) : bashScript(program, nodes, shell);
}

// bash (and zsh through its bashcompinit): the tree as case tables the completion function walks.
function bashScript(program: string, nodes: readonly Node[], shell: "bash" | "zsh"): string {
  const fn = `_${program.replace(/\W/g, "_")}`;
  const key = (n: Node) => JSON.stringify(n.path.join(" "));
  const kindText = (v: ValueKind) => (v.kind === "words" ? `words ${v.words.join(" ")}` : v.kind);
  const cases = (rows: string[]) => rows.map((r) => `    ${r}`).join("\n");
  const header =
    shell === "zsh"
      ? `# zsh completion for ${program}, written by \`${program} completion zsh\` from its command definitions.
# Load it from ~/.zshrc: eval "$(${program} completion zsh)"
autoload -U +X compinit && { (( $+functions[compdef] )) || compinit; }
autoload -U +X bashcompinit && bashcompinit
`
      : `# bash completion for ${program}, written by \`${program} completion bash\` from its command definitions.
# Load it from ~/.bashrc: eval "$(${program} completion bash)"; or save it as /etc/bash_completion.d/${program}.
`;
  return `${header}
# The subcommands of a command (its words from the root), and what its positional completes to.
${fn}_commands() {
  case "$1" in
${cases(nodes.filter((n) => n.commands.length > 0).map((n) => `${key(n)}) echo ${JSON.stringify(n.commands.map((c) => c.name).join(" "))} ;;`))}
  esac
}
${fn}_positional() {
  case "$1" in
${cases(nodes.filter((n) => n.positional !== null).map((n) => `${key(n)}) echo ${JSON.stringify(kindText(n.positional!))} ;;`))}
  esac
}
# The flags of a command.
${fn}_flags() {
  case "$1" in
${cases(nodes.map((n) => `${key(n)}) echo ${JSON.stringify(n.flags.map((f) => `--${f.name}`).join(" "))} ;;`))}
  esac
}
# What the value of a command's flag completes to (nothing for a flag without a value).
${fn}_value() {
  case "$1|$2" in
${cases(nodes.flatMap((n) => n.flags.filter((f) => f.value !== null).map((f) => `${JSON.stringify(`${n.path.join(" ")}|--${f.name}`)}) echo ${JSON.stringify(kindText(f.value!))} ;;`)))}
  esac
}
${fn}_reply() {
  case "$1" in
    file) COMPREPLY=($(compgen -f -- "$2")) ;;
    dir) COMPREPLY=($(compgen -d -- "$2")) ;;
    words\\ *) COMPREPLY=($(compgen -W "\${1#words }" -- "$2")) ;;
    *) COMPREPLY=() ;;
  esac
}
${fn}() {
  local cur=\${COMP_WORDS[COMP_CWORD]} path="" word kind i
  for ((i = 1; i < COMP_CWORD; i++)); do
    word=\${COMP_WORDS[i]}
    if [[ $word == -* ]]; then
      # A flag's value (\`--config FILE\`) is not a command word.
      [[ $word != *=* && -n $(${fn}_value "$path" "$word") ]] && ((i++))
    elif [[ " $(${fn}_commands "$path") " == *" $word "* ]]; then
      path=\${path:+$path }$word
    fi
  done
  kind=""
  ((COMP_CWORD > 1)) && kind=$(${fn}_value "$path" "\${COMP_WORDS[COMP_CWORD-1]}")
  if [[ -n $kind ]]; then ${fn}_reply "$kind" "$cur"
  elif [[ $cur == -* ]]; then COMPREPLY=($(compgen -W "$(${fn}_flags "$path")" -- "$cur"))
  elif [[ -n $(${fn}_commands "$path") ]]; then COMPREPLY=($(compgen -W "$(${fn}_commands "$path")" -- "$cur"))
  else ${fn}_reply "$(${fn}_positional "$path")" "$cur"
  fi
}
complete -F ${fn} ${program}
`;
}

// fish: one `complete` line per command and flag, each guarded by the command words already typed.
function fishScript(program: string, nodes: readonly Node[]): string {
  const q = (text: string) => `'${text.replace(/\\/g, "\\\\").replace(/'/g, "\\'")}'`;
  // The words typed so far name this node: each of its path's words seen, none of its subcommands yet.
  const at = (n: Node) => {
    const seen = n.path.map((w) => `__fish_seen_subcommand_from ${w}`);
    const below =
      n.commands.length > 0 ? [`not __fish_seen_subcommand_from ${n.commands.map((c) => c.name).join(" ")}`] : [];
    return q([...seen, ...below].join("; and "));
  };
  const lines = [
    `# fish completion for ${program}, written by \`${program} completion fish\` from its command definitions.`,
    `# Load it: ${program} completion fish | source   (or save it as ~/.config/fish/completions/${program}.fish)`,
    `complete -c ${program} -f`,
  ];
  for (const n of nodes) {
    for (const c of n.commands) lines.push(`complete -c ${program} -n ${at(n)} -a ${q(c.name)} -d ${q(c.description)}`);
    if (n.positional?.kind === "dir")
      lines.push(`complete -c ${program} -n ${at(n)} -a '(__fish_complete_directories)'`);
    if (n.positional?.kind === "words")
      lines.push(`complete -c ${program} -n ${at(n)} -a ${q(n.positional.words.join(" "))}`);
    for (const f of n.flags) {
      const value =
        f.value === null
          ? ""
          : f.value.kind === "file"
            ? " -r -F"
            : f.value.kind === "dir"
              ? " -r -a '(__fish_complete_directories)'"
              : f.value.kind === "words"
                ? ` -r -a ${q(f.value.words.join(" "))}`
                : " -r";
      lines.push(`complete -c ${program} -n ${at(n)} -l ${f.name}${value} -d ${q(f.description)}`);
    }
  }
  return `${lines.join("\n")}\n`;
}
