import { defineCommand } from "citty";
import { NotFoundError } from "../../../errors.ts";
import { jsonArg, locationArgs, logArgs, parseSeq, rowArgs } from "../../args.ts";
import { describeLocation, namespaceFile, resolveLocations } from "../../locations.ts";
import { print, renderFields } from "../../text-output.ts";
import { collectDeadLetters, type DeadLetterEntry, failIf } from "./letters.ts";

/**
 * The human view of one dead letter: every field, the SQL and its arguments in full, and the
 * letters of its group (`group`: every letter dead-lettered with it, this one included).
 */
function renderDeadLetter(e: DeadLetterEntry, group: readonly DeadLetterEntry[] = []): string {
  const members =
    group.length > 1
      ? ` — ${group.length} statements: ${group.map((g) => (g.namespace === e.namespace ? `seq ${g.seq}` : `${g.namespace} seq ${g.seq}`)).join(", ")}; replayed and discarded together`
      : "";
  return renderFields([
    ["namespace", e.namespace],
    ["seq", String(e.seq)],
    ["group", e.grp === null ? "-" : `${e.grp}${members}`],
    ...(e.laneKey === null ? [] : [["key", e.laneKey] as const]),
    ["file", e.file],
    ["source", e.source || "-"],
    ["created at", e.createdAt],
    ["dead at", e.deadAt],
    ["reason", e.reason],
    ["state", e.state],
    ["remote", remoteText(e)],
    ["attempts", String(e.attempts)],
    ["error class", e.errorClass ?? "-"],
    ["error", e.error ?? "-"],
    ["prev seq", e.prevSeq === null ? "-" : String(e.prevSeq)],
    [e.state === "discarded" ? "discarded at" : "replayed at", e.replayedAt ?? "-"],
    ["replayed as", e.replayedAsSeq === null ? "-" : String(e.replayedAsSeq)],
    ["sql", e.tag],
    ["args", e.payload],
  ]);
}

/** What the remote may have done with the letter, and what that means for a replay. */
function remoteText(e: DeadLetterEntry): string {
  if (e.remote === "applied")
    return "applied — the remote applied it after it was dead-lettered: never replayed (discard it)";
  if (e.remote === "in doubt")
    return "in doubt — a batch that carried it got no answer: a replay waits until the drain settles it (or --force once the remote was checked)";
  return "not applied";
}

/** `dead-letter show`. */
export const show = defineCommand({
  meta: { name: "show", description: "Show one quarantined row in full (read-only)" },
  args: { ...locationArgs, ...rowArgs, ...jsonArg, ...logArgs },
  async run({ args }) {
    const seq = parseSeq(args.seq);
    const locations = await resolveLocations(args);
    const { location, file } = namespaceFile(locations, args.namespace, args.app);
    const { entries, failed } = collectDeadLetters({ ...locations, dirs: [location] });
    failIf(failed, "could not read");
    const entry = entries.find((e) => e.seq === seq && e.namespace === args.namespace && e.file === file);
    if (!entry)
      throw new NotFoundError(
        `no dead letter with seq ${seq} in namespace "${args.namespace}" (${describeLocation(location)})`,
      );
    const group =
      entry.grp === null
        ? [entry]
        : entries.filter((e) => e.file === entry.file && e.grp === entry.grp && e.replayedAt === entry.replayedAt);
    print(
      args.json
        ? JSON.stringify({ ...entry, group: group.map(({ namespace, seq }) => ({ namespace, seq })) }, null, 2)
        : renderDeadLetter(entry, group),
    );
  },
});
