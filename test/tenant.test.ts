// The tenant vocabulary (SPEC §4c): which names may name a tenant, and how a template's connection
// becomes one tenant's.
import { describe, expect, test } from "bun:test";
import { hasTenantPlaceholder, TENANT_PLACEHOLDER, tenantNameProblem, withTenant } from "../src/tenant.ts";

const RULE =
  "a tenant name is 1–63 ASCII letters, digits, _ and -, starting with a letter or digit (it goes into a URL, a database name and a file name)";

describe("tenantNameProblem", () => {
  test.each(["acme", "A", "7", "tenant_42", "eu-west-1", "ACME_Corp-2", "0abc", "a_", "a-", "x".repeat(63)])(
    "accepts %j",
    (name) => {
      expect(tenantNameProblem(name)).toBeNull();
    },
  );

  test.each([
    ["", "it is empty"],
    ["x".repeat(64), "it is 64 characters long"],
    ["..", 'it contains "."'],
    ["a..b", 'it contains "."'],
    ["../etc", 'it contains "."'],
    ["a/b", 'it contains "/"'],
    ["a\\b", 'it contains "\\\\"'],
    ["a%2e", 'it contains "%"'],
    ["a b", 'it contains " "'],
    [" acme", 'it contains " "'],
    ["acme\n", 'it contains "\\n"'],
    ["café", 'it contains "é"'],
    ["ａcme", 'it contains "ａ"'],
    ["a{tenant}", 'it contains "{"'],
    ["a:b", 'it contains ":"'],
    ["a@b", 'it contains "@"'],
    ["_acme", "it starts with _ or -"],
    ["-acme", "it starts with _ or -"],
  ])("refuses %j: %s", (name, why) => {
    expect(tenantNameProblem(name)).toBe(`invalid tenant name ${JSON.stringify(name)}: ${why}; ${RULE}`);
  });

  test.each([
    [null, "expected a string, got null"],
    [undefined, "expected a string, got undefined"],
    [42, "expected a string, got number"],
  ])("refuses %p, which is no string", (name, why) => {
    expect(tenantNameProblem(name)).toBe(`invalid tenant name ${String(name)}: ${why}; ${RULE}`);
  });
});

describe("hasTenantPlaceholder", () => {
  test.each([
    [`remote/${TENANT_PLACEHOLDER}.db`, true],
    ["postgres://app@db/tenant_{tenant}", true],
    [{ url: "libsql://{tenant}-acme.turso.io" }, true],
    [{ options: { search_path: ["public", "t_{tenant}"] } }, true],
    [[1, [{ deep: "x{tenant}y" }]], true],
    ["${tenant}", true],
    ["{Tenant}", false],
    ["{tenant", false],
    [{ tenant: "acme" }, false],
    [{ "{tenant}": "a key is no value" }, false],
    [{ port: 5432, ssl: true, nothing: null }, false],
    [new Date(0), false],
    [undefined, false],
  ])("%j: %p", (value, expected) => {
    expect(hasTenantPlaceholder(value)).toBe(expected);
  });
});

describe("withTenant", () => {
  test("replaces every {tenant} in every string at any depth, and leaves the template as it was", () => {
    const template = {
      url: "postgres://app@{tenant}.db.internal/tenant_{tenant}",
      port: 5432,
      ssl: false,
      password: null,
      options: { search_path: ["public", "s_{tenant}"], label: "{tenant}/{tenant}" },
    };
    const copy = structuredClone(template);
    expect(withTenant(template, "acme")).toEqual({
      url: "postgres://app@acme.db.internal/tenant_acme",
      port: 5432,
      ssl: false,
      password: null,
      options: { search_path: ["public", "s_acme"], label: "acme/acme" },
    });
    expect(template).toEqual(copy);
  });

  test("returns new objects and arrays, never the template's own", () => {
    const template = { nested: { list: ["{tenant}"] } };
    const resolved = withTenant(template, "acme");
    expect(resolved.nested).not.toBe(template.nested);
    expect(resolved.nested.list).not.toBe(template.nested.list);
  });

  test("keeps values that are not plain objects as they are", () => {
    const bytes = new Uint8Array([1, 2]);
    const when = new Date(0);
    const resolved = withTenant({ bytes, when, n: 1n }, "acme");
    expect(resolved.bytes).toBe(bytes);
    expect(resolved.when).toBe(when);
    expect(resolved.n).toBe(1n);
  });

  test("takes the name as text: no $ pattern of String.replace applies", () => {
    expect(withTenant("db_{tenant}", "a$&b")).toBe("db_a$&b");
  });
});
