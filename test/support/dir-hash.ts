import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";

/**
 * sha256 of every file under `dir`, keyed by relative path: equal hashes = nothing created or
 * changed (a new file shows up as a new key).
 */
export function hashTree(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const entry of fs.readdirSync(dir, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const file = path.join(entry.parentPath, entry.name);
    out[path.relative(dir, file)] = createHash("sha256").update(fs.readFileSync(file)).digest("hex");
  }
  return out;
}
