/** A 1-based position in a TOML document. */
export interface Position {
  line: number;
  column: number;
}

/**
 * Maps key paths (`app.x.db.y.tables[2]`) to where their key is written in TOML text, so validation
 * errors can point at a line. A line scanner, not a parser: it reads `[table]` headers and
 * `key =` lines; a path with no line of its own maps to its nearest enclosing key or header.
 */
export function keyLocator(text: string): (keyPath: string) => Position | undefined {
  const found = new Map<string, Position>();
  let table: string[] = [];
  let inMultiline: string | null = null;
  text.split(/\r?\n/).forEach((line, i) => {
    // Skip the inside of """ / ''' strings: their lines may look like keys.
    for (const quote of ['"""', "'''"]) {
      const count = line.split(quote).length - 1;
      if (inMultiline === quote && count % 2 === 1) {
        inMultiline = null;
        return;
      }
      if (inMultiline === null && count % 2 === 1) {
        inMultiline = quote;
      }
    }
    if (inMultiline !== null && !/=\s*("""|''')/.test(line)) return;

    const header = /^(\s*)\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$/.exec(line);
    if (header) {
      table = splitKey(header[2]!);
      remember(found, table, { line: i + 1, column: header[1]!.length + 1 });
      return;
    }
    const assignment =
      /^(\s*)((?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*=/.exec(line);
    if (assignment)
      remember(found, [...table, ...splitKey(assignment[2]!)], { line: i + 1, column: assignment[1]!.length + 1 });
  });

  return (keyPath) => {
    const parts = splitKey(keyPath.replace(/\[\d+\]/g, ""));
    for (let n = parts.length; n > 0; n--) {
      const position = found.get(parts.slice(0, n).join("\u0000"));
      if (position) return position;
    }
    return undefined;
  };
}

function remember(found: Map<string, Position>, path: string[], position: Position): void {
  const key = path.join("\u0000");
  if (!found.has(key)) found.set(key, position);
}

/** Splits a dotted TOML key (`a."b.c".d`) into its parts, unquoting quoted parts. */
function splitKey(dotted: string): string[] {
  const parts: string[] = [];
  const re = /\s*("([^"]*)"|'([^']*)'|[^."']+)\s*(?:\.|$)/y;
  let match: RegExpExecArray | null;
  while (re.lastIndex < dotted.length && (match = re.exec(dotted))) {
    parts.push(match[2] ?? match[3] ?? match[1]!.trim());
  }
  return parts;
}
