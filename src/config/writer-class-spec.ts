/** `"./w.ts:MyWriter"` → module `./w.ts`, export `MyWriter`; no `:Export` means the default export. */
export function splitWriterClass(spec: string): { module: string; exportName: string } {
  const colon = spec.lastIndexOf(":");
  // A colon followed by a path (a drive letter `C:\…`, a `file:/…` URL) is not an export separator.
  if (colon < 0 || spec.slice(colon + 1).includes("/") || spec.slice(colon + 1).includes("\\")) {
    return { module: spec.trim(), exportName: "default" };
  }
  return { module: spec.slice(0, colon).trim(), exportName: spec.slice(colon + 1).trim() || "default" };
}

/**
 * `./x` and `../x` are paths relative to the config file (absolute paths are paths too); anything else is a
 * package.
 */
export function isRelativePath(spec: string): boolean {
  return spec.startsWith("./") || spec.startsWith("../") || spec === "." || spec === "..";
}
