/*
 * Masking secrets in text that leaves the process: log lines, error messages, status output.
 * Which strings are secrets is decided where they are known (a writer's own password, the
 * config's `[connection]` values: config/secret-values.ts); how they are hidden is decided here.
 */

/**
 * Replaces every occurrence of each secret in `text` — and of its percent-encoded form, as it
 * appears inside a URL — with `***`, longest first so a secret containing another is hidden whole.
 * Empty and undefined secrets are ignored.
 */
export function maskSecrets(text: string, secrets: ReadonlyArray<string | undefined>): string {
  const forms = new Set<string>();
  for (const secret of secrets) {
    if (!secret) continue;
    forms.add(secret);
    forms.add(encodeURIComponent(secret));
  }
  let out = text;
  for (const form of [...forms].sort((a, b) => b.length - a.length)) out = out.split(form).join("***");
  return out;
}

/** `text` with the password of every `scheme://user:password@` in it masked, secrets known or not. */
export function maskUrlPasswords(text: string): string {
  return text.replace(/([a-z][a-z0-9+.-]*:\/\/[^:/?#@\s]*:)[^@/\s]+@/gi, "$1***@");
}

/**
 * A URL with its password (userinfo and password/token/secret/key parameters) replaced by `***`; unparsable
 * text is fully masked.
 */
export function maskUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    for (const key of [...u.searchParams.keys()]) {
      if (/pass|token|secret|key/i.test(key)) u.searchParams.set(key, "***");
    }
    return u.toString();
  } catch {
    return "***";
  }
}

/** The password embedded in a URL's userinfo or `password=` parameter, if any (decoded). */
export function urlPassword(url: string | undefined): string | undefined {
  if (!url) return undefined;
  try {
    const u = new URL(url);
    const fromParams = u.searchParams.get("password") ?? undefined;
    return u.password ? decodeURIComponent(u.password) : fromParams;
  } catch {
    return undefined;
  }
}

/** A copy of `error` (name, code, message, stack, cause chain) with every secret masked; other values pass through. */
export function maskError(error: unknown, secrets: ReadonlyArray<string | undefined>): unknown {
  if (!(error instanceof Error)) return typeof error === "string" ? maskSecrets(error, secrets) : error;
  const copy = new Error(
    maskSecrets(error.message, secrets),
    error.cause === undefined ? undefined : { cause: maskError(error.cause, secrets) },
  );
  copy.name = error.name;
  if (error.stack) copy.stack = maskSecrets(error.stack, secrets);
  const code = (error as { code?: unknown }).code;
  if (code !== undefined) Object.assign(copy, { code });
  return copy;
}

/**
 * `error` itself when no secret appears in its message or stack (keeping every driver field), else a masked
 * copy (see maskError).
 */
export function maskCause(error: unknown, secrets: ReadonlyArray<string | undefined>): unknown {
  const text = error instanceof Error ? `${error.message}\n${error.stack ?? ""}` : String(error ?? "");
  return maskSecrets(text, secrets) === text ? error : maskError(error, secrets);
}
