// The tenant vocabulary (SPEC §4c): what a tenant name may be, and how a tenant template's
// connection becomes one tenant's. Shared by the producer (names checked at the door), the config
// (a template is a connection containing the placeholder) and the drain (a writer per tenant).

/** What a tenant template's `[connection]` values contain where each tenant's name goes. */
export const TENANT_PLACEHOLDER = "{tenant}";

/**
 * A letter or digit, then letters, digits, `_` and `-`, 63 characters at most: a name that is safe
 * as it stands in a URL's host or path, a database name and a file name — no `/`, `.` or `%`, so
 * no path traversal and nothing a URL or a server would decode into something else.
 */
const TENANT_NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/;

/**
 * Why `name` cannot name a tenant, or null when it can. The producer, the config and the drain ask
 * this one question, so a name one of them accepts is never refused by another.
 */
export function tenantNameProblem(name: unknown): string | null {
  if (typeof name === "string" && TENANT_NAME.test(name)) return null;
  const shown = typeof name === "string" ? JSON.stringify(name) : String(name);
  return `invalid tenant name ${shown}: ${whatIsWrong(name)}; a tenant name is 1–63 ASCII letters, digits, _ and -, starting with a letter or digit (it goes into a URL, a database name and a file name)`;
}

function whatIsWrong(name: unknown): string {
  if (typeof name !== "string") return `expected a string, got ${name === null ? "null" : typeof name}`;
  if (name.length === 0) return "it is empty";
  if (name.length > 63) return `it is ${name.length} characters long`;
  const bad = [...name].find((c) => !/[A-Za-z0-9_-]/.test(c));
  return bad === undefined ? "it starts with _ or -" : `it contains ${JSON.stringify(bad)}`;
}

/** True when a string anywhere in `value` (at any depth of objects and arrays) contains `{tenant}`. */
export function hasTenantPlaceholder(value: unknown): boolean {
  if (typeof value === "string") return value.includes(TENANT_PLACEHOLDER);
  if (Array.isArray(value)) return value.some(hasTenantPlaceholder);
  if (isPlainObject(value)) return Object.values(value).some(hasTenantPlaceholder);
  return false;
}

/**
 * A deep copy of `value` with every `{tenant}` in every string replaced by `tenant`; other values
 * are kept as they are. The caller has checked the name (`tenantNameProblem`).
 */
export function withTenant<T>(value: T, tenant: string): T {
  return substitute(value, tenant) as T;
}

function substitute(value: unknown, tenant: string): unknown {
  if (typeof value === "string") return value.split(TENANT_PLACEHOLDER).join(tenant);
  if (Array.isArray(value)) return value.map((v) => substitute(v, tenant));
  if (isPlainObject(value))
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, substitute(v, tenant)]));
  return value;
}

/** A TOML table or an object literal; a Date, a Uint8Array or a class instance is a value, kept as is. */
function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}
