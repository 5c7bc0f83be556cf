import { TENANT_PLACEHOLDER } from "../tenant.ts";

/** Environment lookups used for `${VAR}`: process env merged with `.env` and Doppler. */
export type EnvMap = Record<string, string | undefined>;

const VAR_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * Replaces every `${VAR}` in `value` with `env[VAR]`; `$${` yields a literal `${`. `onVar` sees each variable
 * used. Throws a plain `Error` saying which variable is missing or malformed (the caller adds the key path).
 */
export function interpolate(value: string, env: EnvMap, onVar?: (name: string, value: string) => void): string {
  if (!value.includes("${")) return value;
  let out = "";
  let i = 0;
  while (i < value.length) {
    if (value.startsWith("$${", i)) {
      out += "${";
      i += 3;
      continue;
    }
    if (value.startsWith("${", i)) {
      const end = value.indexOf("}", i + 2);
      if (end < 0) throw new Error(`unclosed "\${" at character ${i + 1} (write "$\${" for a literal "\${")`);
      const name = value.slice(i + 2, end);
      if (!VAR_NAME.test(name)) throw new Error(`invalid variable name "\${${name}}" (letters, digits and _ only)`);
      const resolved = env[name];
      if (resolved === undefined)
        throw new Error(
          `environment variable "${name}" is not set (process env, .env, Doppler)${name === "tenant" ? `; a tenant template names each tenant's database with ${TENANT_PLACEHOLDER}, without the $` : ""}`,
        );
      onVar?.(name, resolved);
      out += resolved;
      i = end + 1;
      continue;
    }
    out += value[i];
    i++;
  }
  return out;
}
