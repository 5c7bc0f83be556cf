/** Replaces every occurrence of each secret in `text` with `***` (longest first; empty secrets ignored). */
export function maskSecrets(text: string, secrets: readonly string[]): string {
  const sorted = [...new Set(secrets)].filter((s) => s.length > 0).sort((a, b) => b.length - a.length);
  let out = text;
  for (const secret of sorted) out = out.split(secret).join("***");
  return out;
}
