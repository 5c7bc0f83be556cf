// Output formatting for the CLI: aligned tables, durations, truncation and stable JSON.
// Command output goes to stdout; logs go to stderr (see cli-logger.ts), so `--json` stays parseable.
import { maskSecrets, maskUrlPasswords } from "../masking.ts";

/** A column of a table: its header and whether values align right (numbers). */
export interface Column {
  header: string;
  right?: boolean;
}

/** Renders rows as an aligned, two-space separated table with an upper-case header line. */
export function renderTable(columns: readonly Column[], rows: ReadonlyArray<readonly string[]>): string {
  const widths = columns.map((c, i) => Math.max(c.header.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: readonly string[]) =>
    columns
      .map((c, i) => {
        const cell = cells[i] ?? "";
        const width = widths[i] ?? 0;
        // The last left-aligned column is not padded, so lines carry no trailing spaces.
        if (i === columns.length - 1 && !c.right) return cell;
        return c.right ? cell.padStart(width) : cell.padEnd(width);
      })
      .join("  ");
  return [line(columns.map((c) => c.header.toUpperCase())), ...rows.map(line)].join("\n");
}

/** Renders `key: value` pairs with the values aligned, for single-record views. */
export function renderFields(fields: ReadonlyArray<readonly [string, string]>): string {
  const width = Math.max(0, ...fields.map(([k]) => k.length));
  return fields.map(([k, v]) => `${`${k}:`.padEnd(width + 2)}${v}`).join("\n");
}

/** A compact human duration: `850ms`, `42s`, `5m12s`, `3h04m`, `2d03h`; `-` for null. */
export function formatAge(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "-";
  if (ms < 1000) return `${Math.max(0, Math.round(ms))}ms`;
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${String(s % 60).padStart(2, "0")}s`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h}h${String(m % 60).padStart(2, "0")}m`;
  return `${Math.floor(h / 24)}d${String(h % 24).padStart(2, "0")}h`;
}

/** One line, at most `max` characters (an ellipsis marks the cut); `-` for null or empty. */
export function oneLine(text: string | null | undefined, max = 60): string {
  if (!text) return "-";
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/** A storage error's message names its file; where the line already starts with the file, drop it from the message. */
export function withoutFile(message: string, file: string): string {
  return message.replace(` ${file}:`, "").replace(`${file}: `, "");
}

/** Writes text followed by a newline to stdout. */
export function print(text = ""): void {
  process.stdout.write(`${text}\n`);
}

/** Masks the config's secret values and any `scheme://user:password@` password (even without a config). */
export function redact(text: string, secrets: readonly string[]): string {
  return maskUrlPasswords(maskSecrets(text, secrets));
}
