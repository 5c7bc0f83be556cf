import { defineCommand } from "citty";
import { list } from "./dead-letter/list.ts";
import { purge } from "./dead-letter/purge.ts";
import { replay } from "./dead-letter/replay.ts";
import { show } from "./dead-letter/show.ts";

/** `sqloutbox dead-letter list|show|replay|purge`: inspect, replay and purge quarantined rows. */
export const deadLetter = defineCommand({
  meta: { name: "dead-letter", description: "Inspect, replay and purge quarantined rows: list, show, replay, purge" },
  subCommands: { list, show, replay, purge },
});
