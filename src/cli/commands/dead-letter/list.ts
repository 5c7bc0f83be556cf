import { defineCommand } from "citty";
import { UsageError } from "../../../errors.ts";
import { jsonArg, locationArgs, logArgs, namespaceFilterArg } from "../../args.ts";
import { resolveLocations } from "../../locations.ts";
import { oneLine, print, renderTable } from "../../text-output.ts";
import {
  collectDeadLetters,
  type DeadLetterEntry,
  failIf,
  filterOf,
  keyArg,
  reasonArg,
  sinceArg,
  tenantArg,
} from "./letters.ts";

/** The human list: one aligned row per dead letter. */
function renderDeadLetters(entries: readonly DeadLetterEntry[]): string {
  if (entries.length === 0) return "no dead letters";
  const withApp = entries.some((e) => e.app !== null);
  // Only when a letter has a key, so lists of tables without keys print as they always did.
  const withKey = entries.some((e) => e.laneKey !== null);
  const withTenant = entries.some((e) => e.tenant !== null);
  // Only when the remote may have applied a letter (in doubt, applied): a replay refuses those.
  const withRemote = entries.some((e) => e.remote !== "not applied");
  return renderTable(
    [
      ...(withApp ? [{ header: "app" }] : []),
      { header: "namespace" },
      { header: "seq", right: true },
      { header: "group", right: true },
      ...(withKey ? [{ header: "key" }] : []),
      ...(withTenant ? [{ header: "tenant" }] : []),
      { header: "reason" },
      { header: "state" },
      ...(withRemote ? [{ header: "remote" }] : []),
      { header: "attempts", right: true },
      { header: "dead at" },
      { header: "replayed as", right: true },
      { header: "error" },
    ],
    entries.map((e) => [
      ...(withApp ? [e.app ?? "-"] : []),
      e.namespace,
      String(e.seq),
      e.grp === null ? "-" : String(e.grp),
      ...(withKey ? [e.laneKey ?? "-"] : []),
      ...(withTenant ? [e.tenant ?? "-"] : []),
      e.reason,
      e.state,
      ...(withRemote ? [e.remote] : []),
      String(e.attempts),
      e.deadAt,
      e.replayedAsSeq === null ? "-" : String(e.replayedAsSeq),
      oneLine(e.error, 50),
    ]),
  );
}

/** `dead-letter list`. */
export const list = defineCommand({
  meta: { name: "list", description: "List quarantined rows, optionally filtered (read-only)" },
  args: {
    ...locationArgs,
    ...namespaceFilterArg,
    ...reasonArg,
    ...sinceArg,
    ...keyArg,
    ...tenantArg,
    replayed: { type: "boolean", description: "Only letters already replayed or discarded" },
    unreplayed: { type: "boolean", description: "Only letters neither replayed nor discarded (still dead)" },
    ...jsonArg,
    ...logArgs,
  },
  async run({ args }) {
    if (args.replayed === true && args.unreplayed === true)
      throw new UsageError("give --replayed or --unreplayed, not both");
    const filter = filterOf(args);
    if (args.replayed === true) filter.replayed = true;
    if (args.unreplayed === true) filter.replayed = false;
    const { entries, failed } = collectDeadLetters(await resolveLocations(args), filter);
    const filtered = Object.keys(filter).length > 0;
    const none = `no dead letters${filtered ? " match" : ""}${failed.length > 0 ? " in the readable files" : ""}`;
    print(
      args.json
        ? JSON.stringify({ deadLetters: entries }, null, 2)
        : entries.length === 0
          ? none
          : renderDeadLetters(entries),
    );
    failIf(failed, "could not read");
  },
});
