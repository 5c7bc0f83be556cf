// The console's fleet view: every origin's ledger row for the served tables, as the drain last read
// it (`status --json`'s `fleet`) — how far each host got and when it last moved; with lanes, how
// many lane rows it holds and the one that moved longest ago (a host whose lanes all stopped lags).

import type { Status } from "./api.ts";
import { $, ago, cell, el } from "./dom.ts";

/** The fleet, from a status; the section shows only once the drain has read some. */
export function renderFleet(status: Status): void {
  const now = Date.parse(status.generatedAt);
  $("fleet").hidden = status.fleet.length === 0;
  $("fleet-table")
    .querySelector("tbody")!
    .replaceChildren(
      ...status.fleet.map((f) => {
        const lanes = f.lanes
          ? `${f.lanes.rows} lane${f.lanes.rows === 1 ? "" : "s"}; slowest ${f.lanes.slowest.ledgerRow} at ${f.lanes.slowest.through}, moved ${ago(f.lanes.slowest.updatedAt, now)}`
          : "-";
        return el(
          "tr",
          { attrs: { "data-fleet": `${f.target}/${f.namespace}/${f.label}` } },
          cell("Target", f.target),
          cell("Table", f.namespace),
          cell("Origin", f.self ? `${f.label} (this host)` : f.label),
          cell("Through", String(f.through), "num"),
          cell("Moved", ago(f.updatedAt, now), "num"),
          cell("Lanes", lanes, "msg"),
        );
      }),
    );
}
