// A push may name the entity its event is about: `{ key }` beside the trace context, per push, per
// pushMany, or for a whole transaction. The key is checked at the door and stored with the row.
import { expect, test } from "bun:test";
import { InvalidArgumentError } from "../src/errors.ts";
import { closeSharedOutboxes, SQLMiddleware } from "../src/outbox/middleware.ts";
import { Outbox } from "../src/outbox/outbox.ts";
import { cleanupsAfterEach, tempDirCleanedBy } from "./support/cleanups.ts";

const cleanups = cleanupsAfterEach();
cleanups.push(() => closeSharedOutboxes());

const INSERT = "INSERT INTO orders (id) VALUES (?)";
const TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

function setup() {
  const dir = tempDirCleanedBy(cleanups);
  const producer = new SQLMiddleware({ dbDir: dir.file("queue") });
  const rows = () => {
    const q = new Outbox(dir.file("queue/orders.db"), "orders");
    try {
      return q.fetchUnsynced(100).map((r) => [JSON.parse(r.payload)[0], r.laneKey, r.traceparent]);
    } finally {
      q.close();
    }
  };
  return { producer, rows };
}

test("push, pushMany and transaction take { key, traceparent, tracestate }; an integer key is stored as its text; calls without a key store none", () => {
  const { producer, rows } = setup();
  producer.push("orders", INSERT, [1], { key: "customer-7" });
  producer.push("orders", INSERT, [2], { key: 42, traceparent: TRACEPARENT });
  producer.push("orders", INSERT, [3], { traceparent: TRACEPARENT }); // today's call
  producer.push("orders", INSERT, [4]);
  producer.pushMany(
    "orders",
    [
      [INSERT, [5]],
      [INSERT, [6]],
    ],
    { key: "customer-8" },
  );
  producer.transaction(
    () => {
      producer.push("orders", INSERT, [7]); // the transaction's key
      producer.push("orders", INSERT, [8], { key: "customer-10" }); // its own
    },
    { key: "customer-9" },
  );
  expect(rows()).toEqual([
    [1, "customer-7", null],
    [2, "42", TRACEPARENT],
    [3, null, TRACEPARENT],
    [4, null, null],
    [5, "customer-8", null],
    [6, "customer-8", null],
    [7, "customer-9", null],
    [8, "customer-10", null],
  ]);
});

test("a key that is not one is refused at the door, naming the table, and nothing is stored; a transaction that catches it goes on", () => {
  const { producer, rows } = setup();
  producer.push("orders", INSERT, [1]);
  for (const key of [1.5, "", "x".repeat(257), { id: 1 }] as unknown[]) {
    expect(() => producer.push("orders", INSERT, [2], { key: key as string })).toThrow(InvalidArgumentError);
  }
  expect(() => producer.push("orders", INSERT, [2], { key: "" })).toThrow(
    'the key of a push into table "orders" is empty',
  );
  expect(() => producer.pushMany("orders", [[INSERT, [2]]], { key: 1.5 })).toThrow(InvalidArgumentError);
  expect(() => producer.transaction(() => {}, { key: "" })).toThrow("the key of a push into a transaction is empty");
  producer.transaction(() => {
    expect(() => producer.push("orders", INSERT, [3], { key: -0.5 })).toThrow(InvalidArgumentError);
    producer.push("orders", INSERT, [4], { key: "ok" });
  });
  expect(rows()).toEqual([
    [1, null, null],
    [4, "ok", null],
  ]);
});
