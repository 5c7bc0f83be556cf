import { SecretsError } from "../errors.ts";

const LINE = /^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*(.*)$/;

/**
 * Parses `.env` text: `KEY=value`, `export KEY=value`, 'single' (literal), "double" (\n \r \t \" \\
 * escapes), unquoted values with a trailing ` # comment`, blank and `#` lines, CRLF. A later
 * duplicate wins. A malformed line throws `SecretsError` naming the file and line (never its value).
 */
export function parseDotenv(text: string, file: string): Record<string, string> {
  const out: Record<string, string> = {};
  const lines = text.split(/\r?\n/);
  lines.forEach((line, i) => {
    if (line.trim() === "" || line.trim().startsWith("#")) return;
    const fail = (why: string) => new SecretsError(`${file}:${i + 1}: ${why}`);
    const match = LINE.exec(line);
    if (!match) throw fail('expected KEY=value (KEY: letters, digits and "_")');
    const [, key, rest] = match as unknown as [string, string, string];
    out[key] = parseValue(rest, fail);
  });
  return out;
}

function parseValue(rest: string, fail: (why: string) => SecretsError): string {
  const quote = rest[0];
  if (quote === "'" || quote === '"') {
    let value = "";
    let i = 1;
    for (; i < rest.length && rest[i] !== quote; i++) {
      if (quote === '"' && rest[i] === "\\" && i + 1 < rest.length) {
        i++;
        const c = rest[i]!;
        value += c === "n" ? "\n" : c === "r" ? "\r" : c === "t" ? "\t" : c === '"' || c === "\\" ? c : `\\${c}`;
      } else {
        value += rest[i];
      }
    }
    if (i >= rest.length) throw fail(`unterminated ${quote === "'" ? "single" : "double"}-quoted value`);
    const after = rest.slice(i + 1).trim();
    if (after !== "" && !after.startsWith("#")) throw fail("unexpected text after the closing quote");
    return value;
  }
  // Unquoted: a `#` starts a comment only after whitespace, so `a#b` stays a value.
  const comment = rest.search(/\s#/);
  return (comment >= 0 ? rest.slice(0, comment) : rest).trim();
}
