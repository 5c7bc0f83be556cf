import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";

/**
 * sha256 of every file under `dir`, keyed by relative path: equal hashes = nothing created or
 * changed (a new file shows up as a new key). A symlink counts as its target's path, not followed:
 * Bun's recursive readdir follows links, which made a project's node_modules link hash the repo.
 */
export function hashTree(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (sub: string) => {
    for (const entry of fs.readdirSync(path.join(dir, sub), { withFileTypes: true })) {
      const rel = path.join(sub, entry.name);
      const file = path.join(dir, rel);
      if (entry.isSymbolicLink()) out[rel] = `-> ${fs.readlinkSync(file)}`;
      else if (entry.isDirectory()) walk(rel);
      else if (entry.isFile()) out[rel] = createHash("sha256").update(fs.readFileSync(file)).digest("hex");
    }
  };
  walk("");
  return out;
}
