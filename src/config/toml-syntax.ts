// A TOML syntax error said in plain words: smol-toml names what its parser met ("control
// characters are not allowed in strings" for a string left open at the end of its line); an
// operator needs what to fix. The wording never quotes the file's text: a line may hold a
// literal credential.

/** Where the parser stopped: the document, and the 1-based line and column it reports. */
export interface TomlSyntaxSite {
  text: string;
  line: number;
  column: number;
}

type Explain = (site: TomlSyntaxSite) => string;

const PLAIN: Record<string, Explain> = {
  // Reported at the line's end, where the newline is the control character: the string never closed.
  "control characters are not allowed in strings": (site) =>
    /^[\r\n]?$/.test(charAt(site))
      ? 'unterminated string: a quoted value must close on the line it starts ("""…""" spans lines)'
      : `a control character (U+${charAt(site).codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}) inside a string: write it as an escape such as \\t or \\u0001`,
  "control characters are not allowed in comments": () => "a control character inside a comment",
  "unfinished string": () => "unterminated string: no closing quote before the end of the file",
  "unrecognised escape sequence": () =>
    "unknown escape sequence in a \"…\" string: write a backslash as \\\\, or use '…' (no escapes) for a Windows path or a regex",
  "invalid escape: only line-ending whitespace may be escaped": () =>
    "a backslash at the end of a line may be followed only by spaces",
  "invalid value": (site) =>
    restOfLine(site).trim() === "" || restOfLine(site).trimStart().startsWith("#")
      ? "missing value after ="
      : 'invalid value: a string needs quotes ("…"), a boolean is true or false, a number is written in digits',
  "illegal leading zero": () => "a number may not start with 0",
  "illegal character in key": (site) =>
    lineAt(site).trimStart().startsWith("[") && !lineAt(site).includes("]")
      ? "unclosed table header: expected ] at the end of [ …"
      : lineAt(site).includes("=")
        ? "a bare key may hold only letters, digits, - and _ (quote it otherwise)"
        : "expected = after the key (key = value)",
  "incomplete key-value: cannot find end of key": () => "expected = after the key (key = value)",
  "unexpected end of key": () => "missing key before =",
  "illegal empty bare key": () => "empty key: a key must have at least one character",
  "expected comma or end of structure": () =>
    "expected , or the closing ] or }: an array or inline table is not closed",
  "unfinished table": () => "unclosed inline table: no closing }",
  "unfinished array": () => "unclosed array: no closing ]",
  "expected end of table array declaration": () => "unclosed table array header: expected ]] at the end of [[ …",
  "each key-value declaration must be followed by an end-of-line": () =>
    "expected the end of the line after the value: one key = value per line",
  "trying to redefine an already defined table or value": () =>
    "defined twice: this key or table is already defined above",
};

/** smol-toml's `reason` for a syntax error at `site`, in plain words (its own words when it has none of ours). */
export function plainTomlReason(reason: string, site: TomlSyntaxSite): string {
  return PLAIN[reason]?.(site) ?? reason;
}

function lineAt(site: TomlSyntaxSite): string {
  return site.text.split("\n")[site.line - 1] ?? "";
}

function charAt(site: TomlSyntaxSite): string {
  return lineAt(site).replace(/\r$/, "")[site.column - 1] ?? "";
}

function restOfLine(site: TomlSyntaxSite): string {
  return lineAt(site).slice(site.column - 1);
}
