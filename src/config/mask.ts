/** Replaces every occurrence of each secret in `text` with `***` (longest first; empty secrets ignored). */
export function maskSecrets(text: string, secrets: readonly string[]): string {
  const sorted = [...new Set(secrets)].filter((s) => s.length > 0).sort((a, b) => b.length - a.length);
  let out = text;
  for (const secret of sorted) out = out.split(secret).join("***");
  return out;
}

/** A copy of `error` (name, code, message, cause chain) with every secret masked; other values pass through. */
export function maskError(error: unknown, secrets: readonly string[]): unknown {
  if (!(error instanceof Error)) return typeof error === "string" ? maskSecrets(error, secrets) : error;
  const copy = new Error(maskSecrets(error.message, secrets), error.cause === undefined ? undefined : { cause: maskError(error.cause, secrets) });
  copy.name = error.name;
  if (error.stack) copy.stack = maskSecrets(error.stack, secrets);
  const code = (error as { code?: unknown }).code;
  if (code !== undefined) Object.assign(copy, { code });
  return copy;
}
