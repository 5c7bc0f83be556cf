// A deterministic stream of groups for several tenants, each tenant's groups numbered 1, 2, 3, …:
// group g of tenant T is either one row into `ev` (T, g), or a transaction across two tables — the
// `ev` row and one or two `audit` rows (T, g, part) — pushed with `{ tenant: T }`. The tenant of
// each next group is drawn from a seeded PRNG; what group g of T holds depends only on the seed, T
// and g, so the producer and the test's oracle agree on it without sharing the stream.

/** The remote schema of every tenant's database (PostgreSQL): `pos` records the landing order. */
export const TENANT_SCHEMA = [
  "CREATE TABLE ev (pos bigserial PRIMARY KEY, tenant text NOT NULL, g integer NOT NULL)",
  "CREATE TABLE audit (pos bigserial PRIMARY KEY, tenant text NOT NULL, g integer NOT NULL, part integer NOT NULL)",
];

export interface TenantStatement {
  table: "ev" | "audit";
  sql: string;
  args: [string, number] | [string, number, number];
}

/** A 32-bit mix of the seed, the tenant and the group number. */
function hash(seed: number, tenant: string, g: number): number {
  let h = (seed ^ 0x9e3779b9) >>> 0;
  for (const c of `${tenant}#${g}`) h = Math.imul(h ^ c.charCodeAt(0), 0x01000193) >>> 0;
  h ^= h >>> 15;
  return Math.imul(h, 0x2c1b3c6d) >>> 0;
}

/** Group g of `tenant`: its statements in push order (one `ev` row, then 0–2 `audit` rows in one transaction). */
export function tenantGroup(seed: number, tenant: string, g: number): TenantStatement[] {
  const parts = hash(seed, tenant, g) % 3; // 0: a single push; 1 or 2: a transaction across both tables
  const out: TenantStatement[] = [{ table: "ev", sql: "INSERT INTO ev (tenant, g) VALUES (?, ?)", args: [tenant, g] }];
  for (let part = 1; part <= parts; part++)
    out.push({
      table: "audit",
      sql: "INSERT INTO audit (tenant, g, part) VALUES (?, ?, ?)",
      args: [tenant, g, part],
    });
  return out;
}

/** A little PRNG (the producer's choice of tenant). */
export function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => (s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32;
}
