import { defineCommand } from "citty";
import { discard } from "./dead-letter/discard.ts";
import { list } from "./dead-letter/list.ts";
import { purge } from "./dead-letter/purge.ts";
import { replay } from "./dead-letter/replay.ts";
import { show } from "./dead-letter/show.ts";

/** `sqloutbox dead-letter list|show|replay|discard|purge`: inspect, replay, discard and purge quarantined rows. */
export const deadLetter = defineCommand({
  meta: {
    name: "dead-letter",
    description: "Inspect, replay, discard and purge quarantined rows: list, show, replay, discard, purge",
  },
  subCommands: { list, show, replay, discard, purge },
});
