// Output formatting for the CLI: aligned tables, durations, truncation, colour and stable JSON.
// Command output goes to stdout; logs go to stderr (see cli-logger.ts), so `--json` stays parseable.
import { maskSecrets, maskUrlPasswords } from "../masking.ts";

/** A column of a table: its header and whether values align right (numbers). */
export interface Column {
  header: string;
  right?: boolean;
}

/**
 * Renders rows as an aligned, two-space separated table with an upper-case header line; cells may carry
 * colour (`paint`).
 */
export function renderTable(columns: readonly Column[], rows: ReadonlyArray<readonly string[]>): string {
  const widths = columnWidths(columns, rows);
  const line = (cells: readonly string[]) =>
    columns
      .map((c, i) => {
        const cell = cells[i] ?? "";
        const pad = " ".repeat(Math.max(0, (widths[i] ?? 0) - visibleLength(cell)));
        // The last left-aligned column is not padded, so lines carry no trailing spaces.
        if (i === columns.length - 1 && !c.right) return cell;
        return c.right ? pad + cell : cell + pad;
      })
      .join("  ");
  return [line(columns.map((c) => c.header.toUpperCase())), ...rows.map(line)].join("\n");
}

function columnWidths(columns: readonly Column[], rows: ReadonlyArray<readonly string[]>): number[] {
  return columns.map((c, i) => Math.max(c.header.length, ...rows.map((r) => visibleLength(r[i] ?? ""))));
}

/**
 * Cuts the last column's cells (plain text) so that every line of `renderTable(columns, rows)` fits
 * in `width` characters, and says which rows were cut, so the caller can give their full text
 * elsewhere. `width` null (not a terminal): nothing is cut.
 */
export function fitLastColumn(
  columns: readonly Column[],
  rows: ReadonlyArray<readonly string[]>,
  width: number | null,
): { rows: string[][]; cut: number[] } {
  const last = columns.length - 1;
  const before = columnWidths(columns, rows)
    .slice(0, last)
    .reduce((n, w) => n + w + 2, 0);
  // However narrow the terminal, keep a readable start of the message; the terminal wraps the rest.
  const room = width === null ? Infinity : Math.max(20, width - before);
  const cut: number[] = [];
  const fitted = rows.map((r, i) => {
    const cell = r[last] ?? "";
    if (cell.length <= room) return [...r];
    cut.push(i);
    return [...r.slice(0, last), `${cell.slice(0, room - 1)}…`];
  });
  return { rows: fitted, cut };
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

/**
 * One line (whitespace runs become one space), at most `max` characters (an ellipsis marks the cut); `-` for
 * null or empty.
 */
export function oneLine(text: string | null | undefined, max = Infinity): string {
  if (!text) return "-";
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/**
 * `value` as one shell word (single-quoted when it holds anything but plain path characters), for a command
 * line printed to paste.
 */
export function shellWord(value: string): string {
  return /^[\w./@:+=-]+$/.test(value) ? value : `'${value.replaceAll("'", "'\\''")}'`;
}

/** A storage error's message names its file; where the line already starts with the file, drop it from the message. */
export function withoutFile(message: string, file: string): string {
  return message.replace(` ${file}:`, "").replace(`${file}: `, "");
}

/** How output may use the terminal: its width (null: no terminal, never cut anything) and colour. */
export interface OutputStyle {
  width: number | null;
  color: boolean;
}

/** Plain output: no width limit, no colour (a pipe, a file, a test). */
export const PLAIN: OutputStyle = { width: null, color: false };

/**
 * Stdout's style: on a terminal its width, and colour unless NO_COLOR is set (https://no-color.org); piped,
 * neither.
 */
export function stdoutStyle(env: Record<string, string | undefined> = process.env): OutputStyle {
  if (!process.stdout.isTTY) return PLAIN;
  return { width: process.stdout.columns || 80, color: !env.NO_COLOR };
}

const COLOURS = { red: 31, yellow: 33 } as const;

/** `text` in `colour` when the style allows colour. */
export function paint(text: string, colour: keyof typeof COLOURS, style: OutputStyle): string {
  return style.color ? `\u001B[${COLOURS[colour]}m${text}\u001B[39m` : text;
}

/** Text without its colour codes. */
export function stripAnsi(text: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: ESC is exactly what a colour code starts with
  return text.replace(/\u001B\[[0-9;]*m/g, "");
}

function visibleLength(text: string): number {
  return stripAnsi(text).length;
}

/** Writes text followed by a newline to stdout. */
export function print(text = ""): void {
  process.stdout.write(`${text}\n`);
}

/** Masks the config's secret values and any `scheme://user:password@` password (even without a config). */
export function redact(text: string, secrets: readonly string[]): string {
  return maskUrlPasswords(maskSecrets(text, secrets));
}
