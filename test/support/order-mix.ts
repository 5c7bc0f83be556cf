// A deterministic stream of transactions across two tables, orders and order_items (a foreign key
// from items to orders): new orders with their items, items added to an order, orders deleted with
// their items (items first: commit order matters), and a lone total update. Every transaction keeps
// orders.item_count equal to its order's item count, so a remote holding half a transaction shows it.
// The producer and the oracle walk the same stream: transaction n is the same for both.
import { Database } from "bun:sqlite";

/**
 * One statement of a transaction, for `table`, with the key it is pushed with in a table with lanes:
 * the order's for every statement about an order (so each transaction that touches an order is
 * ordered in that order's lane), the item's for a new item (so a transaction spans several keys).
 */
export interface MixStatement {
  table: "orders" | "order_items";
  sql: string;
  args: number[];
  key: string;
}

/** The remote (and oracle) schema, in every dialect the statements are valid in. */
export const ORDER_SCHEMA = [
  "CREATE TABLE orders (id BIGINT PRIMARY KEY, total BIGINT NOT NULL, item_count BIGINT NOT NULL)",
  "CREATE TABLE order_items (id BIGINT PRIMARY KEY, order_id BIGINT NOT NULL REFERENCES orders (id), qty BIGINT NOT NULL)",
];

/**
 * Transaction after transaction for one host: its order ids are `host`, `host + hosts`, … and its
 * item ids likewise, so hosts of a fleet never collide on a key.
 */
export class OrderMix {
  #state: number;
  #nextOrder: number;
  #nextItem: number;
  /** Live orders and their item ids. */
  readonly #orders = new Map<number, number[]>();

  constructor(
    seed: number,
    host: number,
    private readonly hosts: number,
  ) {
    this.#state = seed * 2654435761 + host;
    this.#nextOrder = host;
    this.#nextItem = host;
  }

  #random(): number {
    this.#state = (this.#state * 1103515245 + 12345) & 0x7fffffff;
    return this.#state / 0x7fffffff;
  }

  /** The next transaction of the stream. */
  next(): MixStatement[] {
    const live = [...this.#orders.keys()];
    const pick = () => live[Math.floor(this.#random() * live.length)]!;
    const roll = this.#random();
    if (live.length === 0 || roll < 0.45) return this.#newOrder(1 + Math.floor(this.#random() * 3));
    if (roll < 0.7) return this.#addItems(pick(), 1 + Math.floor(this.#random() * 2));
    if (roll < 0.85) return this.#deleteOrder(pick());
    const id = pick();
    return [
      { table: "orders", sql: "UPDATE orders SET total = total + ? WHERE id = ?", args: [7, id], key: `order-${id}` },
    ];
  }

  #newOrder(items: number): MixStatement[] {
    const id = this.#nextOrder;
    this.#nextOrder += this.hosts;
    this.#orders.set(id, []);
    return [
      {
        table: "orders",
        sql: "INSERT INTO orders (id, total, item_count) VALUES (?, ?, ?)",
        args: [id, 0, 0],
        key: `order-${id}`,
      },
      ...this.#addItems(id, items),
    ];
  }

  #addItems(order: number, count: number): MixStatement[] {
    const out: MixStatement[] = [];
    for (let i = 0; i < count; i++) {
      const item = this.#nextItem;
      this.#nextItem += this.hosts;
      this.#orders.get(order)!.push(item);
      out.push({
        table: "order_items",
        sql: "INSERT INTO order_items (id, order_id, qty) VALUES (?, ?, ?)",
        args: [item, order, 1 + i],
        key: `item-${item}`,
      });
    }
    out.push({
      table: "orders",
      sql: "UPDATE orders SET item_count = item_count + ?, total = total + ? WHERE id = ?",
      args: [count, 10 * count, order],
      key: `order-${order}`,
    });
    return out;
  }

  #deleteOrder(order: number): MixStatement[] {
    this.#orders.delete(order);
    return [
      {
        table: "order_items",
        sql: "DELETE FROM order_items WHERE order_id = ?",
        args: [order],
        key: `order-${order}`,
      },
      { table: "orders", sql: "DELETE FROM orders WHERE id = ?", args: [order], key: `order-${order}` },
    ];
  }
}

/**
 * What a serial, once-each application of each host's first `committed[h]` transactions leaves
 * (host h of `committed.length`, seeded with `seed`), applied to a new SQLite file at `file`.
 */
export function orderOracle(
  file: string,
  seed: number,
  committed: number[],
): { orders: number[][]; items: number[][] } {
  const db = new Database(file, { create: true });
  try {
    db.run("PRAGMA foreign_keys = ON");
    for (const ddl of ORDER_SCHEMA) db.run(ddl);
    db.transaction(() => {
      committed.forEach((count, host) => {
        const mix = new OrderMix(seed, host, committed.length);
        for (let i = 0; i < count; i++) for (const s of mix.next()) db.query(s.sql).run(...s.args);
      });
    })();
    const ints = (sql: string) =>
      db
        .query(sql)
        .values()
        .map((r) => r.map(Number));
    return {
      orders: ints("SELECT id, total, item_count FROM orders ORDER BY id"),
      items: ints("SELECT id, order_id, qty FROM order_items ORDER BY id"),
    };
  } finally {
    db.close();
  }
}
